"""The synchronous RLVR loop: rollout → reward → ref/old log-probs → advantages → PPO update → weight sync.

The driver owns the data, the RL maths and the bookkeeping; every model lives in a role's Cluster of
Ray workers. One pipeline step is a sequence of small methods, each one phase, timed separately; the loop is the thin
pipeline's (`roll.pipeline.base`) and everything after the rewards is the PPO update it composes
(`roll.pipeline.core.ppo_update`), shared with the agentic pipeline.
"""

import math
from collections.abc import Callable

import numpy as np
import torch

from roll.algorithms import get_adv_estimator_spec
from roll.data.checks import check_ground_truths, check_prompts_per_step
from roll.data.prompts import collate_prompts, load_prompt_rows, prompt_sampler
from roll.distributed.data_proto import DataProto
from roll.pipeline.base import BasePipeline
from roll.pipeline.core.callbacks import SampleLogger
from roll.pipeline.core.metrics import batch_metrics, report_learning_curves
from roll.pipeline.core.ppo_update import PPOUpdate
from roll.pipeline.core.rollout_dump import rollout_records
from roll.pipeline.core.score_watch import ConstantScoreWarning
from roll.pipeline.rlvr.data_checks import ground_truth_readers
from roll.pipeline.rlvr.reward_metrics import reduce_worker_metrics, worker_row_metrics
from roll.pipeline.rlvr.rollout import Rollout, RolloutParts, build_rollout
from roll.pipeline.rlvr.routing import build_tag_routes, route
from roll.pipeline.rlvr.validation_metrics import validation_metrics
from roll.utils.functional import scores_on_last_token
from roll.utils.grading import ERROR, TIMEOUT
from roll.utils.logging import get_logger
from roll.utils.progress import StepTimer

logger = get_logger("roll.pipeline")


class RLVRPipeline(BasePipeline):
    """Prompts with verifiable rewards: `RLVRPipeline(config).run()`; see `BasePipeline`."""

    rollout: Rollout | None = None  # the config's rollout mode (roll.pipeline.rlvr.rollout), set by _setup_data

    def __init__(self, config, callbacks=()):
        callbacks = [*callbacks, ConstantScoreWarning()]  # a domain whose scores are all the same for N steps
        self.rollout_store = rollout_records(config, callbacks)  # ROLL's rollout dump / replay
        super().__init__(config, callbacks)

    # ---- set-up -------------------------------------------------------------------------------
    def _build_components(self) -> list:
        # a training row is the engine's prompt + sample, token for token
        self.ppo = PPOUpdate(
            self,
            rows_are_samples=True,
            before_sync=lambda timer: self.rollout.before_weight_sync(timer),
            after_sync=lambda: self.rollout.after_weight_sync(),
        )
        return [self.ppo]

    def _setup_data(self) -> None:
        config = self.config
        self.routes = build_tag_routes(config.rewards)
        self.train_rows = self._load_rows(config.actor_train.data_args, "actor_train.data_args")
        self.sampler = prompt_sampler(self.train_rows, config.actor_train.data_args, config.seed)
        check_prompts_per_step(  # issue 42: one row and rollout_batch_size 64 trained on 64 copies of it
            self.sampler.shortfalls(config.rollout_batch_size),
            config.rollout_batch_size,
            config.allow_repeated_prompts_in_step,
            "actor_train.data_args.file_name",
        )
        self._run_length()
        self.compose_rollout()
        self.val_rows = (
            self._load_rows(config.validation.data_args, "validation.data_args")
            if config.validation is not None
            else []
        )

    def _run_length(self) -> None:
        config, epochs = self.config, self.config.actor_train.training_args.num_train_epochs
        if epochs is None or getattr(self, "_steps_from_epochs", False):  # a recovery re-runs _setup_data
            return
        if config.max_steps is None:
            self._steps_from_epochs = True
            config.max_steps = math.ceil(epochs * len(self.train_rows) / config.rollout_batch_size)
            logger.info(
                "max_steps = %d: num_train_epochs %g × %d prompts / rollout_batch_size %d",
                config.max_steps,
                epochs,
                len(self.train_rows),
                config.rollout_batch_size,
            )
        else:
            logger.info("max_steps = %d is set, so num_train_epochs (%g) is not used", config.max_steps, epochs)

    def _load_rows(self, data_args, key: str) -> list[dict]:
        rows = load_prompt_rows(data_args, self.tokenizer, self.config.prompt_length)
        domains = list(self.config.rewards)
        graders = {domain: ground_truth_readers(reward) for domain, reward in self.config.rewards.items()}
        for index, row in enumerate(rows):  # fail at start-up, not mid-run, on an unroutable tag
            row["domain"] = route(row["tag"], self.routes, domains, f"{key} row {index}")
        files = [data_args.file_name] if isinstance(data_args.file_name, str) else list(data_args.file_name)
        # missing, NaN or empty truths where a domain grades against them: refused with the file, column and count
        check_ground_truths(rows, files, graders, data_args.ground_truth_key, key)
        return rows

    def _create_clusters(self) -> None:
        super()._create_clusters()
        # domain → [(scorer name or None, weight, cluster)]: one worker, or a domain's weighted scorers
        self.reward_clusters = {
            domain: [
                (scorer, weight, self.clusters[role]) for role, (scorer, weight, _) in reward.scorer_roles().items()
            ]
            for domain, reward in self.config.rewards.items()
        }

    def _background_roles(self) -> set[str]:
        """An async rollout's engine and graders work while the trainer's phases run."""
        if not self.rollout.runs_between_steps():
            return set()
        return {"actor_infer", *self._reward_roles()}

    def _reward_roles(self) -> list[str]:
        return [role for reward in self.config.rewards.values() for role in reward.scorer_roles()]

    def _role_configs(self) -> dict:
        return {**self.ppo.role_configs(), **self.config.extra_roles()}  # the model roles, then the graders

    def compose_rollout(self) -> None:
        """`self.rollout` ← the mode the config asks for, on the current sampler. Called by _setup_data (again
        when a recovery starts over: the old rollout's threads end first)."""
        if self.rollout is not None:
            self.rollout.close()
        parts = RolloutParts(
            sampler=self.sampler,
            generate=self.generate,
            compute_rewards=self.compute_rewards,
            submit_generation=self.submit_generation,
            finish_generation=self.finish_generation,
            engine=lambda: self.actor_infer,  # looked up per call: a recovery restarts the roles, not the rollout
            use_engine=lambda: self.memory.use("actor_infer"),
            pad_token_id=self.pad_token_id,
        )
        self.rollout = build_rollout(self.config, parts, self.rollout_store)

    def data_state(self) -> dict:
        return {"sampler": self.rollout.state_dict()}

    def load_data_state(self, state: dict) -> None:
        self.rollout.load_state_dict(state["sampler"])

    def _run_from(self, first_step: int, history: dict) -> None:
        self.rollout.start(first_step)
        super()._run_from(first_step, history)

    def close(self) -> None:
        if self.rollout is not None:
            self.rollout.close()
        super().close()

    def probe_batch(self) -> DataProto:
        rows = (self.val_rows or self.train_rows)[:1]
        return collate_prompts(rows, self.config.prompt_length, self.pad_token_id)

    # ---- one step, phase by phase ---------------------------------------------------------------
    def generate(self, rows: list[dict], step: int, mode: str = "train", generation_round: int = 0) -> DataProto:
        """mode: "train" (the group's samples), "validation" (validation.generating_args) or "greedy"
        (one greedy answer per prompt, ReMax's baseline). generation_round > 0: a dynamic-sampling refill
        round of the step, with its own sampling seed."""
        batch, pad = self.generation_request(rows, step, mode, generation_round)
        n = batch.meta_info["generation_config"]["num_return_sequences"]
        return self.finish_generation(self.actor_infer.generate(batch), pad, n)

    def generation_request(
        self, rows: list[dict], step: int, mode: str = "train", generation_round: int = 0
    ) -> tuple[DataProto, int]:
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
                "repetition_penalty": args.repetition_penalty,
                "stop_strings": args.stop_strings,
            }
        elif mode == "greedy":
            generation = {"num_return_sequences": 1, "do_sample": False}
        else:
            generation = {"num_return_sequences": config.num_return_sequences_in_group}
        self.memory.use("actor_infer")
        self.threads.enter({"actor_infer"})
        seed = config.seed * 100003 + step
        if generation_round:  # refill rounds: seeds no plain step uses
            seed = (1 << 40) + seed * 1000 + generation_round
        batch.meta_info.update(generation_config=generation, seed=seed)
        return batch.pad_to_multiple(self.actor_infer.world_size)

    def submit_generation(self, rows: list[dict], step: int) -> tuple[object, int]:
        """`generate`'s call without waiting for it: (its PendingCall, the padding rows for finish_generation)."""
        batch, pad = self.generation_request(rows, step)
        return self.actor_infer.generate.submit(batch), pad

    def finish_generation(self, out: DataProto, pad: int, n: int) -> DataProto:
        """Drop the `pad` padding prompts' `n` samples each and decode the responses."""
        out = out[: len(out) - pad * n] if pad else out
        out.non_tensor_batch["response_text"] = np.array(
            self.tokenizer.batch_decode(out.batch["responses"], skip_special_tokens=True), dtype=object
        )
        return out

    def compute_rewards(self, batch: DataProto) -> DataProto:
        """Scores from each domain's workers, placed on the last response token, and each row's
        `grading_status` (roll.utils.grading: graded, error or time-out; see reward_failures)."""
        scores = torch.zeros(len(batch))
        status = torch.zeros(len(batch), dtype=torch.int8)
        scorer_scores = {  # every scorer's own score (nan on other domains' rows), for reward/<domain>/<name>
            f"scores/{domain}/{scorer}": torch.full((len(batch),), float("nan"))
            for domain, scorers in self.reward_clusters.items()
            for scorer, _, _ in scorers
            if scorer is not None
        }
        domains = batch.non_tensor_batch["domain"]
        reward_metrics = {}
        self.threads.enter(*({role} for role in self._reward_roles()))
        calls = []  # every scorer's call is sent before any is waited for: the graders work at once
        for domain, scorers in self.reward_clusters.items():
            rows = np.nonzero(domains == domain)[0].tolist()
            for scorer, weight, cluster in scorers if rows else ():
                part, _ = batch[rows].pad_to_multiple(cluster.world_size)
                calls.append((domain, rows, scorer, weight, cluster.compute_rewards.submit(part)))
        for domain, rows, scorer, weight, call in calls:
            out = call.result()
            if scorer is None:  # the domain's single worker: its score as it is
                scores[rows] = out.batch["scores"][: len(rows)]
            else:  # several scorers: the weighted sum, each scorer's score kept for its metric
                part_scores = out.batch["scores"][: len(rows)]
                scores[rows] += weight * part_scores
                scorer_scores[f"scores/{domain}/{scorer}"][rows] = part_scores
            if "grading_status" in out.batch:  # absent if a custom worker overrides compute_rewards itself
                # a sample failed if any of its scorers failed (the larger code: time-out over error)
                status[rows] = torch.maximum(status[rows], out.batch["grading_status"][: len(rows)])
            where = domain if scorer is None else f"{domain}/{scorer}"
            reward_metrics.update(worker_row_metrics(out, len(rows), where))
        batch.meta_info["reward_metrics"] = reward_metrics
        batch.batch["scores"] = scores
        batch.batch.update(scorer_scores)
        batch.batch["token_level_scores"] = scores_on_last_token(scores, batch.batch["response_mask"])
        batch.batch["grading_status"] = status
        return batch

    def reward_failures(self, *batches: DataProto, prefix: str = "") -> dict:
        """reward/<domain>/errors and reward/<domain>/timeouts for every domain: samples of these batches whose
        grader raised or ran past rewards.<domain>.timeout (they scored 0); and reward/<domain>/<name>, the
        mean unweighted score of each of a domain's scorers."""
        status = torch.cat([batch.batch["grading_status"] for batch in batches]).numpy()
        domains = np.concatenate([batch.non_tensor_batch["domain"] for batch in batches])
        metrics = {
            f"{prefix}reward/{domain}/{name}": int(((status == code) & (domains == domain)).sum())
            for domain in self.config.rewards
            for name, code in (("errors", ERROR), ("timeouts", TIMEOUT))
        }
        for key in (key for key in batches[0].batch if key.startswith("scores/")):  # a domain's scorers
            values = torch.cat([batch.batch[key] for batch in batches])
            values = values[~values.isnan()]
            if len(values):
                metrics[f"{prefix}reward/{key.removeprefix('scores/')}"] = values.mean().item()
        return metrics

    def domain_scores(self, batch: DataProto) -> dict:
        """reward/<domain>/score/{mean,max,min} and reward/<domain>/count of the step's samples, for each domain
        that had rows this step (mixed-domain runs: each domain's grader can be followed on its own)."""
        scores, domains = batch.batch["scores"], batch.non_tensor_batch["domain"]
        metrics = {}
        for domain in self.config.rewards:
            mine = scores[torch.from_numpy(domains == domain)]
            if len(mine):
                metrics[f"reward/{domain}/count"] = len(mine)
                metrics.update(
                    {f"reward/{domain}/score/{k}": float(getattr(mine, k)()) for k in ("mean", "max", "min")}
                )
        return metrics

    def step(self, step: int) -> dict:
        timer, config = self.new_timer(), self.config
        metrics: dict = {}
        batch, rows, scoring = self.sample_batch(step, timer, metrics)
        graded = [batch]
        if get_adv_estimator_spec(config.adv_estimator).greedy_baseline:  # ReMax
            with timer.phase("remax_baseline"):
                graded.append(self.remax_baselines(batch, rows, step))
        alongside = () if scoring is None else (("reward", frozenset(self._reward_roles()), scoring),)
        metrics.update(self.ppo.update(batch, step, timer, alongside))  # the rewards are in before the advantages
        metrics.update(self.reward_failures(*graded))
        metrics.update(reduce_worker_metrics(batch))
        metrics.update(self.domain_scores(batch))
        metrics.update(batch_metrics(batch))
        metrics.update(timer.timings)
        for callback in self.callbacks:
            callback.on_step_end(step, batch, metrics)
        return metrics

    def sample_batch(self, step: int, timer: StepTimer, metrics: dict) -> tuple[DataProto, list[dict], object]:
        """The step's samples, their prompt rows and, if they are not scored yet, the blocking call that scores
        them (see `beside`), from the config's rollout mode; its metrics are added to `metrics`, its histograms
        (async/lag) go to the tracker."""
        taken = self.rollout.take(step, timer)
        metrics.update(taken.metrics)
        for name, values in taken.histograms.items():
            self.tracker.histogram(name, values, step + 1)  # the tracker counts steps from 1, as the progress line
        return taken.batch, taken.rows, None if taken.scoring is None else beside(taken.batch, taken.scoring)

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
        parts = self.rollout_store.around(  # rollout_mock: stored / replayed like the training steps
            "val",
            step,
            lambda: [
                self.compute_rewards(self.generate(self.val_rows[i : i + size], step, mode="validation"))
                for i in range(0, len(self.val_rows), size)
            ],
        )
        batch = DataProto.concat(parts)
        for callback in self.callbacks:
            callback.on_validation_end(step, batch)
        tags = [row["tag"] if row["tag"] is not None else row["domain"] for row in self.val_rows]
        metrics = validation_metrics(
            batch.batch["scores"].numpy(),
            tags,
            validation.generating_args.num_return_sequences,
            validation.pass_score,
        )
        worker_metrics = reduce_worker_metrics(*parts, prefix="val/")
        return {**metrics, **self.reward_failures(batch, prefix="val/"), **worker_metrics}


def beside(batch: DataProto, scoring) -> Callable[[], None]:
    """A call that scores `batch` while other threads add their keys to it (the forward passes): the scorer
    works on a shallow copy taken now, and only the keys it adds are written back, each in one step."""
    copy = DataProto(dict(batch.batch), dict(batch.non_tensor_batch), dict(batch.meta_info))
    before = (set(copy.batch), set(copy.non_tensor_batch))

    def score() -> None:
        scored = scoring(copy)
        batch.batch.update({k: v for k, v in scored.batch.items() if k not in before[0]})
        batch.non_tensor_batch.update({k: v for k, v in scored.non_tensor_batch.items() if k not in before[1]})
        batch.meta_info.update(scored.meta_info)

    return score


def run_pipeline(config) -> dict:
    """Entry point used by examples/start_rlvr_pipeline.py."""
    callbacks = []
    if config.sample_log_steps:
        callbacks.append(SampleLogger(f"{config.output_dir.rstrip('/')}/samples", every=config.sample_log_steps))
    with RLVRPipeline(config, callbacks=callbacks) as pipeline:
        history = pipeline.run()
    report_learning_curves(history, config.output_dir)
    return history
