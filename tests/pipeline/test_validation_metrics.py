"""pass@k and per-tag validation scores with several samples per prompt (pure maths, no Ray)."""

import itertools

import pytest

from roll.pipeline.rlvr.validation_metrics import pass_at_k, pass_ks, validation_metrics


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_pass_at_k_is_the_chance_that_k_of_the_n_samples_hold_a_pass(n):
    for correct in range(n + 1):
        outcomes = [True] * correct + [False] * (n - correct)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            exact = sum(any(subset) for subset in subsets) / len(subsets)
            assert pass_at_k(n, correct, k) == pytest.approx(exact, abs=1e-12), (n, correct, k)
        assert pass_at_k(n, correct, 1) == pytest.approx(correct / n)
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_ks_are_powers_of_two_and_n():
    assert [pass_ks(n) for n in (1, 2, 3, 4, 6, 8)] == [[1], [1, 2], [1, 2, 3], [1, 2, 4], [1, 2, 4, 6], [1, 2, 4, 8]]


def test_scores_and_pass_at_k_per_tag_with_two_samples_per_prompt():
    # prompts: a0 (1 of 2 right), a1 (0 of 2), b0 (2 of 2); samples are prompt-major
    metrics = validation_metrics([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], ["a", "a", "b"], n=2)
    assert metrics == pytest.approx(
        {
            "val/score/a": 0.25,
            "val/score/b": 1.0,
            "val/score/all": 0.5,
            "val/pass@1/a": 0.25,
            "val/pass@1/b": 1.0,
            "val/pass@1/all": 0.5,
            "val/pass@2/a": 0.5,
            "val/pass@2/b": 1.0,
            "val/pass@2/all": 2 / 3,
        }
    )


def test_pass_needs_the_pass_score_and_one_sample_reports_scores_only():
    partial = validation_metrics([0.9, 1.0, 0.5, 0.2], ["t", "t"], n=2)
    assert partial["val/pass@2/t"] == 0.5 and partial["val/score/t"] == pytest.approx(0.65)
    assert validation_metrics([0.9, 1.0, 0.5, 0.2], ["t", "t"], n=2, pass_score=0.5)["val/pass@2/t"] == 1.0
    assert validation_metrics([1.0, 0.0], ["t", "u"], n=1) == {
        "val/score/t": 1.0,
        "val/score/u": 0.0,
        "val/score/all": 0.5,
    }
    with pytest.raises(ValueError, match="3 scores for 2 prompts × 2 samples"):
        validation_metrics([1.0, 0.0, 1.0], ["t", "u"], n=2)
