"""The synchronous RLVR loop: rollout → reward → ref/old log-probs → advantages → PPO update → weight sync.

The driver owns the data, the RL maths and the bookkeeping; every model lives in a role's Cluster of
Ray workers. One pipeline step is a sequence of small methods, each one phase, timed separately; the
phases shared with the agentic pipeline live in `roll.pipeline.base`.
"""

import numpy as np
import torch

from roll.algorithms import get_adv_estimator_spec
from roll.data.prompts import PromptSampler, collate_prompts, load_prompt_rows
from roll.distributed.data_proto import DataProto
from roll.pipeline.base import BasePipeline
from roll.pipeline.core.callbacks import SampleLogger
from roll.pipeline.core.metrics import batch_metrics
from roll.pipeline.rlvr.async_rollout import AsyncRollout
from roll.pipeline.rlvr.routing import build_tag_routes, route
from roll.pipeline.rlvr.validation_metrics import validation_metrics
from roll.utils.functional import scores_on_last_token
from roll.utils.progress import StepTimer
from roll.workers.rewards.grading import ERROR, TIMEOUT


class RLVRPipeline(BasePipeline):
    """Prompts with verifiable rewards: `RLVRPipeline(config).run()`; see `BasePipeline`."""

    # ---- set-up -------------------------------------------------------------------------------
    def _setup_data(self) -> None:
        config = self.config
        self.routes = build_tag_routes(config.rewards)
        self.train_rows = self._load_rows(config.actor_train.data_args, "actor_train.data_args")
        self.sampler = PromptSampler(self.train_rows, config.seed)
        self.async_rollout = AsyncRollout(self) if config.async_generation_ratio > 0 else None
        self.val_rows = (
            self._load_rows(config.validation.data_args, "validation.data_args")
            if config.validation is not None
            else []
        )

    def _load_rows(self, data_args, key: str) -> list[dict]:
        rows = load_prompt_rows(data_args, self.tokenizer, self.config.prompt_length)
        domains = list(self.config.rewards)
        for index, row in enumerate(rows):  # fail at start-up, not mid-run, on an unroutable tag
            row["domain"] = route(row["tag"], self.routes, domains, f"{key} row {index}")
        return rows

    def _create_clusters(self) -> None:
        super()._create_clusters()
        self.reward_clusters = {domain: self.clusters[f"rewards.{domain}"] for domain in self.config.rewards}

    def _role_configs(self) -> dict:
        roles = super()._role_configs()
        roles.update({f"rewards.{domain}": reward for domain, reward in self.config.rewards.items()})
        return roles

    def data_state(self) -> dict:
        queued = self.async_rollout.data_state() if self.async_rollout is not None else None
        return {"sampler": queued or self.sampler.state_dict()}

    def load_data_state(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])

    def _run_from(self, first_step: int, history: dict) -> None:
        if self.async_rollout is not None:  # a (re)start: nothing in flight, the engine gets version first_step
            self.async_rollout.reset(first_step)
        super()._run_from(first_step, history)

    def _after_weight_sync(self) -> None:
        if self.async_rollout is not None:
            self.async_rollout.after_weight_sync()

    def _probe_batch(self) -> DataProto:
        rows = (self.val_rows or self.train_rows)[:1]
        return collate_prompts(rows, self.config.prompt_length, self.pad_token_id)

    # ---- one step, phase by phase ---------------------------------------------------------------
    def generate(self, rows: list[dict], step: int, mode: str = "train") -> DataProto:
        """mode: "train" (the group's samples), "validation" (validation.generating_args) or "greedy"
        (one greedy answer per prompt, ReMax's baseline)."""
        batch, pad = self.generation_request(rows, step, mode)
        n = batch.meta_info["generation_config"]["num_return_sequences"]
        return self.finish_generation(self.actor_infer.generate(batch), pad, n)

    def generation_request(self, rows: list[dict], step: int, mode: str = "train") -> tuple[DataProto, int]:
        """The padded prompt batch of one generate call (see `generate`) and its padding rows."""
        config = self.config
        batch = collate_prompts(rows, config.prompt_length, self.pad_token_id)
        batch.non_tensor_batch["domain"] = np.array([row["domain"] for row in rows], dtype=object)
        batch.non_tensor_batch["uid"] = np.array([f"{step}-{i}" for i in range(len(rows))], dtype=object)
        if mode == "validation":
            args = config.validation.generating_args
            generation = {
                "num_return_sequences": args.num_return_sequences,
                "do_sample": args.do_sample,
                "temperature": args.temperature,
                "top_p": args.top_p,
                "top_k": args.top_k,
            }
        elif mode == "greedy":
            generation = {"num_return_sequences": 1, "do_sample": False}
        else:
            generation = {"num_return_sequences": config.num_return_sequences_in_group}
        self.memory.use("actor_infer")
        batch.meta_info.update(generation_config=generation, seed=config.seed * 100003 + step)
        return batch.pad_to_multiple(self.actor_infer.world_size)

    def finish_generation(self, out: DataProto, pad: int, n: int) -> DataProto:
        """Drop the `pad` padding prompts' `n` samples each and decode the responses."""
        out = out[: len(out) - pad * n] if pad else out
        out.non_tensor_batch["response_text"] = np.array(
            self.tokenizer.batch_decode(out.batch["responses"], skip_special_tokens=True), dtype=object
        )
        return out

    def compute_rewards(self, batch: DataProto) -> DataProto:
        """Scores from each domain's workers, placed on the last response token, and each row's
        `grading_status` (roll.workers.rewards.grading: graded, error or time-out; see reward_failures)."""
        scores = torch.zeros(len(batch))
        status = torch.zeros(len(batch), dtype=torch.int8)
        domains = batch.non_tensor_batch["domain"]
        for domain, cluster in self.reward_clusters.items():
            rows = np.nonzero(domains == domain)[0].tolist()
            if not rows:
                continue
            part, pad = batch[rows].pad_to_multiple(cluster.world_size)
            out = cluster.compute_rewards(part)
            scores[rows] = out.batch["scores"][: len(rows)]
            if "grading_status" in out.batch:  # absent if a custom worker overrides compute_rewards itself
                status[rows] = out.batch["grading_status"][: len(rows)]
        batch.batch["scores"] = scores
        batch.batch["token_level_scores"] = scores_on_last_token(scores, batch.batch["response_mask"])
        batch.batch["grading_status"] = status
        return batch

    def reward_failures(self, *batches: DataProto, prefix: str = "") -> dict:
        """reward/<domain>/errors and reward/<domain>/timeouts for every domain: samples of these batches whose
        grader raised or ran past rewards.<domain>.timeout (they scored 0)."""
        status = torch.cat([batch.batch["grading_status"] for batch in batches]).numpy()
        domains = np.concatenate([batch.non_tensor_batch["domain"] for batch in batches])
        return {
            f"{prefix}reward/{domain}/{name}": int(((status == code) & (domains == domain)).sum())
            for domain in self.config.rewards
            for name, code in (("errors", ERROR), ("timeouts", TIMEOUT))
        }

    def step(self, step: int) -> dict:
        timer, config = StepTimer(), self.config
        metrics: dict = {}
        if self.async_rollout is None:
            rows = self.sampler.next_rows(config.rollout_batch_size)
            with timer.phase("generate"):
                batch = self.generate(rows, step)
        else:  # off-policy: this step's batch was (mostly) generated while earlier steps trained
            with timer.phase("generate"):
                rows, batch, async_metrics = self.async_rollout.take(step)
            metrics.update(async_metrics)
            self.tracker.histogram("async/lag", batch.non_tensor_batch["policy_lag"].astype(np.int64), step)
        with timer.phase("reward"):
            self.compute_rewards(batch)
        graded = [batch]
        if get_adv_estimator_spec(config.adv_estimator).greedy_baseline:  # ReMax
            with timer.phase("remax_baseline"):
                graded.append(self.remax_baselines(batch, rows, step))
        metrics.update(self.reward_failures(*graded))
        metrics.update(self.update(batch, step, timer))
        metrics.update(batch_metrics(batch))
        metrics.update(timer.timings)
        for callback in self.callbacks:
            callback.on_step_end(step, batch, metrics)
        return metrics

    def remax_baselines(self, batch: DataProto, rows: list[dict], step: int) -> DataProto:
        """`reward_baselines` (estimators registered with greedy_baseline, e.g. ReMax): each sample's
        baseline is the reward of its prompt's greedy answer; returns the greedy batch."""
        greedy = self.compute_rewards(self.generate(rows, step, mode="greedy"))
        n = self.config.num_return_sequences_in_group
        batch.batch["reward_baselines"] = greedy.batch["scores"].repeat_interleave(n)
        return greedy

    # ---- validation ------------------------------------------------------------------
    def validate(self, step: int) -> dict:
        """Answers to the held-out prompts (greedy by default): mean score per tag (= accuracy for 0/1 rewards)
        and, with several samples per prompt, pass@k (roll.pipeline.rlvr.validation_metrics)."""
        if not self.val_rows:
            return {}
        size, validation = self.config.val_batch_size, self.config.validation
        parts = [
            self.compute_rewards(self.generate(self.val_rows[i : i + size], step, mode="validation"))
            for i in range(0, len(self.val_rows), size)
        ]
        batch = DataProto.concat(parts)
        tags = [row["tag"] if row["tag"] is not None else row["domain"] for row in self.val_rows]
        metrics = validation_metrics(
            batch.batch["scores"].numpy(),
            tags,
            validation.generating_args.num_return_sequences,
            validation.pass_score,
        )
        return {**metrics, **self.reward_failures(batch, prefix="val/")}


def run_pipeline(config) -> dict:
    """Entry point used by examples/start_rlvr_pipeline.py."""
    callbacks = []
    if config.sample_log_steps:
        callbacks.append(SampleLogger(f"{config.output_dir.rstrip('/')}/samples", every=config.sample_log_steps))
    with RLVRPipeline(config, callbacks=callbacks) as pipeline:
        return pipeline.run()
