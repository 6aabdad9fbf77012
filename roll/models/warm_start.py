"""A short supervised warm start that teaches the answer FORMAT but not the task.

Each training prompt is paired with a correctly formatted answer whose number is drawn at random,
so the model learns to reply "\\boxed{ N }" and stop, while its accuracy stays near chance. RL then
has a format it can be graded on and everything about the task left to learn.
"""
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def format_only_examples(prompts: list[str], answer_pool: list[str], seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    return [[{"role": "user", "content": p}, {"role": "assistant", "content": f"\\boxed{{ {rng.choice(answer_pool)} }}"}]
            for p in prompts]


def warm_start(model_dir: str, conversations: list[list[dict]], steps: int = 150, batch_size: int = 32,
               lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Trains in place on the assistant tokens only; returns the loss curve."""
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    encoded = []
    for conversation in conversations:
        prompt = tokenizer.apply_chat_template(conversation[:1], add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(conversation, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        encoded.append((full_ids, len(prompt_ids)))
    rng = random.Random(seed)
    losses = []
    model.train()
    for _ in range(steps):
        batch = rng.sample(encoded, batch_size)
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for i, (ids, prompt_len) in enumerate(batch):
            input_ids[i, :len(ids)] = torch.tensor(ids)
            labels[i, prompt_len:len(ids)] = torch.tensor(ids[prompt_len:])
            attention[i, :len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.save_pretrained(model_dir)
    return losses
