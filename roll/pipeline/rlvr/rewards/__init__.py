"""ROLL's reward worker paths (`roll.pipeline.rlvr.rewards.<module>.<Class>`), so a ROLL YAML's `worker_cls`
names our implementation unedited; each module re-exports one class from roll.workers.rewards."""
