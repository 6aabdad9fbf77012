"""The agentic pipeline. `run_pipeline(config)` is imported lazily so `--dry_run` never loads Ray."""


def run_pipeline(config):
    """examples/start_agentic_pipeline.py's entry point: a config without actor_train runs ROLL's rollout pipeline
    (episodes played and scored, nothing trained), any other the training pipeline."""
    from roll.pipeline.agentic.pipeline import run_pipeline as run

    if config.rollout_only:
        from roll.pipeline.agentic.rollout_pipeline import AgenticRolloutPipeline

        return run(config, AgenticRolloutPipeline)
    return run(config)
