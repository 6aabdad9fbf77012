"""A short supervised warm start that teaches the answer FORMAT but not the task.

Each training prompt is paired with a correctly formatted answer whose number is drawn at random,
so the model learns to reply "\\boxed{N}" and stop, while its accuracy stays near chance. RL then
has a format it can be graded on and everything about the task left to learn. The agentic demo
(`roll.demo.agentic`) also uses it on random-play episodes, where the trained tokens include
the environment's observations: the environment's dynamics, still not which action is good.
"""

import random
import time
from collections.abc import Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def default_answer_format(value: str) -> str:
    return f"\\boxed{{{value}}}"


def format_only_examples(
    prompts: list[str], answer_pool: list[str], seed: int, answer_format: Callable[[str], str] = default_answer_format
) -> list[list[dict]]:
    """One conversation per prompt, answered with a uniformly random number from `answer_pool`."""
    rng = random.Random(seed)
    return [
        [{"role": "user", "content": p}, {"role": "assistant", "content": answer_format(rng.choice(answer_pool))}]
        for p in prompts
    ]


def warm_start(
    model_dir: str,
    conversations: list,
    steps: int = 150,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    assistant_only: bool = False,
    decay_fraction: float = 0.0,
    device: str = "cpu",
) -> list[float]:
    """Trains in place (on `device`) on every token after the first prompt (AdamW); returns the loss curve.
    A conversation is a list of messages, or {"messages": [...], "tools": [...], "train_first_token": bool}
    (function schemas the template renders; `train_first_token` False leaves the first token of the first
    assistant turn untrained: a choice the data must not teach). `assistant_only`: train only what the assistant
    turns write (from each generation prompt to the end of the turn), not the user or tool turns between them.
    The learning rate is `lr`, decaying linearly to 0 over the last `decay_fraction` of the steps (0: constant).
    `log`, if given, gets a progress line every tenth of the run."""
    if not 0.0 <= decay_fraction <= 1.0:
        raise ValueError(f"warm start: decay_fraction must be within [0, 1], got {decay_fraction}")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    decay_steps = decay_fraction * steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (steps - step) / decay_steps) if decay_steps else 1.0
    )
    encoded = [_encode(tokenizer, c, assistant_only) for c in conversations]
    rng = random.Random(seed)
    losses = []
    model.train()
    started = time.perf_counter()
    for step in range(steps):
        batch = rng.sample(encoded, min(batch_size, len(encoded)))
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, trained) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, : len(ids)] = torch.tensor([t if keep else -100 for t, keep in zip(ids, trained)])
            attention[i, : len(ids)] = 1
        loss = model(input_ids=input_ids.to(device), attention_mask=attention.to(device), labels=labels.to(device)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
        losses.append(loss.item())
        if log is not None and steps >= 10 and (step + 1) % (steps // 10) == 0:
            elapsed = time.perf_counter() - started
            log(
                f"  step {step + 1}/{steps} loss {sum(losses[-20:]) / len(losses[-20:]):.3f} "
                f"elapsed {elapsed:.0f}s ETA {elapsed / (step + 1) * (steps - step - 1):.0f}s"
            )
    model.save_pretrained(model_dir)
    return losses


def _encode(tokenizer, conversation, assistant_only: bool) -> tuple[list[int], list[bool]]:
    """(token ids, which are trained) of one conversation."""
    if isinstance(conversation, dict):
        messages, tools = conversation["messages"], conversation.get("tools")
        train_first_token = conversation.get("train_first_token", True)
    else:
        messages, tools, train_first_token = conversation, None, True
    extra = {"tools": tools} if tools else {}

    def ids(part: list[dict], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(part, add_generation_prompt=generation_prompt, tokenize=False, **extra)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    full = ids(messages, False)
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    trained = [False] * len(full)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"] if assistant_only else [first]
    for index in turns:
        start = ids(messages[:index], True)
        end = len(ids(messages[: index + 1], False)) if assistant_only else len(full)
        if assistant_only and tokenizer.eos_token_id in full[len(start) : end]:  # up to the end-of-turn token only
            end = len(start) + full[len(start) : end].index(tokenizer.eos_token_id) + 1
        if full[: len(start)] != start:
            raise ValueError(
                "warm start: the chat template's generation prompt is not a prefix of the full "
                "conversation; the answer tokens cannot be located"
            )
        trained[len(start) : end] = [True] * (end - len(start))
    if not train_first_token:
        trained[len(ids(messages[:first], True))] = False
    return full, trained
