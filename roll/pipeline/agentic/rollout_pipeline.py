"""ROLL's agentic rollout pipeline: an agentic config without actor_train plays and scores episodes, and trains
nothing.

Each of max_steps steps plays rollout_batch_size episodes in the training environments with actor_infer (the
sampling, env managers and seeds of a training step), then logs their scores (mean / max / min over the rows, per
tag too, as ROLL's rollout pipeline does), the environments' episode metrics, and every sample_log_steps the
transcripts under <output_dir>/samples. No reference, critic or trainer starts, no weights move, no checkpoint is
saved; a val_env_manager, if configured, is validated every eval_steps as in training.
"""

import numpy as np

from roll.pipeline.agentic.env_pipeline import EnvPipeline
from roll.utils.progress import StepTimer


class AgenticRolloutPipeline(EnvPipeline):
    """The environments' pipeline without the PPO update: actor_infer and the environment workers, no trained
    role (so no weight sync and nothing to checkpoint)."""

    validates_before_training = False  # validation every eval_steps and at the end, none before the first step

    def _model_roles(self) -> dict:
        return {"actor_infer": self.config.actor_infer}  # a reference or critic is unused: nothing is trained

    def step(self, step: int) -> dict:
        timer = StepTimer()
        with timer.phase("rollout"):
            self.memory.use("actor_infer")
            batch, metrics = self.rollout(step)
        metrics.update(score_metrics(batch.non_tensor_batch["episode_score"], batch.non_tensor_batch["tag"]))
        lengths = batch.batch["response_mask"].sum(-1).float()
        metrics.update({"rollout/samples": len(batch), "response_length/mean": lengths.mean().item()})
        metrics.update(timer.timings)
        for callback in self.callbacks:
            callback.on_step_end(step, batch, metrics)
        return metrics


def score_metrics(episode_scores, tags) -> dict:
    """ROLL's rollout metrics: the episode score of every row (a step-wise row carries its episode's), mean / max /
    min over the batch and per tag. The progress line shows the mean as its reward."""
    scores, tags = np.asarray(episode_scores, dtype=float), np.asarray(tags)
    metrics = {}
    for name, rows in [("all", np.ones(len(scores), bool)), *((str(t), tags == t) for t in sorted(set(tags)))]:
        for stat in ("mean", "max", "min"):
            metrics[f"rollout/{name}/score/{stat}"] = float(getattr(np, stat)(scores[rows]))
    metrics["critic/score/mean"] = metrics["rollout/all/score/mean"]
    return metrics
