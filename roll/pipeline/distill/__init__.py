"""The offline distillation kind (docs/distill.md): config.py, data.py, worker.py, pipeline.py. Nothing heavy here:
--dry_run imports the config without Ray."""
