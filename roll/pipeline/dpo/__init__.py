"""The DPO pipeline kind (docs/dpo.md): chosen/rejected pairs, a frozen reference, DPO / cDPO / IPO on actor_train.
Nothing heavy here: `--dry_run` imports the config without Ray."""
