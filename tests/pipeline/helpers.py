"""Helpers of the end-to-end pipeline tests: validated configs from the example YAMLs, in-process runs."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_RLVR = REPO / "examples" / "tiny_rlvr"
AGENTIC_DEMO = REPO / "examples" / "agentic_demo"
# 8 prompts × 4 samples = 32 samples per step; 4 optimizer steps of 8 rows on one trainer rank.
SMALL_RUN = [
    "rollout_batch_size=8",
    "num_return_sequences_in_group=4",
    "actor_train.training_args.per_device_train_batch_size=8",
    "actor_train.infer_batch_size=32",
    "eval_steps=0",
    "track_with=stdout",
    "weight_sync_check=full",  # the tests verify every sync in full (probe included), not the default's checksums
]


# For runs whose test is not about the KL loss: without it the reference role is not started, one worker
# process fewer (~2 s of start-up on 2 cores, per pipeline and per recovery).
NO_REFERENCE = "use_kl_loss=false"

SMALL_AGENTIC = [
    "track_with=stdout",
    "eval_steps=0",
    "max_steps=1",
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=1",
    "weight_sync_check=full",
]


def data_overrides(demo_dir: Path) -> list[str]:
    return [
        f"model_path={demo_dir / 'model'}",
        f"actor_train.data_args.file_name={demo_dir / 'train.jsonl'}",
        f"validation.data_args.file_name={demo_dir / 'heldout.jsonl'}",
    ]


def make_config(
    demo_dir: Path,
    output_dir: Path,
    overrides=(),
    blocks: dict | None = None,
    config_path: Path = TINY_RLVR,
    config_name: str = "rlvr_tiny",
):
    """A validated RLVRConfig: the YAML, the demo's files, SMALL_RUN, then `overrides` (Hydra syntax);
    `blocks` are merged into the composed config before interpolation (e.g. a whole `critic` role)."""
    from omegaconf import OmegaConf

    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    base = [*data_overrides(demo_dir), f"output_dir={output_dir}", *SMALL_RUN]
    composed = compose_config(str(config_path), config_name, [*base, *overrides])
    if blocks:
        OmegaConf.set_struct(composed, False)  # Hydra's result refuses new keys such as a whole role
        composed = OmegaConf.merge(composed, OmegaConf.create(blocks))
    return load_rlvr_config(composed)


def agentic_config(
    model: Path, output_dir: Path, overrides=(), config_path=AGENTIC_DEMO, config_name="frozen_lake_traj"
):
    """A validated AgenticConfig: the YAML on the `agentic_model` fixture's model, SMALL_AGENTIC, then `overrides`."""
    from roll.configs import compose_config
    from roll.pipeline.agentic.config import load_agentic_config

    base = [f"model_path={model}", f"output_dir={output_dir}", *SMALL_AGENTIC]
    return load_agentic_config(compose_config(str(config_path), config_name, [*base, *overrides]))


def run_pipeline(config, sample_dir: Path | None = None, inspect=None) -> dict:
    """Runs one pipeline in this process and closes it; returns run()'s history. Samples go to
    `sample_dir` (SampleLogger); `inspect(pipeline) -> dict` runs after training, before the workers
    stop, and its result is added under "inspected"."""
    from roll.pipeline.core.callbacks import SampleLogger
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    callbacks = [SampleLogger(str(sample_dir))] if sample_dir is not None else []
    with RLVRPipeline(config, callbacks=callbacks) as pipeline:
        history = pipeline.run()
        if inspect is not None:
            history["inspected"] = inspect(pipeline)
    return history


def trained_weights(pipeline) -> dict:
    """actor_train's full weights (HF names → tensors)."""
    return next(weights for weights in pipeline.actor_train.get_weights() if weights)


def uninterrupted_overrides(dumps: Path, mode: str) -> list[str]:
    """uninterrupted_run's overrides, with rollout_mock in `mode` (dump / mock) on `dumps`."""
    return [
        "max_steps=4",
        "save_steps=2",
        NO_REFERENCE,
        f"+rollout_mock={{enable: true, mode: {mode}, dump_dir: {dumps}}}",
    ]
