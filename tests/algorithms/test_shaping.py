"""ROLL's shaping keys (docs/algorithms.md §11): hand-computed tensors, and each key changes only its target."""

import dataclasses

import numpy as np
import pytest
import torch

from roll.algorithms import reward_norm, sample_level_mask, sample_loss_weights, shape_advantages
from roll.configs import policy_loss_config
from roll.configs.algorithm import RLAlgorithmConfig
from roll.distributed.data_proto import DataProto
from roll.pipeline.core import step_maths
from roll.utils.functional import scores_on_last_token

UID = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
SCORES = torch.tensor([1.0, 0.0, 1.0, 1.0, -1.0, 0.0])
LENGTHS = torch.tensor([4, 2, 3, 1, 4, 2])


def test_sample_level_masks_by_hand():
    # group means: a 0.5, b 1.0, c -0.5; width 4 → rows 0 and 4 are truncated
    assert sample_level_mask(SCORES, LENGTHS, 4, UID, max_len_mask=True).tolist() == [0, 1, 1, 1, 0, 1]
    assert sample_level_mask(SCORES, LENGTHS, 4, UID, difficulty_mask=True).tolist() == [1, 1, 0, 0, 0, 0]
    kept = sample_level_mask(
        SCORES, LENGTHS, 4, UID, difficulty_mask=True, difficulty_low_threshold=-1, difficulty_high_threshold=0.5
    )
    assert kept.tolist() == [0, 0, 0, 0, 1, 1]  # strict: a's mean 0.5 is not < 0.5
    kept = sample_level_mask(SCORES, LENGTHS, 4, UID, error_max_len_clip=True, error_max_len_threshold=3)
    assert kept.tolist() == [1, 1, 1, 1, 0, 1]  # failed and ≥ 3 tokens: row 4 only
    partial = sample_level_mask(torch.tensor([0.5]), torch.tensor([9]), 10, ["x"], error_max_len_clip=True,
                                error_max_len_threshold=3)  # fmt: skip
    assert partial.tolist() == [1.0]  # intent fix: a partial score is not an error
    with pytest.raises(ValueError, match="error_max_len_threshold"):
        sample_level_mask(SCORES, LENGTHS, 4, UID, error_max_len_clip=True)


def test_reward_norm_by_hand():
    r = torch.tensor([1.0, 3.0, 2.0, 2.0])
    uid = ["p", "p", "q", "q"]
    # batch: mean 2, unbiased std sqrt(2/3)
    std = (2 / 3) ** 0.5
    torch.testing.assert_close(reward_norm(r, uid, "batch", "batch"), (r - 2) / (std + 1e-6))
    # group: p mean 2 std sqrt(2); q constant → 0
    expected = torch.tensor([-1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6), 0.0, 0.0])
    torch.testing.assert_close(reward_norm(r, uid, "group", "group"), expected)
    torch.testing.assert_close(reward_norm(r, uid, "batch", None), r - 2)
    # group std without a mean: each row is divided by its own group's std (ROLL: a [G, B] broadcast)
    torch.testing.assert_close(reward_norm(r, uid, None, "group")[:2], r[:2] / (2**0.5 + 1e-6))
    # a group of one: std 1, not NaN
    torch.testing.assert_close(reward_norm(torch.tensor([3.0]), ["x"], "group", "group"), torch.tensor([0.0]))
    assert torch.equal(reward_norm(r, uid, None, None), r)
    with pytest.raises(ValueError, match="norm_mean_type='running'"):
        reward_norm(r, uid, "running", None)


def test_sample_loss_weights_by_hand():
    lengths = torch.tensor([2, 4, 6])
    w = sample_loss_weights(lengths, length_loss_weight=True)
    raw = torch.tensor([1.5, 1.0, 0.5])
    torch.testing.assert_close(w, raw * 3 / raw.sum())
    w = sample_loss_weights(lengths, [0.0, 1.0, 2.0], difficulty_loss_weight=True)
    raw = torch.tensor([0.5, 2.0, 2.0])  # difficulty clamped to [0, 1]
    torch.testing.assert_close(w, raw * 3 / raw.sum())
    assert torch.equal(sample_loss_weights(lengths), torch.ones(3))
    with pytest.raises(ValueError, match="difficulty"):
        sample_loss_weights(lengths, None, difficulty_loss_weight=True)


def test_shape_advantages_by_hand():
    a = torch.tensor([[1.0, 3.0, 9.0], [5.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # valid 1, 3, 5: mean 3, unbiased var 4 → -1, 0, 1
    out = shape_advantages(a, m, whiten_advantages=True)
    torch.testing.assert_close(out, torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), atol=1e-5, rtol=0)
    assert shape_advantages(a, m, advantage_clip=2.0).tolist() == [[1.0, 2.0, 0.0], [2.0, 0.0, 0.0]]


def _batch():
    torch.manual_seed(0)
    mask = (torch.arange(4).expand(6, 4) < LENGTHS.unsqueeze(-1)).float()
    tensors = {
        "scores": SCORES.clone(),
        "token_level_scores": scores_on_last_token(SCORES, mask),
        "response_mask": mask,
        "old_log_probs": -torch.rand(6, 4),
    }
    return DataProto.from_dict(tensors, {"uid": UID.copy(), "difficulty": np.array([0.1, 0.1, 0.9, 0.9, 0.5, 0.5])})


def _run(**keys):
    keys.setdefault("adv_estimator", "reinforce")  # no baseline: every reward change reaches A
    config = dataclasses.replace(RLAlgorithmConfig(), **keys)
    batch = _batch()
    step_maths.apply_reward_shaping(batch, config)
    step_maths.apply_reward_kl(batch, config, None)
    step_maths.compute_advantages(batch, config)
    return batch.batch


BASE = _run()


@pytest.mark.parametrize(
    "keys, changed",
    [
        ({"max_len_mask": True}, {"response_mask", "advantages", "returns"}),
        ({"difficulty_mask": True}, {"response_mask", "advantages", "returns"}),
        (
            {"error_max_len_clip": True, "error_max_len_threshold": 3},
            {"response_mask", "advantages", "returns"},
        ),  # fmt: skip
        ({"norm_mean_type": "batch"}, {"token_level_scores", "token_level_rewards", "advantages", "returns"}),
        ({"norm_std_type": "batch"}, {"token_level_scores", "token_level_rewards", "advantages", "returns"}),
        ({"use_reward_scaling": True}, {"token_level_scores", "token_level_rewards", "advantages", "returns"}),
        ({"reward_clip": 0.5}, {"token_level_scores", "token_level_rewards", "advantages", "returns"}),
        ({"whiten_advantages": True}, {"advantages"}),  # returns stay unwhitened
        ({"advantage_clip": 0.5}, {"advantages"}),
        ({"length_loss_weight": True}, {"advantages"}),
        ({"difficulty_loss_weight": True}, {"advantages"}),
        ({"whiten_rewards": True}, {"advantages", "returns"}),
    ],
)
def test_each_key_changes_only_its_target(keys, changed):
    base, out = BASE, _run(**keys)
    assert set(out) == set(base)
    differing = {k for k in out if not torch.equal(out[k], base[k])}
    assert differing == changed, keys


def test_default_off_is_identical_to_no_shaping_step():
    batch = _batch()
    before = {k: v.clone() for k, v in batch.batch.items()}
    assert step_maths.apply_reward_shaping(batch, RLAlgorithmConfig()) == {}
    assert all(torch.equal(batch.batch[k], before[k]) for k in before)


def test_masked_samples_have_no_advantage():
    out = _run(difficulty_mask=True)  # only prompt "a" (mean 0.5) survives
    assert out["advantages"][2:].abs().sum() == 0 and out["response_mask"][2:].sum() == 0
    assert out["advantages"][:2].abs().sum() > 0


def test_use_pg_clip_range():
    config = RLAlgorithmConfig()
    set_range = dataclasses.replace(config, pg_clip_low=0.1, pg_clip_high=0.3)
    plc = policy_loss_config(set_range)
    assert (plc.clip_ratio_low, plc.clip_ratio_high) == (0.1, 0.3)  # null: verl meaning
    plc = policy_loss_config(dataclasses.replace(set_range, use_pg_clip_range=True))
    assert (plc.clip_ratio_low, plc.clip_ratio_high) == (0.1, 0.3)
    plc = policy_loss_config(dataclasses.replace(set_range, use_pg_clip_range=False))
    assert (plc.clip_ratio_low, plc.clip_ratio_high) == (0.2, 0.2)  # ROLL: range keys ignored
