"""The tool-calling demo's model: a tiny Qwen2 with Qwen2.5's tool-calling chat layout that knows how to call the
calculator function in that format and how to answer with its result, but calls it at random.

    prepare_tool_demo("tool_demo_data")   # → tool_demo_data/model (config, weights, tokenizer)

The task (env `arithmetic`): sums of two numbers from 100 to 499, answered as <answer>N</answer>; far beyond what
a model of this size computes in its head. The tokenizer is trained on the demo's own conversations, rendered by
the template (roll.demo.tiny_model.build_tool_tokenizer); Qwen2's pre-tokenizer splits numbers into single digits,
so writing a call's expression and answering with the calculator's result are copies, digit by digit. The
supervised warm start teaches the formats and none of the choices:
- random play, with the calculator offered: half the replies answer at once with a made-up number; the other
  half call `calculator` with the question's expression and answer with its result; without tools (the baseline):
  every reply answers at once with a made-up number;
- format drills: more conversations that call the calculator and answer with its result, in which the reply's
  first token (`<tool_call>` here, `<answer` when guessing: the choice) is not trained. Random play alone teaches
  the copies too slowly (1,000+ steps); the drills teach them in a few hundred without moving the choice.
Whether to call or to guess is a coin flip in what is trained; only the assistant turns are trained (never the
tool's results), and no trained answer is a sum the model could compute from the question alone (a guess is
made up, an answer after a call copies the result shown), so the model is not taught to add. RL (env_manager
agent_native) has to find out that calling pays.
"""

import dataclasses
import random
import time
from pathlib import Path

from roll.agentic.envs import make_env
from roll.agentic.envs.tools.calculator import FUNCTION as CALCULATOR
from roll.agentic.tool_calls import FunctionCall, render_call
from roll.demo.rlvr import locked_preparation
from roll.demo.tiny_model import build_tool_tokenizer, save_random_qwen2
from roll.demo.warm_start import warm_start

MARKER = "prepared.json"
FORMAT_VERSION = 2
ENV_CONFIG = {"min_operand": 100, "max_operand": 499, "num_operations": 1, "operators": ["+"], "max_steps": 1}
REQUIRED = ["model/config.json", "model/model.safetensors", "model/tokenizer.json"]


@dataclasses.dataclass(frozen=True)
class ToolDemoSettings:
    seed: int = 0
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    conversations: int = 4000  # random-play conversations (seeds 2,000,000 + i: apart from training and validation)
    no_tool_share: float = 0.25  # of them, without the calculator offered
    format_drills: int = 4000  # call-and-copy conversations, the choice untrained (seeds 3,000,000 + i)
    warm_start_steps: int = 600
    warm_start_batch_size: int = 16
    warm_start_lr: float = 1e-3  # 3e-3 (constant) did not learn the copies in 1,000 steps
    warm_start_decay: float = 0.3  # the last 30% of the steps decay the lr to 0: the call rate settles near 1/2


def random_play(settings: ToolDemoSettings, rng: random.Random) -> list[dict]:
    """The warm start's random play: {"messages": [...], "tools": [...] or None}."""
    env = make_env("arithmetic", dict(ENV_CONFIG))
    low, high = 2 * ENV_CONFIG["min_operand"], 2 * ENV_CONFIG["max_operand"]
    out = []
    for index in range(settings.conversations):
        question = env.reset(seed=2_000_000 + index)
        tools = rng.random() >= settings.no_tool_share
        if tools and rng.random() < 0.5:
            out.append(_called(env, question))
            continue
        messages = [_system(env), {"role": "user", "content": question}]
        messages.append({"role": "assistant", "content": f"<answer>{rng.randint(low, high)}</answer>"})
        out.append({"messages": messages, "tools": [CALCULATOR] if tools else None})
    return out


def format_drills(settings: ToolDemoSettings) -> list[dict]:
    """Conversations that call the calculator and answer with its result, the reply's first token (the choice to
    call) untrained: how a call is written and how its result is used, not when to call."""
    env = make_env("arithmetic", dict(ENV_CONFIG))
    return [
        dict(_called(env, env.reset(seed=3_000_000 + index)), train_first_token=False)
        for index in range(settings.format_drills)
    ]


def _system(env) -> dict:
    return {"role": "system", "content": env.instructions}


def _called(env, question: str) -> dict:
    call = FunctionCall("calculator", {"expression": env.expression})
    messages = [
        _system(env),
        {"role": "user", "content": question},
        {"role": "assistant", "content": render_call(call)},  # as the model writes it
        {"role": "tool", "content": str(env.answer), "name": "calculator"},
        {"role": "assistant", "content": f"<answer>{env.answer}</answer>"},  # the result, as it came back
    ]
    return {"messages": messages, "tools": [CALCULATOR]}


def prepare_tool_demo(
    output_dir, settings: ToolDemoSettings = ToolDemoSettings(), force: bool = False, log=print
) -> dict:
    payload = {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}

    def build(out: Path) -> dict:
        started, rng = time.perf_counter(), random.Random(settings.seed)
        conversations = random_play(settings, rng) + format_drills(settings)
        texts = [m["content"] for c in conversations for m in c["messages"]]
        tokenizer = build_tool_tokenizer(texts, [CALCULATOR])
        _, parameters = save_random_qwen2(
            out / "model",
            tokenizer,
            hidden_size=settings.hidden_size,
            intermediate_size=settings.hidden_size * 4,
            num_layers=settings.num_layers,
            num_heads=settings.num_heads,
            num_kv_heads=settings.num_heads,
            max_position_embeddings=512,
            seed=settings.seed,
        )
        log(
            f"warm start: {settings.warm_start_steps} steps on {settings.conversations} random-play conversations "
            f"and {settings.format_drills} format drills"
        )
        losses = warm_start(
            str(out / "model"),
            conversations,
            steps=settings.warm_start_steps,
            batch_size=settings.warm_start_batch_size,
            lr=settings.warm_start_lr,
            seed=settings.seed,
            log=log,
            assistant_only=True,
            decay_fraction=settings.warm_start_decay,
        )
        return {
            "conversations": len(conversations),
            "vocab_size": len(tokenizer),
            "parameters": parameters,
            "warm_start_loss_first": losses[0],
            "warm_start_loss_last": sum(losses[-20:]) / len(losses[-20:]),
            "seconds": round(time.perf_counter() - started, 1),
        }

    return locked_preparation(output_dir, payload, REQUIRED, build, force, log)
