"""What a pipeline kind says about each of its model roles: the one definition every shared rule reads.

A kind's config class lists its roles in `ROLES` (roll/configs/base.py); the config checks (worker class,
strategy, LoRA, micro-batching), the pipeline (which roles hold devices, which are trained and checkpointed,
optimizer steps for the LR schedule), the ROLL translation (which ROLL key fills a role's model path) and the
start-up checks read these specs, never a list of role names of their own.
"""

from dataclasses import dataclass

ACTOR_WORKER = "roll.workers.actor_worker.ActorWorker"
CRITIC_WORKER = "roll.workers.critic_worker.CriticWorker"

# What a strategy class can serve (its `roles` attribute, roll/strategies/base.py): the capability a role needs.
CAPABILITIES = ("train", "critic", "generate", "score")


@dataclass(frozen=True)
class RoleSpec:
    name: str  # the role's key in the YAML, and its Cluster's name
    worker_cls: str  # the worker class when `<role>.worker_cls` is unset
    capability: str  # what its strategy must serve (CAPABILITIES)
    trained: bool = False  # runs optimizer steps (LR schedule, train micro-batching); its engine state is checkpointed
    lora: bool = False  # may train LoRA adapters (the trained policy)
    roll_model_key: str | None = None  # ROLL's top-level key that fills an unset model_name_or_path (`pretrain`)

    def __post_init__(self):
        if self.capability not in CAPABILITIES:
            raise ValueError(f"role {self.name}: capability {self.capability!r} is not one of {CAPABILITIES}")


# The roles of the policy-optimisation kinds (RLVR, agentic): ROLL's names and meanings.
ACTOR_TRAIN = RoleSpec("actor_train", ACTOR_WORKER, "train", trained=True, lora=True, roll_model_key="pretrain")
ACTOR_INFER = RoleSpec("actor_infer", ACTOR_WORKER, "generate", roll_model_key="pretrain")
REFERENCE = RoleSpec("reference", ACTOR_WORKER, "score", roll_model_key="pretrain")
CRITIC = RoleSpec("critic", CRITIC_WORKER, "critic", trained=True, roll_model_key="reward_pretrain")
