"""ROLL's two rollout records: `rollout_mock` (dump every step's rollout, then replay it instead of
generating: two runs then train on identical samples, for precision alignment of engines and strategies) and
`rollout_dump_dir` (a per-step JSON log of the samples, ROLL's column layout)."""

import json
import os
import pickle
from pathlib import Path

from roll.pipeline.core.callbacks import StepCallback, _plain
from roll.utils.logging import get_logger

logger = get_logger(__name__)


class RolloutStore:
    """rollout_mock: `around(kind, step, produce)` returns produce() (storing it in dump mode) or, in mock mode,
    what a dump run stored for (kind, step) without calling produce. kind: "train" or "val"; step 0-based
    (validation: the steps trained before it), as ROLL's <dump_dir>/<train|val>/step_<NNNNNN>.pkl."""

    def __init__(self, config):
        self.config = config if config is not None and config.enable else None

    @property
    def replaying(self) -> bool:
        return self.config is not None and self.config.mode == "mock"

    def path(self, kind: str, step: int) -> Path:
        return Path(self.config.dump_dir) / kind / f"step_{step:06d}.pkl"

    def around(self, kind: str, step: int, produce):
        if self.config is None:
            return produce()
        path = self.path(kind, step)
        if self.replaying:
            if not path.is_file():
                raise FileNotFoundError(
                    f"rollout_mock (mode: mock): no dump for {kind} step {step} at {path}; run with "
                    f"rollout_mock.mode: dump first (as many steps, the same validation schedule) or fix "
                    f"rollout_mock.dump_dir = {self.config.dump_dir!r}"
                )
            with open(path, "rb") as handle:
                value = pickle.load(handle)
            logger.info("rollout_mock: replayed %s step %d from %s", kind, step, path)
            return value
        value = produce()
        self.save(kind, step, value)
        return value

    def save(self, kind: str, step: int, value) -> None:
        path = self.path(kind, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # a replay never reads a half-written dump
        logger.info("rollout_mock: dumped %s step %d to %s", kind, step, path)


# ROLL's column names (roll/pipeline/rlvr/utils.py COLUMMNS_CONFIG) → the batch's non-tensor key here
DUMP_COLUMNS = {
    "id": "uid",
    "prompt": "prompt_text",
    "messages": "messages",
    "ground_truth": "ground_truth",
    "tag": "tag",
    "domain": "domain",
    "responses": "response_text",
}


class RolloutDumpLogger(StepCallback):
    """rollout_dump_dir: after every training step, <directory>/rollout_dump_data.step_<N>.jsonl (N 0-based) holds
    one JSON object of columns, each a list over the step's samples: ROLL's names where the batch has them, plus
    scores and global_step. ROLL writes it only for an absolute path and, in its agentic pipeline, from the
    columns its env managers name; here any path, the same columns for both pipelines."""

    def __init__(self, directory: str):
        self.directory = Path(directory)

    def on_step_end(self, step: int, batch, metrics: dict) -> None:
        columns = {
            out: [_plain(v) for v in batch.non_tensor_batch[key]]
            for out, key in DUMP_COLUMNS.items()
            if key in batch.non_tensor_batch
        }
        columns["scores"] = batch.batch["scores"].tolist()
        columns["global_step"] = [step] * len(batch)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"rollout_dump_data.step_{step}.jsonl"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(columns, ensure_ascii=False, default=str) + "\n")
        tmp.replace(path)


def rollout_records(config, callbacks: list) -> RolloutStore:
    """A rollout kind's two records: appends the rollout_dump_dir logger to `callbacks` (when set) and returns the
    rollout_mock store (ROLL's rollout dump / replay)."""
    if config.rollout_dump_dir:
        callbacks.append(RolloutDumpLogger(config.rollout_dump_dir))
    return RolloutStore(config.rollout_mock)
