"""The PPO update, a component the policy-optimisation kinds (RLVR, agentic) compose into their pipeline:
everything after a rollout's batch is scored.

    1 forward passes   old log-probs (actor_train; skipped where the rollout's are exact), the estimator's extra
                       passes (e.g. Σπ²), reference log-probs, critic values, on-policy distillation's teacher
                       log-probs: at once where their roles share no device (roll.pipeline.core.concurrency)
    2 step maths       rollout IS, old-log-prob choice, reward shaping, KL in the reward (the KL controller),
                       advantages (with the teachers' KL: roll.pipeline.core.opd), train-infer correction
                       (roll.pipeline.core.step_maths)
    3 train            critic, then actor_train (ppo_epochs × mini-batches; LossSettings with the batch)
    4 weight sync      actor_train → actor_infer, verified (roll.pipeline.core.weight_sync)

Its driver state (KL coefficient, old-log-prob choice) is saved in checkpoints; the initial sync of every
(re)start is its `start`. A kind without generation (SFT, DPO, distillation) composes none of this.
"""

from roll.algorithms import get_adv_estimator_spec, get_kl_controller
from roll.configs import describe_reference, reference_source
from roll.configs.policy_loss import loss_settings
from roll.distributed.cluster import Cluster
from roll.distributed.data_proto import DataProto
from roll.pipeline.core import step_maths
from roll.pipeline.core.component import PipelineComponent
from roll.pipeline.core.concurrency import lane_roles, lanes_by_devices, run_lanes
from roll.pipeline.core.metrics import mean_of_ranks
from roll.pipeline.core.old_log_probs import OldLogProbs
from roll.pipeline.core.opd import teacher_phases
from roll.pipeline.core.weight_sync import WeightSync
from roll.utils.logging import get_logger
from roll.utils.progress import StepTimer

logger = get_logger("roll.pipeline")
# The worker method behind each extra forward pass an estimator can declare (roll.algorithms.FORWARD_PASSES).
FORWARD_PASS_METHODS = {"sum_pi_squared": "compute_sum_pi_squared"}
FORWARD_KEYS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]


class PPOUpdate(PipelineComponent):
    """`pipeline`: the thin pipeline it is part of (its clusters, PhaseMemory, ThreadPlan and `probe_batch()`,
    looked up at each call: a recovery restarts them). `rows_are_samples`: the training rows are the engine's
    prompts and samples token for token (roll.pipeline.core.old_log_probs). `before_sync(timer)` /
    `after_sync()`: the rollout's hooks around every sync (the last moment the engine serves the old weights;
    the engine now serves the new ones)."""

    def __init__(self, pipeline, rows_are_samples: bool, before_sync=None, after_sync=None):
        self.pipeline, self.config = pipeline, pipeline.config
        self.before_sync, self.after_sync = before_sync, after_sync
        self.kl_ctrl = get_kl_controller(_kl_ctrl_settings(self.config))
        self.old_log_probs = OldLogProbs(self.config, rows_are_samples)
        self.weight_sync: WeightSync | None = None

    def role_configs(self) -> dict:
        """name → WorkerConfig of the model roles the update uses: the trainer, the engine, the critic, the
        reference only where something reads its log-probs (reference_source), and on-policy distillation's
        teachers."""
        config = self.config
        roles = {"actor_train": config.actor_train, "actor_infer": config.actor_infer, "critic": config.critic}
        roles.update({name: worker for name, (_, worker) in config.extra_model_roles().items()})
        source = reference_source(config)
        if source == "reference":
            roles["reference"] = config.reference
        elif config.reference is not None and source == "actor_train":
            logger.info("reference role not started: %s", describe_reference(config))
        elif config.reference is not None:
            logger.info(
                "reference role not started: use_kl_loss and add_token_level_kl are both off, so "
                "nothing reads reference log-probs"
            )
        return {name: worker_config for name, worker_config in roles.items() if worker_config is not None}

    # ---- PipelineComponent ------------------------------------------------------------------------------
    def attach(self) -> None:
        clusters, config = self.pipeline.clusters, self.config
        self.weight_sync = WeightSync(
            clusters.get("actor_train"),
            clusters["actor_infer"],
            self.pipeline.probe_batch(),
            buffer_size_mb=config.model_update_buffer_size_mb,
            method=config.weight_sync_method,
            adapter_only=config.lora_weight_sync == "adapter",
            check=config.weight_sync_check,
            full_check_steps=config.weight_sync_full_check_steps,
        )

    def start(self, first_step: int) -> None:
        self.pipeline.memory.use("actor_train", "actor_infer")
        self.pipeline.threads.enter({"actor_train"}, {"actor_infer"})
        self.weight_sync.sync_and_verify(first_step - 1, initial=True)  # the engine starts from the trainer's weights

    def state_dict(self) -> dict:
        return {"kl_coef": float(self.kl_ctrl.value), "old_log_probs": self.old_log_probs.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.kl_ctrl.value = state["kl_coef"]
        self.old_log_probs.load_state_dict(state.get("old_log_probs"))  # absent: written before it existed

    def reset(self) -> None:
        self.kl_ctrl = get_kl_controller(_kl_ctrl_settings(self.config))
        self.old_log_probs.reset()

    # ---- the update -------------------------------------------------------------------------------------
    def update(self, batch: DataProto, step: int, timer: StepTimer, alongside: tuple = ()) -> dict:
        """Everything after the rewards: old/ref log-probs (and values), advantages, the PPO update and the
        weight sync; returns their metrics. `alongside`: more phases (name, roles, call) that need only the
        generated batch, run with the forward passes (e.g. RLVR's reward scoring)."""
        config, metrics, memory, threads = self.config, {}, self.pipeline.memory, self.pipeline.threads
        self.forward_passes(batch, timer, alongside)
        with timer.phase("advantages"):
            metrics.update(step_maths.apply_rollout_is(batch, config))  # on the generated tokens, before masks
            metrics.update(self.old_log_probs.settle(batch))  # the rollout log-probs where they are the old ones
            metrics.update(step_maths.apply_reward_shaping(batch, config))
            metrics.update(step_maths.apply_reward_kl(batch, config, self.kl_ctrl))
            metrics.update(step_maths.compute_advantages(batch, config))
            metrics.update(step_maths.apply_train_infer_correction(batch, config))  # after, as ROLL's pipelines
        with timer.phase("train"):
            metrics.update(self.train(batch, step))
        if self.before_sync is not None:
            self.before_sync(timer)
        with timer.phase("weight_sync"):
            memory.use("actor_train", "actor_infer")
            threads.enter({"actor_train"}, {"actor_infer"})
            metrics.update(self.weight_sync.sync_and_verify(step))
        if self.after_sync is not None:
            self.after_sync()
        return metrics

    def forward_log_probs(
        self, cluster: Cluster, batch: DataProto, key: str, method: str = "compute_log_probs"
    ) -> None:
        """`key` ← a per-token forward quantity of the responses: log-probs (by the worker's `method`, e.g.
        compute_reference_log_probs of a LoRA actor), or for a key of FORWARD_PASS_METHODS (e.g.
        "sum_pi_squared") that quantity."""
        view = batch.select(batch_keys=FORWARD_KEYS)
        view.meta_info["temperature"] = self.config.actor_infer.generating_args.temperature
        view, _ = view.pad_to_multiple(cluster.world_size)
        self.pipeline.memory.use(cluster.name)
        self.pipeline.threads.enter({cluster.name})
        if key in FORWARD_PASS_METHODS:
            values = getattr(cluster, FORWARD_PASS_METHODS[key])(view).batch[key]
        else:
            values = getattr(cluster, method)(view).batch["log_probs"]
        batch.batch[key] = values[: len(batch)]

    def compute_values(self, batch: DataProto) -> None:
        critic = self.pipeline.clusters["critic"]
        view = batch.select(batch_keys=FORWARD_KEYS)
        view, _ = view.pad_to_multiple(critic.world_size)
        self.pipeline.memory.use("critic")
        self.pipeline.threads.enter({"critic"})
        batch.batch["values"] = critic.compute_values(view).batch["values"][: len(batch)]

    def train(self, batch: DataProto, step: int) -> dict:
        clusters, memory, threads = self.pipeline.clusters, self.pipeline.memory, self.pipeline.threads
        loss_settings(self.config, step).attach(batch)
        metrics = {}
        if "critic" in clusters:
            memory.use("critic")
            threads.enter({"critic"})
            metrics.update(mean_of_ranks(clusters["critic"].train_step(batch)))
        memory.use("actor_train")
        threads.enter({"actor_train"})
        metrics.update(mean_of_ranks(clusters["actor_train"].train_step(batch)))
        return metrics

    def forward_passes(self, batch: DataProto, timer: StepTimer, alongside: tuple = ()) -> None:
        """old log-probs (actor_train), reference log-probs and critic values of the generated samples, and the
        `alongside` phases: at once where their roles share no device (roll.pipeline.core.concurrency)."""
        clusters = self.pipeline.clusters
        train = clusters["actor_train"]
        phases = []
        if self.old_log_probs.needs_pass(batch):  # skipped where the rollout log-probs are the old ones
            phases.append(
                ("old_log_probs", "actor_train", lambda: self.forward_log_probs(train, batch, "old_log_probs"))
            )
        for key in get_adv_estimator_spec(self.config.adv_estimator).forward_passes:  # e.g. Σπ²
            phases.append((key, "actor_train", lambda key=key: self.forward_log_probs(train, batch, key)))
        if "reference" in clusters:
            ref = clusters["reference"]
            phases.append(("ref_log_probs", "reference", lambda: self.forward_log_probs(ref, batch, "ref_log_probs")))
        elif reference_source(self.config) == "actor_train":  # LoRA: the base model = adapters disabled
            method = "compute_reference_log_probs"
            call = lambda: self.forward_log_probs(train, batch, "ref_log_probs", method=method)  # noqa: E731
            phases.append(("ref_log_probs", "actor_train", call))
        if "critic" in clusters:
            phases.append(("values", "critic", lambda: self.compute_values(batch)))
        phases += teacher_phases(self, batch, FORWARD_KEYS)  # on-policy distillation: each teacher's rows
        lanes = lanes_by_devices([*phases, *alongside], self.pipeline.memory.devices)
        with self.pipeline.threads.together(lane_roles(lanes)):  # the same threads whether or not the lanes overlap
            run_lanes(lanes, timer, parallel=self.pipeline.overlap_phases)


def _kl_ctrl_settings(config) -> dict:
    kind = "fixed" if config.target_kl is None else "adaptive"
    return {
        "type": kind,
        "kl_coef": config.init_kl_coef,
        "horizon": config.kl_horizon,
        "target_kl": config.target_kl if config.target_kl is not None else 0.0,
    }
