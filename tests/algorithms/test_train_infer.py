"""ROLL's train_infer_correction (roll/utils/train_infer_corrections.py: _compute_all_granularity,
compute_train_infer_correction, apply_train_infer_correction_to_batch), with numbers worked by hand.

ℓ = old − rollout per token; ratio = exp(ℓ at the level), diff = exp(old) − exp(rollout) at the level; levels:
token, segment (mean over a maximal run of the mask), geometric (row mean), sequence (row sum)."""

import math
from types import SimpleNamespace

import pytest
import torch

from roll.algorithms import train_infer_correction
from roll.configs import ConfigError
from roll.configs.train_infer import TrainInferCorrectionConfig, TrainInferFilterConfig, TrainInferISWeightConfig
from roll.distributed.data_proto import DataProto
from roll.pipeline.core.step_maths import apply_train_infer_correction
from roll.pipeline.rlvr.config import load_rlvr_config
from tests.configs.test_roll_compat import rlvr_dict

MASK = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # row 0 has two turns: positions 0-1 and 3
LOG_RATIO = torch.tensor([[0.1, -0.1, 0.0, 0.2], [0.0, 0.3, -0.3, 0.0]])
ROLLOUT = torch.full((2, 4), math.log(0.5))  # π_rollout = 0.5 for every sampled token
OLD = ROLLOUT + LOG_RATIO  # π_train = 0.5·exp(ℓ): diff = 0.5·(exp(ℓ) − 1)


def d(x):
    return 0.5 * (math.exp(x) - 1)


def test_the_example_filter_segment_ratio_and_diff():
    """ROLL's agent_val_frozen_lake-pg_var_is_correct.yaml: segment level, ratio in [0.8, 1.05], diff in ±0.1."""
    cfg = TrainInferCorrectionConfig(
        filters=[TrainInferFilterConfig(True, "segment", True, 0.8, 1.05, True, -0.1, 0.1)]
    )
    weights, keep, metrics = train_infer_correction(OLD, ROLLOUT, MASK, cfg)
    assert weights is None  # is_weight off
    # row 0, turn 1: mean ℓ 0 → ratio 1, mean diff (d(.1) + d(−.1))/2 = 0.0025: kept; turn 2: ratio e^0.2 = 1.221
    # (and diff d(.2) = 0.1107): dropped. Row 1, one turn: mean ℓ 0 → 1; mean diff (d(.3) + d(−.3))/3 = 0.0151: kept
    assert keep.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert metrics["train_infer/segment_ratio_pass"] == pytest.approx(5 / 6)
    assert metrics["train_infer/segment_diff_pass"] == pytest.approx(5 / 6)
    assert metrics["train_infer/final_mask_mean"] == pytest.approx(5 / 6)
    # seq-mean-token-mean of the token ratio: ((e^.1 + e^−.1 + e^.2)/3 + (1 + e^.3 + e^−.3)/3)/2
    rows = [(math.exp(0.1) + math.exp(-0.1) + math.exp(0.2)) / 3, (1 + math.exp(0.3) + math.exp(-0.3)) / 3]
    assert metrics["train_infer/ratio_token_mean"] == pytest.approx(sum(rows) / 2, rel=1e-6)
    assert metrics["train_infer/diff_sequence_mean"] == pytest.approx(
        (d(0.1) + d(-0.1) + d(0.2) + d(0.3) + d(-0.3)) / 2, rel=1e-5
    )


def test_token_diff_filter_and_levels():
    cfg = TrainInferCorrectionConfig(filters=[TrainInferFilterConfig(True, "token", False, diff_enabled=True,
                                                                     diff_low=-0.1, diff_high=0.1)])  # fmt: skip
    _, keep, _ = train_infer_correction(OLD, ROLLOUT, MASK, cfg)
    # |d(.2)| = 0.1107, d(.3) = 0.1749, d(−.3) = −0.1296 leave; the rest stay
    assert keep.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]
    cfg = TrainInferCorrectionConfig(filters=[TrainInferFilterConfig(True, "sequence", ratio_low=0.9, ratio_high=1.1)])
    _, keep, _ = train_infer_correction(OLD, ROLLOUT, MASK, cfg)
    assert keep.tolist() == [[0, 0, 0, 0], [1, 1, 1, 0]]  # row sums: e^0.2 = 1.22 out, e^0 = 1 in


def test_is_weight_levels_and_bound():
    geometric = TrainInferCorrectionConfig(is_weight=TrainInferISWeightConfig(True, "geometric", 1.05))
    weights, keep, metrics = train_infer_correction(OLD, ROLLOUT, MASK, geometric)
    # row 0: exp((0.1 − 0.1 + 0.2)/3) = 1.0689 → clamped to 1.05; row 1: exp(0) = 1
    torch.testing.assert_close(weights, torch.tensor([[1.05, 1.05, 0.0, 1.05], [1.0, 1.0, 1.0, 0.0]]))
    assert keep.tolist() == MASK.tolist() and metrics["train_infer/is_weight_clipfrac"] == pytest.approx(0.5)
    sequence = TrainInferCorrectionConfig(is_weight=TrainInferISWeightConfig(True, "sequence", None))
    weights, _, _ = train_infer_correction(OLD, ROLLOUT, MASK, sequence)
    assert weights[0, 0].item() == pytest.approx(math.exp(0.2), rel=1e-6) and weights[1, 1].item() == pytest.approx(1)
    segment = TrainInferCorrectionConfig(is_weight=TrainInferISWeightConfig(True, "segment", 1.2))
    weights, _, _ = train_infer_correction(OLD, ROLLOUT, MASK, segment)
    torch.testing.assert_close(weights[0], torch.tensor([1.0, 1.0, 0.0, 1.2]))  # turn means 0 and 0.2 (capped)


def test_the_pipeline_step_masks_the_loss_after_the_advantages():
    cfg = TrainInferCorrectionConfig(
        is_weight=TrainInferISWeightConfig(True, "token", 1.2),
        filters=[TrainInferFilterConfig(True, "segment", True, 0.8, 1.05)],
    )
    batch = DataProto.from_dict({"old_log_probs": OLD, "rollout_log_probs": ROLLOUT, "response_mask": MASK.clone()})
    metrics = apply_train_infer_correction(batch, SimpleNamespace(train_infer_correction=cfg))
    assert batch.batch["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    expected = torch.exp(LOG_RATIO).clamp(max=1.2) * MASK
    torch.testing.assert_close(batch.batch["rollout_is_weights"], expected)
    assert metrics["train_infer/final_mask_mean"] == pytest.approx(5 / 6)


def test_config():
    block = {"filters": [{"enabled": True, "agg_type": "segment", "diff_enabled": True, "diff_low": -0.1}]}
    config = load_rlvr_config(rlvr_dict(train_infer_correction=block))
    f = config.train_infer_correction.filters[0]
    assert (f.agg_type, f.ratio_low, f.ratio_high, f.diff_low, f.diff_high) == ("segment", 0.8, 1.2, -0.1, 0.2)
    with pytest.raises(ConfigError, match="rollout_is both weight the policy loss"):
        load_rlvr_config(
            rlvr_dict(train_infer_correction={"is_weight": {"enabled": True}}, rollout_is=True, rollout_is_threshold=2)
        )
    with pytest.raises(ConfigError, match=r"filters\[0\].ratio_low' = 1.5 > ratio_high"):
        load_rlvr_config(rlvr_dict(train_infer_correction={"filters": [{"enabled": True, "ratio_low": 1.5}]}))
