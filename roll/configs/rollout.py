"""Settings of a kind whose rollout engine (actor_infer) serves the weights a trainer (actor_train) learns: the
weight sync between them, and ROLL's rollout dump / replay. RLVR and agentic (roll.configs.algorithm) build on it;
a kind without generation (SFT, DPO, offline distillation) does not, so these keys are unknown there."""

from dataclasses import dataclass
from typing import Literal

from roll.configs.base import PipelineConfig
from roll.configs.loader import ConfigError, field_help


@dataclass
class RolloutMockConfig:
    enable: bool = field_help(False, "turn ROLL's rollout dump / replay on")
    mode: Literal["dump", "mock"] = field_help(
        "dump",
        "dump: store each step's rollout (the scored batch, as training receives it) and each validation's; "
        "mock: replay them instead of generating, so two runs train on identical samples (precision alignment "
        "of engines or strategies); a step missing from the dump is an error",
    )
    dump_dir: str = field_help(
        "./rollout_mock_dumps", "where the pickles go: <dump_dir>/train|val/step_<NNNNNN>.pkl (0-based step)"
    )


@dataclass
class RolloutConfig(PipelineConfig):
    model_update_buffer_size_mb: float = field_help(
        1024.0,
        "weight sync actor_train → actor_infer in buckets of at most this many MB (a larger single tensor "
        "goes alone): the sync needs about one bucket of extra memory, not a second copy of the model",
        bounds="(0, inf)",
    )
    weight_sync_method: Literal["auto", "object_store", "collective", "ipc"] = field_help(
        "auto",
        "how the buckets travel: ipc (shared memory; colocated roles), collective (a gloo/NCCL broadcast "
        "group; separate devices), object_store (Ray; anything). auto: ipc when every actor_infer worker "
        "shares a device with an actor_train worker, collective when none does, else object_store",
    )
    weight_sync_check: Literal["checksum", "full", "off"] = field_help(
        "checksum",
        "verification of each step's weight sync: checksum (what actor_train sent, in the dtype it sent, against "
        "what actor_infer serves; ~0.1-0.3% of a step at 0.36B on a GPU, estimated), full (checksums + a probe "
        "generated and scored by both roles; ~20% of that step, measured) or off. The sync at start-up, after a "
        "resume and after a recovery is always checked in full (docs/strategies.md, Verification)",
    )
    weight_sync_full_check_steps: int = field_help(
        0,
        "also check the sync in full after every N-th step (N steps trained); 0 = only at start-up, resume "
        "and recovery",
        bounds="[0, inf)",
    )
    rollout_mock: RolloutMockConfig | None = field_help(
        None, "ROLL's rollout dump / replay for precision-alignment tests (docs/reliability.md, Rollout dump)"
    )
    rollout_dump_dir: str | None = field_help(
        None,
        "ROLL's rollout log: each training step's samples as one JSON line of columns (prompt, responses, scores, "
        "tag, ..., global_step) in <dir>/rollout_dump_data.step_<N>.jsonl (N 0-based); null = off",
    )
    lora_weight_sync: Literal["merged", "adapter"] = field_help(
        "merged",
        "with a LoRA actor_train: merged (the base weights with the adapters merged in, for any rollout "
        "engine) or adapter (only the adapter matrices, served by vLLM's LoRA support: actor_infer vllm "
        "with strategy_config enable_lora: true and max_lora_rank ≥ lora_rank)",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.weight_sync_full_check_steps and self.weight_sync_check == "full":
            raise ConfigError(
                f"'weight_sync_full_check_steps' = {self.weight_sync_full_check_steps} has no effect with "
                f"weight_sync_check: full (every sync is checked in full): set it to 0 or weight_sync_check to "
                f"checksum or off"
            )
