"""Small tensor helpers shared by strategies and workers (batch layout: docs/contracts.md)."""

import torch


def compute_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def rollout_tensors(
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    log_probs: torch.Tensor,
    n: int = 1,
) -> dict:
    """The tensors of a generate output (docs/contracts.md): each left-padded prompt row repeated for its n
    samples, input_ids = prompt ‖ response, attention over every real token, position ids, the response mask
    and the sampled tokens' rollout log-probs. Every engine and the request-level rollout build it here."""
    prompts = prompts.repeat_interleave(n, dim=0)
    attention_mask = torch.cat([prompt_mask.repeat_interleave(n, dim=0).long(), response_mask.long()], dim=1)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_ids(attention_mask),
        "response_mask": response_mask,
        "rollout_log_probs": log_probs,
    }


def slice_response_logits(logits: torch.Tensor, response_length: int) -> torch.Tensor:
    """Logits that predict the response tokens: positions P-1 .. P+R-2 of the full sequence."""
    return logits[:, -response_length - 1 : -1]


def response_log_probs(logits: torch.Tensor, responses: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(response token) under temperature-scaled logits; logits already sliced to the responses."""
    logits = logits.float() / temperature
    return torch.gather(logits.log_softmax(dim=-1), -1, responses.unsqueeze(-1)).squeeze(-1)


def left_pad(id_lists: list[list[int]], pad_id: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists → (ids, attention mask), left-padded to `width` (default: the longest)."""
    width = max(len(ids) for ids in id_lists) if width is None else width
    ids = torch.full((len(id_lists), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(id_lists), width), dtype=torch.long)
    for i, row in enumerate(id_lists):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row) :] = 1
    return ids, mask


def scores_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) scores → (B, R) token-level scores: each row's score on its LAST GENERATED token (mask 1), zero
    elsewhere. In a multi-turn response observations follow some replies, so that is not always the last
    real token; a row with no generated token carries nothing."""
    positions = torch.arange(response_mask.shape[1]).expand_as(response_mask)
    last = torch.where(response_mask > 0, positions, -1).max(dim=1).values.clamp(min=0)
    out = torch.zeros_like(response_mask, dtype=torch.float32)
    out[torch.arange(len(scores)), last] = scores.float() * (response_mask.sum(-1) > 0)
    return out
