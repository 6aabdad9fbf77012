"""The SFT pipeline kind (ROLL's SFT pipeline): config.py (SFTConfig), data.py (rows → ids and labels), worker.py
(SFTWorker), pipeline.py (SFTPipeline, run_pipeline, train_sft). Nothing heavy here: --dry_run imports the config
without Ray."""
