"""Where a step's old log-probs come from: actor_train's scoring pass, or the log-probs the rollout engine
returned for the tokens it sampled (`use_rollout_log_probs`, verl's key; docs/rollout_correction.md).

In a synchronous step the old policy is the one that sampled: actor_train's weights before the update, which
the weight sync has just copied into actor_infer. So the rollout log-probs are the old ones whenever the
engine computes them as actor_train would. With `use_rollout_log_probs: null` (auto) that is taken as shown
for a run only when all of this holds:
  set-up (`exactness_blockers`): the pipeline's training rows are the engine's samples token for token; the
    actor_infer strategy returns rollout log-probs and computes them with the same kernel family as
    actor_train's (strategy attribute `log_prob_kernels`); both in float32; sampling without filters
    (top_k 0, top_p 1, repetition_penalty 1; greedy only at temperature 1); no LoRA; every step's weight
    sync verified (weight_sync_check not off: the engine serves the trainer's exact weights); no rollout IS;
  each step: every row was sampled by the current weights (no `policy_lag` above 0);
  measured: on the first such step the pass runs anyway, and the rollout log-probs must equal it within
    MAX_ABS_DIFF on every response token (float32 rounding of a KV-cached decode vs one full forward is
    ~1e-6; bf16 or other weights are orders of magnitude above). A checkpoint keeps the result.
Then the pass is skipped on every step, and the rollout log-probs are the old ones from the measured step on
(the same on a resumed run as on an uninterrupted one). `true` reuses them on every step for engines that
are close, not equal (vLLM, SGLang; an opt-in): the pass runs on the run's first step only, to measure the
mismatch. `false` runs the pass every step. The `mismatch/*` metrics (recomputed vs rollout) are logged on
the steps that run the pass; `old_log_probs/reused` says each step's choice.
"""

import torch

from roll.strategies import strategy_class
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")

MAX_ABS_DIFF = 1e-4  # float32 log-probs of the same weights and kernels: ~1e-6 apart (measured: docs)
REUSED, MAX_DIFF = "old_log_probs/reused", "old_log_probs/max_abs_diff"


def exactness_blockers(config, rows_are_samples: bool) -> list[str]:
    """Why the rollout log-probs cannot be taken as exact for this config (empty: they can, once measured)."""
    infer, train = config.actor_infer, config.actor_train
    if train is None:
        return ["no actor_train (a rollout-only run has no old-log-prob pass)"]
    infer_cls, train_cls = (strategy_class(w.strategy_args.strategy_name) for w in (infer, train))
    gen = infer.generating_args
    checks = [
        (rows_are_samples, "the pipeline's training rows are not the engine's samples token for token"),
        (infer_cls.rollout_log_probs, f"actor_infer strategy {infer.strategy_args.strategy_name!r} returns none"),
        (
            infer_cls.log_prob_kernels is not None and infer_cls.log_prob_kernels == train_cls.log_prob_kernels,
            f"actor_infer ({infer.strategy_args.strategy_name}) and actor_train ({train.strategy_args.strategy_name}) "
            "do not compute log-probs with the same kernels",
        ),
        (
            infer.model_args.dtype == train.model_args.dtype == "float32",
            f"model_args.dtype is {infer.model_args.dtype} (actor_infer) / {train.model_args.dtype} (actor_train), "
            "not float32 on both",
        ),
        (
            gen.top_k in (None, 0, -1) and gen.top_p in (None, 1.0) and gen.repetition_penalty in (None, 1.0),
            "actor_infer.generating_args filter or penalise the sampling distribution (top_k / top_p / "
            "repetition_penalty)",
        ),
        (gen.do_sample or gen.temperature == 1.0, "greedy decoding at a temperature other than 1"),
        (not train.model_args.lora, "actor_train trains LoRA adapters (the engine serves merged weights)"),
        (config.weight_sync_check != "off", "weight_sync_check is off (the served weights are not verified)"),
        (config.rollout_is_threshold is None, "rollout IS is on (it needs old log-probs of their own)"),
        (
            not config.train_infer_correction.active,
            "train_infer_correction is on (it compares old and rollout log-probs)",
        ),
    ]
    return [why for ok, why in checks if not ok]


class OldLogProbs:
    """One run's choice, step by step: `needs_pass(batch)` before the forward passes, `settle(batch)` after
    the mismatch metrics (it puts the rollout log-probs in as the old ones where they are reused)."""

    def __init__(self, config, rows_are_samples: bool):
        self.setting = config.use_rollout_log_probs
        self.blockers = exactness_blockers(config, rows_are_samples) if self.setting is None else []
        self.measured = None  # max |Δ| of the measuring step; None until one ran (auto: over MAX_ABS_DIFF = refused)
        self._plan = "recompute"
        if self.setting is None and self.blockers:
            logger.info("old log-probs: recomputed by actor_train every step (%s)", "; ".join(self.blockers))

    # --- checkpoints: a resumed run goes on with the choice the run made ---------------------------------
    def state_dict(self) -> dict:
        return {"setting": self.setting, "blockers": list(self.blockers), "measured": self.measured}

    def load_state_dict(self, state: dict | None) -> None:
        """A checkpoint's measurement counts only if it was made under the same setting and set-up."""
        if state and state.get("setting") == self.setting and state.get("blockers") == self.blockers:
            self.measured = state.get("measured")

    def reset(self) -> None:
        """A run that starts over measures again, as its first attempt did."""
        self.measured = None

    # --- per step -------------------------------------------------------------------------------------
    def needs_pass(self, batch) -> bool:
        """Whether this step runs actor_train's old-log-prob pass (and decides what `settle` does)."""
        if self.setting is False or "rollout_log_probs" not in batch.batch:
            self._plan = "recompute"
        elif self.setting:
            self._plan = "measure" if self.measured is None else "reuse"
        elif self.blockers or not _on_policy(batch) or (self.measured is not None and self.measured > MAX_ABS_DIFF):
            self._plan = "recompute"
        else:
            self._plan = "measure" if self.measured is None else "reuse"
        return self._plan != "reuse"

    def settle(self, batch) -> dict:
        """After the mismatch metrics: on reuse steps (and the measuring step, if it shows them exact) the
        old log-probs become the rollout ones; returns old_log_probs/* metrics."""
        data, plan = batch.batch, self._plan
        if plan == "recompute":
            return {REUSED: 0.0}
        metrics = {}
        if plan == "measure":
            mask = data["response_mask"].bool()
            diff = (data["old_log_probs"] - data["rollout_log_probs"]).abs()[mask]
            self.measured = float(diff.max()) if diff.numel() else 0.0
            metrics[MAX_DIFF] = self.measured
            if self.setting is None and self.measured > MAX_ABS_DIFF:
                logger.warning(
                    "old log-probs: the rollout log-probs differ from actor_train's by up to %.3g (> %g): "
                    "recomputing them every step",
                    self.measured,
                    MAX_ABS_DIFF,
                )
                return {**metrics, REUSED: 0.0}
            logger.info(
                "old log-probs: the rollout log-probs %s actor_train's (max |Δ| %.3g): actor_train's pass is "
                "skipped from the next step on",
                "equal" if self.setting is None else "are used in place of",
                self.measured,
            )
        data["old_log_probs"] = data["rollout_log_probs"] * data["response_mask"]
        return {**metrics, REUSED: 1.0}


def _on_policy(batch) -> bool:
    """Every row sampled by the weights being trained (async rollout marks older ones with policy_lag)."""
    lags = batch.non_tensor_batch.get("policy_lag")
    return lags is None or not torch.as_tensor(lags.astype(int)).any()
