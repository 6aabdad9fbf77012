"""The synchronous agentic loop: episodes in environments → normalised rewards → the RLVR update.

One step: every training environment plays `rollout_batch_size / envs` episodes (the environments of a
group start from the same seed), the trajectories become training rows (TrajEnvManager: one per
trajectory, StepEnvManager: one per turn), episode scores are normalised per `reward_normalization`,
then old/ref log-probs, advantages (`roll.algorithms`, the group = the env group's episode), the PPO
update and the weight sync run exactly as in RLVR (`roll.pipeline.base`).
"""

import json
import math
from pathlib import Path

import numpy as np
import torch

from roll.agentic.env_managers import ChatTokens
from roll.agentic.env_managers.proxy import resolve_runner_classes
from roll.agentic.envs.registry import resolve_env_class
from roll.algorithms import get_adv_estimator_spec, gigpo_rewards
from roll.configs import WorkerConfig
from roll.configs.agentic import group_tags, num_env_workers
from roll.configs.agentic_proxy import split_settings
from roll.configs.checks import data_parallel_size, tokenizer_role
from roll.data.prompts import collate_prompts
from roll.distributed.cluster import ship_by_value
from roll.distributed.data_proto import DataProto
from roll.pipeline.agentic.async_rollout import AgenticAsyncRollout
from roll.pipeline.agentic.batch_adjust import rows_to_keep
from roll.pipeline.agentic.episode_scores import episode_metrics, normalize_scores
from roll.pipeline.agentic.first_prompts import check_first_prompts, first_prompt_ids
from roll.pipeline.agentic.rollout import EnvRollout, to_batch
from roll.pipeline.base import BasePipeline
from roll.pipeline.core.metrics import batch_metrics, report_learning_curves
from roll.utils.errors import InputError
from roll.utils.functional import scores_on_last_token

ENV_WORKER = "roll.agentic.env_worker.EnvironmentWorker"
BATCH_ADJUST_STREAM = 0xBA7C4  # the seed stream of batch_adjust_mode's row draws
# tensors that carry loss or reward: zero in the padding rows a step-wise rollout needs
LOSS_KEYS = ("response_mask", "token_level_scores", "scores", "rollout_log_probs")


class AgenticPipeline(BasePipeline):
    """Multi-turn RL in environments: `AgenticPipeline(config).run()`; see `BasePipeline`."""

    def _setup_data(self) -> None:
        self.chat = ChatTokens(self.tokenizer)  # fails fast on a template that cannot do multi-turn
        # resolved here, before any worker starts: a bad env_type fails at once; a user's class is sent to
        # the environment workers by value, so they need not import its module
        self.env_classes = {}
        for tag, env in self.config.custom_envs.items():
            try:
                self.env_classes[tag] = _tag_classes(tag, env)
            except (ImportError, TypeError, ValueError) as error:
                key = "agent_runner_cls" if env.agent_runner_cls else "env_type"
                raise InputError(f"custom_envs.{tag}.{key}: {error}") from None
        check_first_prompts(self.config, self.chat, self.env_classes)  # before any worker: names the tag
        if self.rollout_store.replaying:  # rollout_mock: mock replays every step's batch; nothing generates ahead
            self.async_rollout = None
        elif self.config.async_generation_ratio > 0 and getattr(self, "async_rollout", None) is None:
            self.async_rollout = AgenticAsyncRollout(self)
        elif self.config.async_generation_ratio == 0:
            self.async_rollout = None

    def _role_configs(self) -> dict:
        roles = super()._role_configs()
        for key in ("train_env_manager", "val_env_manager"):
            manager = getattr(self.config, key)
            if manager is not None:
                roles[key.replace("_manager", "")] = WorkerConfig(
                    name=key.replace("_manager", ""),
                    worker_cls=ENV_WORKER,
                    world_size=num_env_workers(manager),
                    rpc_timeout=manager.rpc_timeout,
                    system_envs=manager.system_envs,
                )
        return roles

    def _create_clusters(self) -> None:
        super()._create_clusters()
        config, self.rollouts = self.config, {}
        for key in ("train_env", "val_env"):
            if key in self.clusters:
                manager = getattr(config, f"{key}_manager")
                self.clusters[key].setup(
                    {
                        "tokenizer_path": getattr(config, tokenizer_role(config)).model_args.model_name_or_path,
                        "custom_envs": config.custom_envs,
                        "env_classes": self.env_classes,
                        "manager": manager,
                        "prompt_length": config.prompt_length,
                        "response_length": config.response_length,
                        "step_reward_gamma": config.step_reward_gamma,
                    }
                )
                self.rollouts[key] = EnvRollout(
                    self.clusters[key],
                    self.actor_infer,
                    manager.num_envs,
                    self.pad_token_id,
                    token_cap=config.actor_infer.generating_args.max_new_tokens,
                )

    def _run_from(self, first_step: int, history: dict) -> None:
        if self.async_rollout is not None:  # a (re)start: nothing in flight, the engine gets version first_step
            self.async_rollout.reset(first_step)
        super()._run_from(first_step, history)

    def _before_weight_sync(self, timer) -> None:
        if self.async_rollout is not None:
            with timer.phase("rollout_wait"):  # the turns of rollouts ahead still on the current weights
                self.async_rollout.before_weight_sync()

    def _after_weight_sync(self) -> None:
        if self.async_rollout is not None:
            self.async_rollout.after_weight_sync()

    def close(self) -> None:
        if getattr(self, "async_rollout", None) is not None:
            self.async_rollout.close()
        super().close()

    def _probe_batch(self) -> DataProto:
        """The first validation (else training) environment's first prompt, as its env manager builds it."""
        manager = self.config.val_env_manager or self.config.train_env_manager
        tag = group_tags(manager)[0]
        ids = first_prompt_ids(self.config, tag, self.chat, self.env_classes[tag], self.config.val_seed_offset)
        row = {"prompt_ids": ids, "prompt_text": self.chat.decode(ids), "ground_truth": None, "tag": tag}
        return collate_prompts([row], self.config.prompt_length, self.pad_token_id)

    # ---- one step ---------------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[DataProto, dict]:
        config, manager = self.config, self.config.train_env_manager
        rows, episodes, transcripts = [], [], []
        log = bool(config.sample_log_steps) and (step + 1) % config.sample_log_steps == 0
        for episode in range(config.episodes_per_env):
            assignments = {}
            for env_id in range(manager.num_envs):
                group = env_id // manager.group_size
                seed = int(np.random.SeedSequence([config.seed, step, group, episode]).generate_state(1)[0])
                assignments[env_id] = (seed, f"{step}-{group}-{episode}", f"{step}-{env_id}-{episode}")
            part_rows, part_episodes, part_log = self.rollouts["train_env"].run(
                assignments, self._generation(manager, validation=False), config.seed * 100003 + step, log
            )
            rows, episodes, transcripts = rows + part_rows, episodes + part_episodes, transcripts + part_log
        if log:
            self._write_transcripts(step, transcripts)
        batch = to_batch(rows, config.prompt_length, config.response_length, self.pad_token_id)
        return batch, episode_metrics(episodes, "env")

    def _generation(self, manager, validation: bool) -> dict:
        if manager.generating_args is not None:
            args = manager.generating_args
            return {
                "do_sample": args.do_sample,
                "temperature": args.temperature,
                "top_p": args.top_p,
                "top_k": args.top_k,
            }
        return {"do_sample": False} if validation else {}

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
        metrics.update(self.update(batch, step, timer))
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

    # ---- validation ---------------------------------------------------------------------------------
    def validate(self, step: int) -> dict:
        """val_rounds episodes per validation environment (ROLL's val_batch_size), the same seeds every time;
        success rate per tag."""
        manager = self.config.val_env_manager
        if manager is None:
            return {}
        episodes = self.rollout_store.around("val", step, lambda: self._val_episodes(manager))
        metrics = episode_metrics(episodes, "val")
        metrics["val/score/all"] = float(np.mean([e["success"] for e in episodes]))
        return metrics

    def _val_episodes(self, manager) -> list[dict]:
        self.memory.use("actor_infer")
        episodes = []
        for round_ in range(self.config.val_rounds):
            first_group, first_env = round_ * manager.num_env_groups, round_ * manager.num_envs
            assignments = {
                env_id: (
                    self.config.val_seed_offset + first_group + env_id // manager.group_size,
                    f"val-{first_group + env_id // manager.group_size}",
                    f"val-{first_env + env_id}",
                )
                for env_id in range(manager.num_envs)
            }
            _, part, _ = self.rollouts["val_env"].run(assignments, self._generation(manager, validation=True), 0)
            episodes += part
        return episodes

    def _write_transcripts(self, step: int, transcripts: list[dict]) -> None:
        directory = Path(self.config.output_dir) / "samples"
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"step-{step + 1}.jsonl", "w") as out:
            for record in transcripts:
                out.write(json.dumps(record) + "\n")


def _tag_classes(tag: str, env):
    """What the env managers of `tag` get as env_cls: the environment's class, or the proxy manager's (runner,
    environment or None), its settings checked; a user's classes go to the environment workers by value."""
    if env.agent_runner_cls is None:
        return ship_by_value(resolve_env_class(env.env_type))
    runner, env_cls = resolve_runner_classes(env)
    runner.check_config(split_settings(tag, env.env_config)[1])
    return tuple(cls if cls is None else ship_by_value(cls) for cls in (runner, env_cls))


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
