"""Pipeline checkpoints: trainer state from the workers plus the driver's step, data position and RNG."""
import torch

from roll.utils import checkpoint
from roll.utils.logging import get_logger
from roll.utils.seeding import get_rng_state, set_rng_state

logger = get_logger("roll.checkpoint")


class PipelineCheckpointer:
    def __init__(self, pipeline):
        self.pipeline = pipeline

    def _trained_clusters(self) -> dict:
        clusters = {"actor_train": self.pipeline.actor_train}
        if self.pipeline.critic is not None:
            clusters["critic"] = self.pipeline.critic
        return clusters

    def save(self, step: int) -> None:
        output_dir = self.pipeline.config.output_dir
        staged = checkpoint.staging_dir(output_dir, step)
        for name, cluster in self._trained_clusters().items():
            cluster.save_checkpoint(str(staged / name))
        state = {"step": step, "sampler": self.pipeline.sampler.state_dict(), "rng": get_rng_state(),
                 "kl_coef": self.pipeline.kl_ctrl.value}
        torch.save(state, staged / "pipeline_state.pt")
        final = checkpoint.commit(output_dir, step)
        logger.info("saved checkpoint %s", final)

    def resume(self) -> int:
        """Restores the newest checkpoint if asked; returns the first step to run."""
        config = self.pipeline.config
        path = checkpoint.find_checkpoint(config.output_dir, config.resume_from_checkpoint)
        if path is None:
            if config.resume_from_checkpoint:
                logger.info("resume_from_checkpoint is set but %s has no checkpoint yet: starting at step 0",
                            config.output_dir)
            return 0
        state = torch.load(path / "pipeline_state.pt", weights_only=False)
        for name, cluster in self._trained_clusters().items():
            cluster.load_checkpoint(str(path / name))
        self.pipeline.sampler.load_state_dict(state["sampler"])
        set_rng_state(state["rng"])
        self.pipeline.kl_ctrl.value = state["kl_coef"]
        logger.info("resumed from %s: continuing at step %d", path, state["step"] + 1)
        return state["step"] + 1
