"""The tool-calling demo's model: a tiny Qwen2 with Qwen2.5's tool-calling chat layout that can call the calculator
function in that format, but does so at random.

    prepare_tool_demo("tool_demo_data")   # → tool_demo_data/model (config, weights, tokenizer)

The task (env `arithmetic`): sums of two numbers from 100 to 499, answered as <answer>N</answer>; far beyond what
a model of this size computes in its head. The tokenizer is trained on the demo's own conversations, rendered by
the template (roll.demo.tiny_model.build_tool_tokenizer). The supervised warm start is random play, so it teaches
the formats and none of the choices:
- with the calculator offered: half the replies answer at once with a made-up number; the other half call
  `calculator` with the question's expression and answer with its result (how a call is written and how its
  result is used: the format);
- without tools (the baseline): every reply answers at once with a made-up number.
Whether to call or to guess is a coin flip in the data; only the assistant turns are trained (never the tool's
results), so the model is not taught to add either. RL (env_manager agent_native) has to find out that calling
pays.
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
FORMAT_VERSION = 1
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
    warm_start_steps: int = 1000
    warm_start_batch_size: int = 32
    warm_start_lr: float = 3e-3


def random_play(settings: ToolDemoSettings, rng: random.Random) -> list[dict]:
    """The warm start's conversations: {"messages": [...], "tools": [...] or None}."""
    env = make_env("arithmetic", dict(ENV_CONFIG))
    low, high = 2 * ENV_CONFIG["min_operand"], 2 * ENV_CONFIG["max_operand"]
    out = []
    for index in range(settings.conversations):
        question = env.reset(seed=2_000_000 + index)
        messages = [{"role": "system", "content": env.instructions}, {"role": "user", "content": question}]
        tools = rng.random() >= settings.no_tool_share
        if tools and rng.random() < 0.5:
            call = FunctionCall("calculator", {"expression": env.expression})
            messages += [
                {"role": "assistant", "content": render_call(call)},  # as the model writes it
                {"role": "tool", "content": str(env.answer), "name": "calculator"},
            ]
            answer = env.answer  # how a result is used: the format, not the choice
        else:
            answer = rng.randint(low, high)
        messages.append({"role": "assistant", "content": f"<answer>{answer}</answer>"})
        out.append({"messages": messages, "tools": [CALCULATOR] if tools else None})
    return out


def prepare_tool_demo(
    output_dir, settings: ToolDemoSettings = ToolDemoSettings(), force: bool = False, log=print
) -> dict:
    payload = {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}

    def build(out: Path) -> dict:
        started, rng = time.perf_counter(), random.Random(settings.seed)
        conversations = random_play(settings, rng)
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
        log(f"warm start: {settings.warm_start_steps} steps on {len(conversations)} random-play conversations")
        losses = warm_start(
            str(out / "model"),
            conversations,
            steps=settings.warm_start_steps,
            batch_size=settings.warm_start_batch_size,
            lr=settings.warm_start_lr,
            seed=settings.seed,
            log=log,
            assistant_only=True,
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
