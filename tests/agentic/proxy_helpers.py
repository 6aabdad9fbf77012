"""Shared pieces of the proxy env manager's tests: a tokenizer, managers, a scripted engine (a test double of
actor_infer) and the environment worker's turn loop, all in one process (no Ray)."""

import threading

from roll.agentic.env_managers import ChatTokens, ProxyEnvManager
from roll.agentic.envs import make_env
from roll.configs.agentic import EnvConfig
from roll.demo.tiny_model import build_tokenizer

ACTIONS = ["Left", "Down", "Right", "Up"]
# a Qwen-style template (system block with the tools, <tool_call> / <tool_response>), its turns ended by the
# tokenizer's end-of-text token so that a generated reply ends its turn as the template does
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>"
    "<|endoftext|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|endoftext|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|endoftext|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|endoftext|>\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_chat(template: str | None = None) -> ChatTokens:
    env = make_env("frozen_lake", {})
    corpus = [env.instructions, env.reset(seed=0), *ACTIONS, "Invalid action.", "<tool_call>", "<tool_response>"]
    tokenizer = build_tokenizer(corpus)
    if template is not None:
        tokenizer.chat_template = template
    return ChatTokens(tokenizer)


def char_ids(chat: ChatTokens, text: str, end: bool = True) -> list[int]:
    """`text` spelled one byte-level token per character (decodes to `text`; re-tokenising it merges tokens)."""
    return [chat.tokenizer.convert_tokens_to_ids(c) for c in text] + ([chat.eos_token_id] if end else [])


def proxy_config(runner: str = "my_agents.Agent", env_type=None, **keys) -> EnvConfig:
    keys.setdefault("max_turns", 5)
    keys.setdefault("max_tokens_per_step", 8)
    return EnvConfig(env_type=env_type, env_manager="proxy", agent_runner_cls=runner, **keys)


def proxy_manager(chat, runner_cls, env_cls=None, env_id=0, prompt_length=128, response_length=256, **keys):
    config = proxy_config(env_type=env_cls and "frozen_lake", **keys)
    return ProxyEnvManager(
        env_id, "Agent", config, chat, -0.1, prompt_length, response_length, env_cls=(runner_cls, env_cls)
    )


class ScriptedEngine:
    """Test double of actor_infer: replies from a script (env id → a list of reply ids, or a function of the
    turn), log-prob -0.25 per token; records every call (env id, prompt ids, budget, reply ids)."""

    def __init__(self, script):
        self.script, self.calls = script, []
        self.turn: dict[int, int] = {}

    def __call__(self, env_id: int, prompt: list[int], budget: int) -> tuple[list[int], list[float]]:
        turn = self.turn.get(env_id, 0)
        self.turn[env_id] = turn + 1
        reply = self.script(env_id, turn) if callable(self.script) else self.script[env_id][turn]
        reply = reply[:budget]
        self.calls.append((env_id, list(prompt), budget, reply))
        return reply, [-0.25] * len(reply)


def drive(managers: dict, engine: ScriptedEngine, seed: int = 3) -> None:
    """The environment worker's loop as the driver runs it: every waiting episode asks, all are answered."""
    for env_id, manager in managers.items():
        manager.start(seed, "g0", f"t{env_id}")
    while True:
        waiting = [(i, m.request(), m.max_new_tokens) for i, m in managers.items()]
        waiting = [(i, prompt, budget) for i, prompt, budget in waiting if prompt is not None]
        if not waiting:
            return
        for env_id, prompt, budget in waiting:
            managers[env_id].apply(*engine(env_id, prompt, budget))


def trained(row: dict) -> list[int]:
    return [t for t, m in zip(row["response_ids"], row["response_mask"]) if m == 1]


class Recorder:
    """What the test runners saw, by env id (the manager builds them, so they report here)."""

    def __init__(self):
        self.lock, self.seen = threading.Lock(), {}

    def add(self, env_id: int, item) -> None:
        with self.lock:
            self.seen.setdefault(env_id, []).append(item)
