"""Properties every policy loss shares (docs/algorithms.md §5, §5.8, §10): metrics, IS weights, global batch info,
registry."""

import math

import pytest
import torch

from roll.algorithms import POLICY_LOSS_REGISTRY, PolicyLossConfig, get_policy_loss_fn, register_policy_loss

NAMES = ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "sapo"]
# clip_cov_ratio = 1 selects every candidate, so clip_cov is deterministic in these tests
DETERMINISTIC = PolicyLossConfig(clip_cov_ratio=1.0)


def batch():
    g = torch.Generator().manual_seed(7)
    old = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    lp = (old + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    return old, lp, adv, mask


def test_registry_has_exactly_the_spec_names_and_functions():
    assert set(NAMES) <= set(POLICY_LOSS_REGISTRY)
    for name in NAMES:
        fn = get_policy_loss_fn(name)
        assert fn.__name__ == f"compute_policy_loss_{name}"


def test_unknown_loss_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_policy_loss_fn("ppo2")
    for name in NAMES:
        assert name in str(err.value)


def test_register_round_trip():
    name = "test_only_policy_loss"
    try:

        @register_policy_loss(name)
        def custom(*args, **kwargs):
            return torch.tensor(0.0), {}

        assert get_policy_loss_fn(name) is custom
        with pytest.raises(ValueError, match="already registered"):
            register_policy_loss(name)(lambda *args, **kwargs: (torch.tensor(0.0), {}))
        assert get_policy_loss_fn(name) is custom
    finally:
        POLICY_LOSS_REGISTRY.pop(name, None)


@pytest.mark.parametrize("name", NAMES)
def test_three_float_metrics_and_finite_loss(name):
    loss, metrics = get_policy_loss_fn(name)(*batch(), config=DETERMINISTIC)
    assert set(metrics) == {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}
    assert all(type(v) is float for v in metrics.values())
    assert loss.dim() == 0 and math.isfinite(loss.item())
    loss.backward()  # differentiable


@pytest.mark.parametrize("name", NAMES)
def test_inputs_not_modified(name):
    tensors = batch()
    weights = torch.rand(3, 5, dtype=torch.float64)
    before = [t.detach().clone() for t in (*tensors, weights)]
    get_policy_loss_fn(name)(*tensors, config=DETERMINISTIC, rollout_is_weights=weights)
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, (*tensors, weights)))


@pytest.mark.parametrize("name", NAMES)
def test_constant_is_weight_scales_the_loss_and_gets_no_gradient(name):
    fn = get_policy_loss_fn(name)
    old, lp, adv, mask = batch()
    plain, _ = fn(old, lp, adv, mask, config=DETERMINISTIC)
    weights = torch.full((3, 5), 2.5, dtype=torch.float64, requires_grad=True)
    weighted, _ = fn(old, lp, adv, mask, config=DETERMINISTIC, rollout_is_weights=weights)
    assert weighted.item() == pytest.approx(2.5 * plain.item(), rel=1e-8)
    weighted.backward()
    assert weights.grad is None or weights.grad.abs().sum().item() == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_fully_masked_micro_batch_gives_zero_not_nan(name):
    old, lp, adv, _ = batch()
    loss, metrics = get_policy_loss_fn(name)(old, lp, adv, torch.zeros(3, 5, dtype=torch.float64))
    assert loss.item() == 0.0
    assert all(v == 0.0 for v in metrics.values())
    loss.backward()
    assert lp.grad is None or lp.grad.abs().sum().item() == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_global_batch_info_reaches_agg_loss(name):
    fn = get_policy_loss_fn(name)
    tensors = batch()
    local, _ = fn(*tensors, config=DETERMINISTIC)
    # the local counts (9 tokens, 3 non-empty rows) with dp_size 3 → 3× the local loss
    info = {"dp_size": 3, "batch_num_tokens": 9, "global_batch_size": 3}
    scaled, _ = fn(*tensors, config=PolicyLossConfig(clip_cov_ratio=1.0, global_batch_info=info))
    factor = 1.0 if name == "geo_mean" else 3.0  # geo_mean takes a plain mean, as in verl
    assert scaled.item() == pytest.approx(factor * local.item(), rel=1e-10)


def test_global_batch_info_token_count_divides_the_token_sum():
    old, lp, adv, mask = batch()
    per_token, _ = get_policy_loss_fn("gpg")(
        old,
        lp,
        adv,
        mask,
        loss_agg_mode="seq-mean-token-sum-norm",
        config=PolicyLossConfig(global_batch_info={"loss_scale_factor": 1.0}),
    )
    token_sum = (-(lp * adv) * mask).sum().item()
    assert per_token.item() == pytest.approx(token_sum, rel=1e-12)
    loss, _ = get_policy_loss_fn("gpg")(
        old, lp, adv, mask, config=PolicyLossConfig(global_batch_info={"batch_num_tokens": 36})
    )
    assert loss.item() == pytest.approx(token_sum / 36, rel=1e-12)


def test_global_batch_info_unknown_key_raises():
    with pytest.raises(ValueError, match="dp_size"):
        get_policy_loss_fn("vanilla")(*batch(), config=PolicyLossConfig(global_batch_info={"world": 2}))


def test_config_as_mapping_or_none():
    tensors = batch()
    from_dict, _ = get_policy_loss_fn("vanilla")(*tensors, config={"clip_ratio_low": 0.1, "clip_ratio_high": 0.3})
    from_cfg, _ = get_policy_loss_fn("vanilla")(
        *tensors, config=PolicyLossConfig(clip_ratio_low=0.1, clip_ratio_high=0.3)
    )
    assert from_dict.item() == from_cfg.item()
    default, _ = get_policy_loss_fn("vanilla")(*tensors)
    assert default.item() == get_policy_loss_fn("vanilla")(*tensors, config=PolicyLossConfig())[0].item()
