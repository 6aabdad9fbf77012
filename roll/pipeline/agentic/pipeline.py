"""The synchronous agentic loop: episodes in environments → normalised rewards → the PPO update.

One step: every training environment plays `rollout_batch_size / envs` episodes (the environments of a
group start from the same seed), the trajectories become training rows (TrajEnvManager: one per
trajectory, StepEnvManager: one per turn), episode scores are normalised per `reward_normalization`,
then old/ref log-probs, advantages (`roll.algorithms`, the group = the env group's episode), the PPO
update and the weight sync run exactly as in RLVR (the PPO update component, `roll.pipeline.core.ppo_update`).
"""

import math

import numpy as np
import torch

from roll.algorithms import get_adv_estimator_spec, gigpo_rewards
from roll.configs.checks import data_parallel_size
from roll.distributed.data_proto import DataProto
from roll.pipeline.agentic.async_rollout import AgenticAsyncRollout
from roll.pipeline.agentic.batch_adjust import rows_to_keep
from roll.pipeline.agentic.env_pipeline import EnvPipeline
from roll.pipeline.agentic.episode_scores import normalize_scores
from roll.pipeline.core.metrics import batch_metrics, report_learning_curves
from roll.pipeline.core.ppo_update import PPOUpdate
from roll.utils.functional import scores_on_last_token

BATCH_ADJUST_STREAM = 0xBA7C4  # the seed stream of batch_adjust_mode's row draws
# tensors that carry loss or reward: zero in the padding rows a step-wise rollout needs
LOSS_KEYS = ("response_mask", "token_level_scores", "scores", "rollout_log_probs")


class AgenticPipeline(EnvPipeline):
    """Multi-turn RL in environments: `AgenticPipeline(config).run()`; see `BasePipeline`."""

    def _setup_data(self) -> None:
        super()._setup_data()
        if self.rollout_store.replaying:  # rollout_mock: mock replays every step's batch; nothing generates ahead
            self.async_rollout = None
        elif self.config.async_generation_ratio > 0 and getattr(self, "async_rollout", None) is None:
            self.async_rollout = AgenticAsyncRollout(self)
        elif self.config.async_generation_ratio == 0:
            self.async_rollout = None

    def _build_components(self) -> list:
        self.ppo = PPOUpdate(self, rows_are_samples=False, before_sync=self._before_sync, after_sync=self._after_sync)
        return [self.ppo]

    def _model_roles(self) -> dict:
        return self.ppo.role_configs()

    def _run_from(self, first_step: int, history: dict) -> None:
        if self.async_rollout is not None:  # a (re)start: nothing in flight, the engine gets version first_step
            self.async_rollout.reset(first_step)
        super()._run_from(first_step, history)

    def _before_sync(self, timer) -> None:
        if self.async_rollout is not None:
            with timer.phase("rollout_wait"):  # the turns of rollouts ahead still on the current weights
                self.async_rollout.before_weight_sync()

    def _after_sync(self) -> None:
        if self.async_rollout is not None:
            self.async_rollout.after_weight_sync()

    def close(self) -> None:
        if getattr(self, "async_rollout", None) is not None:
            self.async_rollout.close()
        super().close()

    def step(self, step: int) -> dict:
        timer, config = self.new_timer(), self.config
        with timer.phase("rollout"):  # async: the wait for the rollout played ahead
            batch, metrics = self.rollout_store.around("train", step, lambda: self._take(step))
        # ROLL's batch_adjust_mode drops rows before the rewards are normalised (copy pads after, below)
        rng = np.random.default_rng([config.seed, step, BATCH_ADJUST_STREAM])
        keep = rows_to_keep(len(batch), self._train_multiple(), config.batch_adjust_mode, rng)
        metrics["rollout/dropped_rows"] = 0 if keep is None else len(batch) - len(keep)
        batch = batch if keep is None else batch[keep]
        norm = config.reward_normalization
        if get_adv_estimator_spec(config.adv_estimator).anchor_state_groups:
            rewards, episode, state = gigpo_rewards(
                torch.tensor(batch.non_tensor_batch["episode_score"].astype(float), dtype=torch.float32),
                batch.batch["scores"],  # the step manager's discounted step return
                batch.non_tensor_batch["traj_group_id"],
                batch.non_tensor_batch["state"],
                episode_weight=config.episode_reward_weight,
                step_weight=config.step_reward_weight,
                use_std=norm.norm_std_type is not None,
            )
            metrics["gigpo/step_groups_compared"] = float((state != 0).float().mean())
        else:
            rewards = normalize_scores(
                batch.batch["scores"], _grouping(batch, norm.grouping), norm.norm_mean_type, norm.norm_std_type
            )
        batch.batch["token_level_scores"] = scores_on_last_token(rewards, batch.batch["response_mask"])
        batch.non_tensor_batch["uid"] = batch.non_tensor_batch["traj_group_id"]
        real = len(batch)
        batch, _ = batch.pad_to_multiple(self._train_multiple(), loss_free_keys=LOSS_KEYS)
        metrics.update(self.ppo.update(batch, step, timer))
        metrics.update(batch_metrics(batch[:real]))
        metrics.update({"rollout/samples": real, "rollout/padding_rows": len(batch) - real})
        metrics.update(timer.timings)
        for callback in self.callbacks:
            callback.on_step_end(step, batch[:real], metrics)
        return metrics

    def _take(self, step: int) -> tuple[DataProto, dict]:
        if self.async_rollout is not None:
            return self.async_rollout.take(step)
        self.memory.use("actor_infer")
        return self.rollout(step)

    def _train_multiple(self) -> int:
        """Rows per step must divide into every trained role's global batch (per device × accumulation × dp)."""
        sizes = [1]
        for name in ("actor_train", "critic"):
            worker = getattr(self.config, name)
            if worker is not None:
                args = worker.training_args
                # data-parallel ranks, not workers: ranks of one model-parallel / Ulysses group share rows
                sizes.append(
                    args.per_device_train_batch_size * args.gradient_accumulation_steps * data_parallel_size(worker)
                )
        return math.lcm(*sizes)


def _grouping(batch: DataProto, grouping: str) -> np.ndarray:
    if grouping == "batch":
        return np.zeros(len(batch), dtype=object)
    return batch.non_tensor_batch["tag" if grouping == "tags" else "traj_group_id"]


def run_pipeline(config, pipeline_cls=AgenticPipeline) -> dict:
    """Runs `pipeline_cls(config)` to the end and draws its learning curves (roll.pipeline.agentic.run_pipeline
    picks the class)."""
    with pipeline_cls(config) as pipeline:
        history = pipeline.run()
    report_learning_curves(history, config.output_dir)
    return history
