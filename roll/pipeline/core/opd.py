"""On-policy distillation in the PPO update: each teacher's forward pass over the rows routed to it, and the
advantages from the teachers' KL (roll.algorithms.opd; docs/algorithms.md §13.5).

A teacher role scores the student's tokens as the reference does (`compute_log_probs` on the generated batch), in
the same lanes as the other forward passes. With routing (some teacher lists `tag_included`) a teacher sees only
its rows: the batch holds `opd_log_probs/<role>` (0 on other rows) and `opd_rows/<role>` (its rows). The
advantage step reads them with the student's old log-probs (actor_train's, or the rollout's where they are shown
to be the same: roll.pipeline.core.old_log_probs) and removes them: the training workers never receive them.
"""

import numpy as np
import torch

from roll.algorithms import opd_advantages, opd_teacher_kl
from roll.configs.opd import kl_coef, routes, teacher_roles

LOG_PROBS, ROWS = "opd_log_probs/", "opd_rows/"


def teacher_rows(config, batch) -> dict[str, np.ndarray | None]:
    """Teacher role → the indices of its rows (None: every row), from the rows' routing column."""
    column = config.opd_routing()[0]
    teachers = teacher_roles(config)
    values = batch.non_tensor_batch.get(column)
    if values is None:  # ROLL: a row without a domain is "default"
        values = np.array(["default"] * len(batch), dtype=object)
    table = routes(config, sorted(set(values.tolist())))
    if table is None:
        return dict.fromkeys(teachers)
    return {role: np.nonzero([role in table[value] for value in values])[0] for role in teachers}


def teacher_phases(update, batch, forward_keys: list[str]) -> list:
    """The forward-pass phases (name, role, call) of the teachers the update's pipeline started; each reads only
    `forward_keys` of the batch (other phases add keys to it meanwhile)."""
    clusters, config = update.pipeline.clusters, update.config
    phases = []
    for role, rows in teacher_rows(config, batch).items():
        call = lambda role=role, rows=rows: _score(update, clusters[role], batch, forward_keys, role, rows)  # noqa: E731
        phases.append((role, role, call))
    return phases


def _score(update, cluster, batch, forward_keys: list[str], role: str, rows) -> None:
    """opd_log_probs/<role> ← the teacher's log-probs of the student's tokens on `rows` (0 elsewhere)."""
    key = LOG_PROBS + role
    if rows is None:
        update.forward_log_probs(cluster, batch, key)
        return
    mask = torch.zeros(len(batch), dtype=torch.bool)
    mask[torch.as_tensor(rows, dtype=torch.long)] = True
    full = torch.zeros(batch.batch["responses"].shape, dtype=torch.float32)
    if len(rows):
        part = batch.select(batch_keys=forward_keys, non_tensor_keys=[], meta_info_keys=[])[rows.tolist()]
        update.forward_log_probs(cluster, part, key)
        full[mask] = part.batch[key].float()
    batch.batch[key], batch.batch[ROWS + role] = full, mask


def opd_step(batch, config, rl_advantages=None, rl_returns=None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(advantages, returns, metrics) of on-policy distillation: pure (rl_advantages None) A = −Σ c·KL, mixed
    A = A_RL − Σ c·KL; then whitening, mask and clip. The teachers' tensors leave the batch."""
    data = batch.batch
    mask = data["response_mask"]
    teachers = teacher_roles(config)
    log_probs = {role: data.pop(LOG_PROBS + role) for role in teachers}
    rows = {role: data.pop(ROWS + role, None) for role in teachers}
    kl, per_teacher = opd_teacher_kl(
        data["old_log_probs"],
        log_probs,
        mask,
        config.kl_penalty,
        kl_coefs={role: kl_coef(worker) for role, worker in teachers.items()},
        row_masks=rows,
    )
    out = opd_advantages(
        kl,
        mask,
        rl_advantages,
        rl_returns,
        whiten_advantages=config.whiten_advantages,
        advantage_clip=config.advantage_clip,
    )
    metrics = {"opd/kl": _token_mean(kl, mask), **out.metrics}
    for role, values in per_teacher.items():
        routed = mask if rows[role] is None else mask * rows[role].reshape(-1, 1).to(mask.dtype)
        metrics[f"opd/{role}/kl"] = _token_mean(values, routed)
        metrics[f"opd/{role}/tokens"] = float(routed.sum())
    return out.advantages, out.returns, metrics


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    total = float(mask.sum())
    return float((values * mask).sum()) / total if total else 0.0
