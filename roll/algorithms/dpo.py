"""DPO, cDPO and IPO on chosen/rejected pairs (docs/algorithms.md §13.3).

Rows come interleaved: chosen_0, rejected_0, chosen_1, … (rows 0::2 chosen, 1::2 rejected). A row's log-prob
is the *sum* of its per-token log-probs over the response span: tokens `prompt_id_len … last real token`.
With h = (π_c − π_r) − (ref_c − ref_r) per pair, the loss is the mean over the micro-batch's pairs of a
per-pair loss chosen by name from DPO_LOSSES. `beta`, `label_smoothing` and `ipo` are used as given (ROLL
drops them and always trains sigmoid DPO with β = 0.1).
"""

import torch
import torch.nn.functional as F

from roll.algorithms.reductions import float32_or_wider

__all__ = [
    "token_log_probs",
    "response_span_mask",
    "sequence_log_probs",
    "split_pairs",
    "interleave_pairs",
    "DPO_LOSSES",
    "register_dpo_loss",
    "get_dpo_loss_fn",
    "dpo_loss",
    "dpo_metrics",
]


def token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, S − 1): position t holds log p(input_ids[t + 1] | ≤ t) in float32 (float64 stays), times
    mask[:, 1:]; 0 wherever mask[:, t + 1] = 0 (the target there is replaced by id 0 to stay valid)."""
    mask = mask[:, 1:]
    targets = torch.where(mask > 0, input_ids[:, 1:], torch.zeros_like(input_ids[:, 1:]))
    log_probs = float32_or_wider(logits[:, :-1]).log_softmax(dim=-1)
    picked = torch.gather(log_probs, -1, targets.unsqueeze(-1)).squeeze(-1)
    return picked * mask.to(picked.dtype)


def response_span_mask(attention_mask: torch.Tensor, prompt_id_lens: torch.Tensor) -> torch.Tensor:
    """(B, S − 1) 0/1 on the token axis: attention_mask with each row's first prompt_id_lens entries zeroed,
    then columns 1 …: position t counts iff token t + 1 is a real response token."""
    columns = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    prompt = columns.unsqueeze(0) < prompt_id_lens.reshape(-1, 1).to(attention_mask.device)
    return torch.where(prompt, torch.zeros_like(attention_mask), attention_mask)[:, 1:]


def sequence_log_probs(
    per_token_logps: torch.Tensor, attention_mask: torch.Tensor, prompt_id_lens: torch.Tensor
) -> torch.Tensor:
    """(B,) Σ_t per_token_logps[b, t] over the response span (no length normalisation)."""
    span = response_span_mask(attention_mask, prompt_id_lens).to(per_token_logps.dtype)
    return (per_token_logps * span).sum(dim=-1)


def split_pairs(values: torch.Tensor):
    """Interleaved rows → (chosen = rows 0::2, rejected = rows 1::2)."""
    if values.shape[0] % 2:
        raise ValueError(f"DPO rows come in chosen/rejected pairs; got an odd number of rows ({values.shape[0]})")
    return values[0::2], values[1::2]


def interleave_pairs(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """(P, …) chosen and (P, …) rejected → (2P, …) rows chosen_0, rejected_0, chosen_1, …"""
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} differ in shape")
    return torch.stack([chosen, rejected], dim=1).reshape(-1, *chosen.shape[1:])


DPO_LOSSES: dict = {}  # name → per-pair loss fn(h, beta, label_smoothing)


def register_dpo_loss(name: str):
    def add(fn):
        if name in DPO_LOSSES and DPO_LOSSES[name] is not fn:
            raise ValueError(f"DPO loss {name!r} is already registered")
        DPO_LOSSES[name] = fn
        return fn

    return add


def get_dpo_loss_fn(name: str):
    if name not in DPO_LOSSES:
        raise ValueError(f"unknown DPO loss {name!r}; valid: {sorted(DPO_LOSSES)}")
    return DPO_LOSSES[name]


@register_dpo_loss("sigmoid")
def _sigmoid_loss(h, beta, label_smoothing):
    # DPO (ε = 0) and conservative DPO: the preference label is flipped with probability ε
    return -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)


@register_dpo_loss("ipo")
def _ipo_loss(h, beta, label_smoothing):
    if label_smoothing:
        raise ValueError(
            f"label_smoothing={label_smoothing} applies to the sigmoid (c)DPO loss only; with ipo: true set 0"
        )
    return (h - 1 / (2 * beta)) ** 2


def dpo_loss(
    policy_chosen_logps,
    policy_rejected_logps,
    reference_chosen_logps,
    reference_rejected_logps,
    beta=0.1,
    label_smoothing=0.0,
    ipo=False,
):
    """→ (loss = mean over pairs, chosen_rewards, rejected_rewards); rewards = β·(π − ref), detached."""
    if not beta > 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}")
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"DPO label_smoothing must be in [0, 1], got {label_smoothing}")
    h = (policy_chosen_logps - policy_rejected_logps) - (reference_chosen_logps - reference_rejected_logps)
    losses = get_dpo_loss_fn("ipo" if ipo else "sigmoid")(h, beta, label_smoothing)
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps).detach()
    return losses.mean(), chosen_rewards, rejected_rewards


def dpo_metrics(loss, chosen_rewards, rejected_rewards, prefix="actor") -> dict:
    """ROLL's per-micro-batch DPO metrics (mean-reduced) plus the reward margin. `acc` counts a tie as wrong."""
    return {
        f"{prefix}/loss": float(loss),
        f"{prefix}/acc": (chosen_rewards > rejected_rewards).float().mean().item(),
        f"{prefix}/chosen_reward": chosen_rewards.mean().item(),
        f"{prefix}/reject_reward": rejected_rewards.mean().item(),
        f"{prefix}/margins": (chosen_rewards - rejected_rewards).mean().item(),
    }
