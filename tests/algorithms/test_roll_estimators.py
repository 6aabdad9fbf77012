"""ROLL's return estimators and GiGPO's grouped rewards (docs/algorithms.md §11.5) on hand-computed tensors."""

import torch

from roll.algorithms import get_adv_estimator_fn, gigpo_rewards


def test_reinforce_is_the_masked_discounted_return():
    rewards = torch.tensor([[0.0, 1.0, 2.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the 5 sits on padding: ignored
    for name in ("reinforce", "step_reinforce", "gigpo"):
        adv, ret = get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, gamma=0.5)
        torch.testing.assert_close(adv, torch.tensor([[1.0, 2.0, 2.0, 0.0]]))
        assert torch.equal(adv, ret)


def test_agentic_reinforce_discounts_per_turn():
    # two turns: tokens 0-1 (reward on 1) and 3-4 (reward 4 on the last token; the 7 inside is ignored)
    rewards = torch.tensor([[0.0, 1.0, 9.0, 7.0, 4.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0, 0.0]])
    adv, _ = get_adv_estimator_fn("agentic_reinforce")(token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    torch.testing.assert_close(adv, torch.tensor([[3.0, 3.0, 0.0, 4.0, 4.0, 0.0]]))


def test_gigpo_episode_and_step_groups():
    # group g: two trajectories (episode scores 1 and 0), 2 + 1 step rows; rows 0 and 2 saw the same state S
    # group h: one trajectory with one row in state S (same text, other group: not pooled with g)
    episode = torch.tensor([1.0, 1.0, 0.0, 5.0])
    step = torch.tensor([0.9, 1.0, 0.0, 3.0])
    groups = ["g", "g", "g", "h"]
    states = ["S", "T", "S", "S"]
    total, ep, st = gigpo_rewards(episode, step, groups, states, episode_weight=1.0, step_weight=0.5)
    # episode level over g's step rows: mean 2/3, unbiased std sqrt(1/3)
    std = (1 / 3) ** 0.5
    expected_ep = torch.tensor([(1 / 3) / (std + 1e-6), (1 / 3) / (std + 1e-6), (-2 / 3) / (std + 1e-6), 0.0])
    torch.testing.assert_close(ep, expected_ep)
    # step level: state S in g has rows 0, 2 (0.9, 0.0): mean 0.45, std 0.9/sqrt(2); T and h's S are singletons
    s = 0.9 / 2**0.5
    torch.testing.assert_close(st, torch.tensor([0.45 / (s + 1e-6), 0.0, -0.45 / (s + 1e-6), 0.0]))
    torch.testing.assert_close(total, ep + 0.5 * st)
    _, ep_mean_only, _ = gigpo_rewards(episode, step, groups, states, use_std=False)
    torch.testing.assert_close(ep_mean_only, torch.tensor([1 / 3, 1 / 3, -2 / 3, 0.0]))


def test_tis_and_kimi15_by_hand():
    from roll.algorithms import PolicyLossConfig, get_policy_loss_fn

    old = torch.tensor([[0.0, 0.0]])
    lp = torch.tensor([[0.5, -0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, 2.0]])
    mask = torch.ones(1, 2)
    loss, _ = get_policy_loss_fn("tis")(old, lp, adv, mask, "token-mean", PolicyLossConfig())
    (grad,) = torch.autograd.grad(loss, lp)
    # weights clip(e^0.5, 0, 1) = 1 and e^-0.5; token-mean over 2 tokens
    torch.testing.assert_close(grad, torch.tensor([[-1.0 / 2, -2.0 * torch.exp(torch.tensor(-0.5)) / 2]]))
    loss, _ = get_policy_loss_fn("kimi15")(old, lp, adv, mask, "token-mean", PolicyLossConfig(kimi15_tau=0.2))
    torch.testing.assert_close(loss, ((-0.5 + 0.1 * 0.25) + (1.0 + 0.1 * 0.25)) / 2 * torch.ones(()))
    (grad,) = torch.autograd.grad(loss, lp)
    torch.testing.assert_close(grad, torch.tensor([[(-1.0 + 0.2 * 0.5) / 2, (-2.0 - 0.2 * 0.5) / 2]]))


def test_pg_variant_selects_the_loss():
    import dataclasses

    from roll.configs import effective_policy_loss_mode
    from roll.configs.algorithm import RLAlgorithmConfig

    config = RLAlgorithmConfig()
    assert effective_policy_loss_mode(config) == "vanilla"
    for variant, mode in (
        ("ppo", "vanilla"),
        ("tis", "tis"),
        ("topr", "topr"),
        ("cispo", "cispo"),
        ("kimi15", "kimi15"),
    ):
        assert effective_policy_loss_mode(dataclasses.replace(config, pg_variant=variant)) == mode


def test_topr_by_hand():
    from roll.algorithms import PolicyLossConfig, get_policy_loss_fn, policy_loss_inputs

    assert policy_loss_inputs("topr") == ("scores",) and policy_loss_inputs("vanilla") == ()
    old = torch.zeros(3, 2)
    lp = torch.tensor([[0.5, -0.5], [0.5, -0.5], [0.5, -0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [2.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    scores = torch.tensor([1.0, 0.0, -0.5])  # row 0 positive; 0 counts as negative (ROLL)
    config = PolicyLossConfig(topr_positive_weight=2.0, topr_negative_weight=0.5)
    loss, metrics = get_policy_loss_fn("topr")(old, lp, adv, mask, "token-mean", config, scores=scores)
    (grad,) = torch.autograd.grad(loss, lp)
    # per-token weight: positive row 2 (no ratio); negative rows 0.5·clip(e^lp, 0, 1) = 0.5 and 0.5·e^-0.5
    c = torch.exp(torch.tensor(-0.5))
    w = torch.tensor([[2.0, 2.0], [0.5, 0.5 * c], [0.5, 0.5 * c]])
    torch.testing.assert_close(grad, -w * adv * mask / 5)
    torch.testing.assert_close(loss, (-w * adv * lp.detach() * mask).sum() / 5)
    # the clip fraction counts negative-row tokens whose ratio was truncated (ratio e^0.5 > 1): 2 of 5 tokens
    assert abs(metrics["pg_clipfrac"] - 2 / 5) < 1e-6
    try:
        get_policy_loss_fn("topr")(old, lp, adv, mask, "token-mean", config)
    except ValueError as error:
        assert "one score per row" in str(error)
    else:
        raise AssertionError("topr without scores must fail")


def test_sequence_level_ratio_by_hand():
    """importance_sampling: seq — one ratio per row, exp(masked mean log ρ), gradient through the mean."""
    from roll.algorithms import PolicyLossConfig, get_policy_loss_fn

    old = torch.zeros(2, 3)
    lp = torch.tensor([[0.1, 0.3, 9.0], [0.0, 0.0, 0.0]], requires_grad=True)  # the 9.0 is padding
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # row 1 is empty: ratio 1, no loss
    loss, metrics = get_policy_loss_fn("vanilla")(
        old,
        lp,
        adv,
        mask,
        "token-mean",
        PolicyLossConfig(clip_ratio_low=0.5, clip_ratio_high=0.5, importance_sampling="seq"),
    )
    rho = torch.exp(torch.tensor(0.2))  # inside the clip range [0.5, 1.5]
    torch.testing.assert_close(loss, -rho)
    (grad,) = torch.autograd.grad(loss, lp)
    # d/dlp_k of mean over 2 tokens of −ρ: each token −ρ/2 from each of the 2 token losses, /2 (token-mean)
    torch.testing.assert_close(grad, torch.tensor([[-rho / 2, -rho / 2, 0.0], [0.0, 0.0, 0.0]]))
    assert metrics["pg_clipfrac"] == 0.0
    # the token-level default differs on the same inputs
    token_loss, _ = get_policy_loss_fn("vanilla")(
        old, lp, adv, mask, "token-mean", PolicyLossConfig(clip_ratio_low=0.5, clip_ratio_high=0.5)
    )
    assert not torch.allclose(token_loss, loss)
