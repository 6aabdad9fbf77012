"""The agentic pipeline. `run_pipeline(config)` is imported lazily so `--dry_run` never loads Ray."""


def run_pipeline(config):
    from roll.pipeline.agentic.pipeline import run_pipeline as run

    return run(config)
