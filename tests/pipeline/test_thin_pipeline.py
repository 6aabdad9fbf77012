"""A kind without generation runs on the thin pipeline (roll/pipeline/base.py) as it is: one trained role, no
actor_infer, no weight sync, no KL controller, no PPO update; the loop, validation schedule, checkpoints of its
trained role and the resume are the thin pipeline's. The roles are test doubles (no Ray): what is checked is the
loop around them."""

import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from roll.configs import PipelineConfig, RoleSpec, WorkerConfig, load_config
from roll.configs.checks import check_roles, check_run_length
from roll.configs.loader import field_help
from roll.configs.roles import ACTOR_WORKER
from roll.pipeline.base import BasePipeline
from roll.pipeline.core.checkpointing import STATE_FILE
from roll.utils import checkpoint


@dataclass
class TrainOnlyConfig(PipelineConfig):
    """A test double of a kind such as SFT: one trained role."""

    KIND = "train_only"
    ROLES = (RoleSpec("trainer", ACTOR_WORKER, "train", trained=True, lora=True, roll_model_key="pretrain"),)
    EPOCHS_ROLE = "trainer"
    trainer: WorkerConfig | None = field_help(None, "the trained model")

    def validate(self) -> None:
        check_run_length(self)
        check_roles(self)

    def optimizer_steps(self) -> dict:
        return {"trainer": 2}

    def describe_plan(self) -> str:
        return "trainer: 2 optimizer steps per pipeline step"

    def longest_row(self) -> tuple[int, str]:
        return 16, "16"


class FakeCluster:
    """A role's Cluster as the thin pipeline uses it; its 'weights' are a step counter."""

    start_timeout = 1.0
    calls: list = []

    def __init__(self, name, worker_cls, resource_manager, worker_config, seed, runtime_env):
        self.name, self.worker_config, self.world_size = name, worker_config, worker_config.world_size
        self.busy_seconds, self.sent_bytes, self.threads, self.weights = 0.0, 0, None, 0
        self.initialize = SimpleNamespace(submit=self._initialize)

    def _initialize(self, total_steps):
        FakeCluster.calls.append(("initialize", self.name, total_steps))
        return SimpleNamespace(result=lambda: None)

    def train_step(self) -> None:
        self.weights += 1

    def save_checkpoint(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "weights.json").write_text(json.dumps(self.weights))

    def load_checkpoint(self, path: str) -> None:
        self.weights = json.loads((Path(path) / "weights.json").read_text())

    def shutdown(self) -> None:
        FakeCluster.calls.append(("shutdown", self.name))


class TrainOnlyPipeline(BasePipeline):
    def step(self, step: int) -> dict:
        self.new_timer()
        self.trainer.train_step()
        return {"trainer/weights": self.trainer.weights}

    def validate(self, step: int) -> dict:
        return {"val/score/all": float(self.trainer.weights)}


@pytest.fixture
def no_ray(monkeypatch):
    from roll.pipeline import base

    monkeypatch.setattr(base, "init_ray", lambda **kwargs: (time.perf_counter(), time.perf_counter()))
    monkeypatch.setattr(base, "ResourceManager", lambda **kwargs: SimpleNamespace(shutdown=lambda: None))
    monkeypatch.setattr(base, "Cluster", FakeCluster)

    def rows(clusters, timeout):
        return [{"node_id": "n0", "cpus": 2} for c in clusters.values() for _ in range(c.world_size)]

    monkeypatch.setattr(base, "describe_workers", rows)
    monkeypatch.setattr(base, "check_placements", lambda rows, manager: "placed")
    monkeypatch.setattr(base, "check_output_dir", lambda directory, clusters: None)
    FakeCluster.calls = []


def _config(demo_dir, output_dir, **keys):
    data = {
        "pretrain": str(demo_dir / "model"),  # ROLL's key fills the role's model path (its RoleSpec says so)
        "trainer": {"strategy_args": {"strategy_name": "deepspeed_train"}, "device_mapping": [0]},
        "output_dir": str(output_dir),
        "max_steps": 4,
        "save_steps": 2,
        "eval_steps": 2,
        "track_with": "stdout",
        **keys,
    }
    return load_config(TrainOnlyConfig, data)


def test_a_kind_without_generation_runs_the_thin_loop(demo_dir, tmp_path, no_ray):
    config = _config(demo_dir, tmp_path)
    assert config.trainer.worker_cls == ACTOR_WORKER and config.trainer.model_args.model_name_or_path
    with TrainOnlyPipeline(config) as pipeline:
        assert set(pipeline.clusters) == {"trainer"} and pipeline.components == ()
        assert not hasattr(pipeline, "actor_infer") and not hasattr(pipeline, "ppo")
        history = pipeline.run()
    assert ("initialize", "trainer", 4 * 2) in FakeCluster.calls  # the LR schedule: max_steps × optimizer steps
    assert history["before"] == {"val/score/all": 0.0} and history["after"] == {"val/score/all": 4.0}
    assert [history["steps"][s]["trainer/weights"] for s in range(4)] == [1, 2, 3, 4]
    saved = tmp_path / "checkpoints" / "step-4"
    state = checkpoint.load_state(saved / STATE_FILE)
    assert json.loads((saved / "trainer" / "weights.json").read_text()) == 4
    assert state["completed_steps"] == 4 and "kl_coef" not in state and "old_log_probs" not in state
    assert state["config"] == {
        "seed": 42,
        "trainer.strategy_args.strategy_name": "deepspeed_train",
        "trainer.world_size": 1,
    }


def test_the_thin_loop_resumes_the_trained_role(demo_dir, tmp_path, no_ray):
    with TrainOnlyPipeline(_config(demo_dir, tmp_path, max_steps=2)) as pipeline:
        pipeline.run()
    with TrainOnlyPipeline(_config(demo_dir, tmp_path, max_steps=3, resume_from_checkpoint=True)) as pipeline:
        history = pipeline.run()
    assert history["first_step"] == 2 and history["steps"][2]["trainer/weights"] == 3  # 2 restored + 1
