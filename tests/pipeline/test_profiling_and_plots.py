"""One demo run through the real entry point (roll.pipeline.rlvr.run_pipeline), two steps, profiled: the per-role
traces name the phases, every step reports its overhead and each role's busy/idle time, the run ends with
learning_curves.png, validation samples are saved like training samples, and the weight-sync check says it
passed. The run trains with ROLL's `pg_variant: topr`, the one loss that reads each sample's score."""

import contextlib
import io
import json
import logging
from pathlib import Path

import pytest

from roll.pipeline.core.callbacks import read_samples
from roll.pipeline.core.profiling import NOT_PHASES

pytestmark = pytest.mark.usefixtures("ray_session")
VAL_PROMPTS = 12


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def run(rlvr_config, demo_dir, tmp_path_factory):
    from roll.pipeline.rlvr.pipeline import run_pipeline

    root = tmp_path_factory.mktemp("profiling")
    rows = (demo_dir / "heldout.jsonl").read_text().splitlines()[:VAL_PROMPTS]
    (root / "val.jsonl").write_text("\n".join(rows) + "\n")
    config = rlvr_config(
        root / "out",
        [
            "max_steps=2",
            "eval_steps=1",
            "sample_log_steps=1",
            "use_kl_loss=false",  # no reference role: one start-up fewer
            "pg_variant=topr",  # its loss needs the samples' scores inside train_step
            f"validation.data_args.file_name={root / 'val.jsonl'}",
            "profiler.tool=torch",
            "profiler.steps=[1,2]",
            "+actor_train.profiler={tool: torch_memory, steps: [2]}",  # a role's block overrides key by key
        ],
    )
    records, stdout = Records(), io.StringIO()
    for name in ("roll.weight_sync", "roll.pipeline"):
        logging.getLogger(name).addHandler(records)
    try:
        with contextlib.redirect_stdout(stdout):
            history = run_pipeline(config)
    finally:
        for name in ("roll.weight_sync", "roll.pipeline"):
            logging.getLogger(name).removeHandler(records)
    return {
        "config": config,
        "history": history,
        "out": root / "out",
        "stdout": stdout.getvalue(),
        "log": records.messages,
    }


def trace_names(path: Path) -> set[str]:
    assert path.is_file() and path.stat().st_size > 0, f"{path} missing or empty"
    return {event.get("name") for event in json.loads(path.read_text())["traceEvents"]}


def test_torch_profiler_writes_traces_per_role_rank_and_step_naming_the_phases(run):
    profile = run["out"] / "profile"
    for step in (1, 2):
        assert "actor_infer.generate" in trace_names(profile / "actor_infer" / f"step-{step}" / "rank0.pt.trace.json")
        assert "rewards.math.compute_rewards" in trace_names(
            profile / "rewards.math" / f"step-{step}" / "rank0.pt.trace.json"
        )
    assert not (profile / "actor_train" / "step-1").exists()  # its own steps: [2]
    names = trace_names(profile / "actor_train" / "step-2" / "rank0.pt.trace.json")
    assert {"actor_train.compute_log_probs", "actor_train.train_step"} <= names
    assert "[memory]" in names  # torch_memory: allocation events in the trace
    timeline = json.loads((profile / "actor_train" / "step-2" / "rank0.memory_timeline.json").read_text())
    assert timeline["events"] > 0 and len(timeline["ts_us"]) == len(timeline["allocated_bytes"]) == timeline["events"]
    assert timeline["peak_allocated_bytes"] == max(timeline["allocated_bytes"]) > 0


def test_traces_load_in_the_tensorboard_pytorch_profiler_plugin(run):
    """torch-tb-profiler (TensorBoard's PyTorch profiler plugin) parses each trace into its views; Perfetto reads
    the same Chrome trace-event JSON: complete events carry a name, phase, timestamps, duration, pid and tid."""
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    for role, views in (("actor_train", {"overall", "operator", "trace", "memory"}), ("actor_infer", {"trace"})):
        path = run["out"] / "profile" / role / "step-2" / "rank0.pt.trace.json"
        trace = json.loads(path.read_text())
        complete = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        assert complete and all({"name", "ts", "dur", "pid", "tid"} <= e.keys() for e in complete)
        data = RunProfileData.from_json("rank0", None, trace)
        data.process()
        data.analyze()
        profile = RunGenerator("rank0", None, data).generate_run_profile()
        assert views <= {view.name for view in profile.views}, (role, profile.views)


def test_topr_trained_on_the_scores(run):
    assert run["config"].pg_variant == "topr"
    for metrics in run["history"]["steps"].values():
        assert metrics["actor/pg_loss"] == metrics["actor/pg_loss"]  # finite, not NaN
        assert 0 <= metrics["actor/pg_clipfrac"] <= 1


def test_every_step_reports_overhead_and_role_busy_idle_time(run):
    steps = run["history"]["steps"].values()
    # the rewards are scored while the old/reference log-probs are computed (step 1 at least: later steps may
    # reuse the rollout log-probs, and without a reference nothing else runs beside the rewards then)
    assert any(metrics.get("timing/overlap", 0) > 0 for metrics in steps)
    for metrics in steps:
        wall = metrics["timing/step"]
        phases = sum(
            v for k, v in metrics.items() if k.startswith("timing/") and k.count("/") == 1 and k not in NOT_PHASES
        )
        assert metrics["timing/overhead"] == pytest.approx(wall - phases + metrics.get("timing/overlap", 0))
        assert 0 <= metrics["timing/overhead"] < wall
        assert "timing/validation" in metrics
        for role in ("actor_train", "actor_infer", "rewards.math"):
            busy, idle = metrics[f"timing/busy/{role}"], metrics[f"timing/idle/{role}"]
            assert 0 < busy <= wall and busy + idle == pytest.approx(wall)
        # the trainer's train_step alone keeps actor_train busy at least as long as the train phase's call
        assert metrics["timing/busy/actor_train"] >= 0.5 * metrics["timing/train"]


def test_run_writes_learning_curves_png_and_prints_its_path(run):
    path = run["out"] / "learning_curves.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert f"learning curves: {path.resolve()}" in run["stdout"]


def test_validation_samples_are_saved_like_training_samples(run):
    samples = run["out"] / "samples"
    assert len(read_samples(samples, 1)) == 8 * 4  # training: 8 prompts × 4 samples
    for step in (0, 1, 2):  # before training, then after each step (eval_steps=1)
        rows = read_samples(samples, step, validation=True)
        assert len(rows) == VAL_PROMPTS
        assert all({"prompt", "response", "ground_truth", "score"} <= row.keys() for row in rows)
    scores = [row["score"] for row in read_samples(samples, 2, validation=True)]
    assert sum(scores) / len(scores) == pytest.approx(run["history"]["steps"][1]["val/score/all"])


def test_weight_sync_check_logs_that_it_passed(run):
    passed = [m for m in run["log"] if m.startswith("weight sync check passed")]
    assert len(passed) == 1 and "after step 0" in passed[0], run["log"]  # in full once, at start-up
    progress = [m for m in run["log"] if m.startswith("[") and "/2]" in m]
    assert len(progress) == 2 and all("| sync ok |" in m for m in progress), progress
