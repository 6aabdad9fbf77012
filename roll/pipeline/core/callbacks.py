"""Hooks called at the end of every pipeline step: `RLVRPipeline(config, callbacks=[...])`.

A callback sees the step's full batch (prompts, responses, scores, advantages, ...) and its metrics;
it must not change them. `SampleLogger` is the built-in one: what the policy was asked and answered.
"""

import json
from pathlib import Path

import numpy as np

from roll.distributed.data_proto import DataProto


class StepCallback:
    def on_step_end(self, step: int, batch: DataProto, metrics: dict) -> None:
        """`step` is 0-based; `metrics` are the step's metrics before validation."""


class SampleLogger(StepCallback):
    """Writes `<directory>/step-<N>.jsonl` (N = step + 1, as in the progress line): one line per sample
    with its uid, prompt, response, ground truth, tag and score. `every` logs only every N-th step."""

    def __init__(self, directory: str, every: int = 1):
        self.directory, self.every = Path(directory), every

    def on_step_end(self, step: int, batch: DataProto, metrics: dict) -> None:
        if (step + 1) % self.every:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        rows = sample_rows(batch)
        path = self.directory / f"step-{step + 1}.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
        tmp.replace(path)


def sample_rows(batch: DataProto) -> list[dict]:
    columns = {
        "uid": "uid",
        "prompt": "prompt_text",
        "response": "response_text",
        "ground_truth": "ground_truth",
        "tag": "tag",
    }
    present = {out: batch.non_tensor_batch[key] for out, key in columns.items() if key in batch.non_tensor_batch}
    scores = batch.batch["scores"].tolist()
    lengths = batch.batch["response_mask"].sum(-1).long().tolist()
    return [
        {
            **{out: _plain(values[i]) for out, values in present.items()},
            "score": scores[i],
            "response_tokens": lengths[i],
        }
        for i in range(len(batch))
    ]


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def read_samples(directory: str, step: int) -> list[dict]:
    """The rows SampleLogger wrote for 1-based step `step`."""
    path = Path(directory) / f"step-{step}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]
