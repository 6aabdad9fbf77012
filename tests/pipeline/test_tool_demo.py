"""The tool-calling demo (examples/tool_demo/calculator_native.yaml, env_manager agent_native) through the real
pipeline: Ray, DeepSpeed, hf_infer generation, environment workers on CPU. End to end: every row trains exactly the
reply the engine generated, the calls ran and were counted. Learning: the validation success with the calculator
rises, the same model without it stays near zero: not shipped yet (docs/agents.md, the calculator demo)."""

import json

import numpy as np
import pytest

from tests.pipeline.demo_cache import prepared_tool_demo
from tests.pipeline.helpers import REPO, agentic_config

TOOL_DEMO = REPO / "examples" / "tool_demo"


@pytest.fixture(scope="session")
def tool_model(tmp_path_factory):
    """The demo's model with a shorter warm start (300 steps, ~2 min on one core when its cache entry is built):
    it writes calls in the template's format, which is all these end-to-end checks need."""
    from roll.demo.tool_calling import ToolDemoSettings

    settings = ToolDemoSettings(warm_start_steps=300)
    return prepared_tool_demo(tmp_path_factory.mktemp("tool_demo"), settings) / "model"


def tool_config(model, out, overrides=()):
    return agentic_config(model, out, overrides, config_path=TOOL_DEMO, config_name="calculator_native")


def test_tool_demo_rows_hold_the_generated_tokens_and_the_calls_ran(ray_session, tool_model, tmp_path):
    from roll.pipeline.agentic.pipeline import AgenticPipeline

    config = tool_config(
        tool_model,
        tmp_path,
        [
            "train_env_manager.tags=[Sums,SumsTIR]",  # native calls, and the same task with env_manager tir
            "+custom_envs.SumsTIR={env_type: arithmetic, env_manager: tir, max_turns: 1, max_tokens_per_step: 24, "
            "env_config: {min_operand: 100, max_operand: 499}, tool_wrapper: {tool_configs: [{tool_id: calculator}]}}",
            "train_env_manager.num_env_groups=2",
            "train_env_manager.group_size=4",
            "rollout_batch_size=8",
            "sample_log_steps=1",
        ],
    )
    with AgenticPipeline(config) as pipeline:
        batch, metrics = pipeline.rollout(step=0)
        history = pipeline.run()
    transcripts = [json.loads(line) for line in (tmp_path / "samples" / "step-1.jsonl").read_text().splitlines()]
    mask, responses, env_ids = batch.batch["response_mask"], batch.batch["responses"], batch.non_tensor_batch["env_id"]
    for record in (t for t in transcripts if t["tag"] == "Sums"):  # a row per turn, exactly the reply generated
        rows = [r for r in range(len(batch)) if env_ids[r] == record["env_id"]]
        assert len(rows) == len(record["turns"]) >= 1
        for r, turn in zip(rows, record["turns"]):
            assert responses[r][mask[r] == 1].tolist() == turn["reply_ids"]
    for record in (t for t in transcripts if t["tag"] == "SumsTIR"):  # one row per episode: its replies, in order
        (row,) = [r for r in range(len(batch)) if env_ids[r] == record["env_id"]]
        assert responses[row][mask[row] == 1].tolist() == [i for turn in record["turns"] for i in turn["reply_ids"]]
    called = [t for t in transcripts if any("<tool_call>" in turn["action"] for turn in t["turns"])]
    assert called, "the warm-started model calls the calculator about half the time"
    for record in called:  # the calculator's answer is what the next turn was shown
        first = next(i for i, turn in enumerate(record["turns"]) if "<tool_call>" in turn["action"])
        if first + 1 < len(record["turns"]):
            assert record["turns"][first + 1]["observation"].strip().lstrip("-").isdigit()
    assert metrics["env/Sums/tool_calls"] > 0 and "env/Sums/stop_done" in metrics and "env/SumsTIR/stop_done" in metrics
    assert np.isfinite(history["steps"][0]["actor/pg_loss"])
