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

    def on_validation_end(self, step: int, batch: DataProto) -> None:
        """`step`: the training steps done (0 = before training); `batch`: every held-out sample, scored."""


class SampleLogger(StepCallback):
    """Writes `<directory>/step-<N>.jsonl` (N = step + 1, as in the progress line): one line per sample
    with its uid, prompt, response, ground truth, tag and score. `every` logs only every N-th step.
    Every validation's samples go to `<directory>/validation/step-<N>.jsonl` (N = steps trained, 0 = before
    training), in the same format."""

    def __init__(self, directory: str, every: int = 1):
        self.directory, self.every = Path(directory), every

    def on_step_end(self, step: int, batch: DataProto, metrics: dict) -> None:
        if (step + 1) % self.every:
            return
        _write_rows(self.directory / f"step-{step + 1}.jsonl", sample_rows(batch))

    def on_validation_end(self, step: int, batch: DataProto) -> None:
        _write_rows(self.directory / "validation" / f"step-{step}.jsonl", sample_rows(batch))


def _write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)  # readers never see a half-written file


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


def read_samples(directory: str, step: int, validation: bool = False) -> list[dict]:
    """The rows SampleLogger wrote for 1-based step `step` (validation: the held-out samples after `step` steps)."""
    path = Path(directory) / ("validation" if validation else "") / f"step-{step}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]
