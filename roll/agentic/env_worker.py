"""EnvironmentWorker: a CPU-only Ray actor running a share of the environments, one env manager each.

Global env id `i` belongs to group `i // group_size` and to worker `i // max_env_num_per_worker`.
Every call goes to all workers (Dispatch.ONE_TO_ALL) with the whole batch of assignments or replies;
each worker takes the env ids it owns. Environment steps of one worker run concurrently in a thread
pool, so slow environments (a tool call in the sandbox) overlap.
"""

from concurrent.futures import ThreadPoolExecutor

from transformers import AutoTokenizer

from roll.agentic.env_managers import MANAGERS, ChatTokens
from roll.configs.agentic import group_tags
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker


class EnvironmentWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        """Called for every role at start-up; environments are built by `setup` (they need the pipeline's
        settings)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self, settings: dict) -> None:
        """settings: tokenizer_path, custom_envs, env_classes (tag → class), manager (EnvManagerConfig),
        prompt_length, response_length, step_reward_gamma."""
        manager_config = settings["manager"]
        chat = ChatTokens(AutoTokenizer.from_pretrained(settings["tokenizer_path"]))
        tags = group_tags(manager_config)
        per_worker = manager_config.max_env_num_per_worker
        ids = range(self.rank * per_worker, min((self.rank + 1) * per_worker, manager_config.num_envs))
        self.managers = {}
        for env_id in ids:
            tag = tags[env_id // manager_config.group_size]
            env_config = settings["custom_envs"][tag]
            self.managers[env_id] = MANAGERS[env_config.env_manager](
                env_id,
                tag,
                env_config,
                chat,
                manager_config.format_penalty,
                settings["prompt_length"],
                settings["response_length"],
                gamma=settings["step_reward_gamma"],
                env_cls=settings["env_classes"][tag],
                manager_config=manager_config,
            )
        self.pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(self.managers))))
        self.logger.info("running %d environments (ids %s)", len(self.managers), list(ids)[:1] + list(ids)[-1:])

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start(self, assignments: dict) -> None:
        """env id → (seed, group_id, traj_id): begin an episode in each listed environment of this worker."""
        mine = [(self.managers[i], a) for i, a in assignments.items() if i in self.managers]
        list(self.pool.map(lambda item: _call_env(item[0], "reset", item[0].start, *item[1]), mine))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def requests(self) -> list[tuple[int, list[int], int]]:
        """(env id, prompt token ids, max new tokens) of every environment waiting for a reply."""
        out = []
        for env_id, manager in self.managers.items():
            prompt = manager.request()
            if prompt is not None:
                out.append((env_id, prompt, manager.max_new_tokens))
        return out

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def apply(self, replies: dict) -> None:
        """env id → (reply token ids, log-probs): step each listed environment of this worker."""
        mine = [(self.managers[i], r) for i, r in replies.items() if i in self.managers]
        list(self.pool.map(lambda item: _call_env(item[0], "step", item[0].apply, *item[1]), mine))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def collect(self, env_ids: list[int]) -> tuple[list[dict], list[dict]]:
        """(training rows, episode stats) of the finished episodes of the listed environments."""
        rows, episodes = [], []
        for env_id in env_ids:
            manager = self.managers.get(env_id)
            if manager is None or manager.episode is None:
                continue
            rows += manager.samples()
            episodes.append(
                {
                    "tag": manager.tag,
                    "env_id": env_id,
                    "traj_group_id": manager.episode.group_id,
                    "seed": manager.episode.seed,
                    **manager.episode.stats(),
                }
            )
            manager.episode = None
        return rows, episodes

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def transcripts(self, env_ids: list[int]) -> list[dict]:
        """Readable turns of the current episodes (sample logs, tests)."""
        out = []
        for env_id in env_ids:
            manager = self.managers.get(env_id)
            if manager is not None and manager.episode is not None:
                out.append(
                    {
                        "env_id": env_id,
                        "tag": manager.tag,
                        "seed": manager.episode.seed,
                        "end_reason": manager.episode.end_reason,
                        # an agent's episode (the proxy manager): why its agent stopped, if not by finishing
                        **_exit_reason(manager.episode),
                        "turns": [
                            {
                                "observation": t.observation,
                                "action": t.action,
                                "reward": t.reward,
                                "reply_ids": t.reply_ids,
                            }
                            for t in manager.episode.turns
                        ],
                    }
                )
        return out


def _exit_reason(episode) -> dict:
    reason = getattr(episode, "agent_exit_reason", None)
    return {} if reason is None else {"agent_exit_reason": reason}


def _call_env(manager, what: str, method, *args) -> None:
    """Runs an env manager's call; an environment's error names its class, tag, env id and episode seed
    (list(pool.map(...)) re-raises it in the worker's call, which the driver reports with role and rank)."""
    try:
        method(*args)
    except Exception as error:
        env_cls = type(manager.env)
        seed = args[0] if what == "reset" else getattr(manager.episode, "seed", None)
        raise RuntimeError(
            f"environment {env_cls.__module__}.{env_cls.__qualname__} (tag {manager.tag!r}, env id "
            f"{manager.env_id}, episode seed {seed}) raised in {what}: {type(error).__name__}: {error}"
        ) from error
