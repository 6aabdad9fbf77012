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
    conversations: list[list[dict]],
    steps: int = 150,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    device: str = "cpu",
) -> list[float]:
    """Trains in place on every token after the first prompt (AdamW, constant lr, on `device`); returns the loss
    curve. `log`, if given, gets a progress line every tenth of the run."""
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    encoded = []
    for conversation in conversations:
        prompt = tokenizer.apply_chat_template(conversation[:1], add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(conversation, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        if full_ids[: len(prompt_ids)] != prompt_ids:
            raise ValueError(
                "warm start: the chat template's generation prompt is not a prefix of the full "
                "conversation; the answer tokens cannot be located"
            )
        encoded.append((full_ids, len(prompt_ids)))
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
        for i, (ids, prompt_len) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
            attention[i, : len(ids)] = 1
        loss = model(input_ids=input_ids.to(device), attention_mask=attention.to(device), labels=labels.to(device)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if log is not None and steps >= 10 and (step + 1) % (steps // 10) == 0:
            elapsed = time.perf_counter() - started
            log(
                f"  step {step + 1}/{steps} loss {sum(losses[-20:]) / len(losses[-20:]):.3f} "
                f"elapsed {elapsed:.0f}s ETA {elapsed / (step + 1) * (steps - step - 1):.0f}s"
            )
    model.save_pretrained(model_dir)
    return losses
