"""What the agentic pipelines share: environments played by actor_infer, turn by turn, into training rows.

`EnvPipeline` is the thin pipeline (roll.pipeline.base) with the environments: the environment workers started
beside the model roles, each training step's episodes (`rollout`), validation episodes and transcripts. The
training pipeline (roll.pipeline.agentic.pipeline) composes the PPO update with it; the rollout-only pipeline
(roll.pipeline.agentic.rollout_pipeline) only scores the episodes.
"""

import json
from pathlib import Path

import numpy as np

from roll.agentic.env_managers import ChatTokens
from roll.agentic.env_managers.proxy import resolve_runner_classes
from roll.agentic.envs.registry import resolve_env_class
from roll.configs import WorkerConfig
from roll.configs.agentic import group_tags, num_env_workers
from roll.configs.agentic_proxy import split_settings
from roll.data.prompts import collate_prompts
from roll.distributed.cluster import ship_by_value
from roll.distributed.data_proto import DataProto
from roll.pipeline.agentic.episode_scores import episode_metrics
from roll.pipeline.agentic.first_prompts import check_first_prompts, first_prompt_ids
from roll.pipeline.agentic.rollout import EnvRollout, to_batch
from roll.pipeline.base import BasePipeline
from roll.pipeline.core.rollout_dump import rollout_records
from roll.utils.errors import InputError

ENV_WORKER = "roll.agentic.env_worker.EnvironmentWorker"


class EnvPipeline(BasePipeline):
    """The environments' part of an agentic pipeline; a subclass brings `_model_roles()` and `step(step)`."""

    def __init__(self, config, callbacks=()):
        callbacks = list(callbacks)
        self.rollout_store = rollout_records(config, callbacks)  # ROLL's rollout dump / replay
        super().__init__(config, callbacks)

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

    def _model_roles(self) -> dict:
        """name → WorkerConfig of the model roles to start."""
        raise NotImplementedError

    def _role_configs(self) -> dict:
        """The model roles (`_model_roles`), then an environment-worker role per env manager."""
        roles = self._model_roles()
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
                        "tokenizer_path": getattr(config, config.tokenizer_role()).model_args.model_name_or_path,
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

    def probe_batch(self) -> DataProto:
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
