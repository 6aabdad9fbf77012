"""The DPO pipeline end to end on CPU (Ray, DeepSpeed actor_train, hf_infer reference, the demo's tiny model):
ROLL's metrics, step 1 at policy = reference (loss ln 2, rewards 0), one optimizer step invariant to how the
pairs are split into micro-batches (per_device_train_batch_size × gradient_accumulation_steps), and one resume
= the uninterrupted run, and two data-parallel ranks = one. Four launches of two steps each in the session's Ray
cluster."""

import importlib.util
import math
from pathlib import Path

import pytest

from roll.demo import task as demo_task

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "dpo_demo"
ROLL_METRICS = ("actor/loss", "actor/acc", "actor/chosen_reward", "actor/reject_reward", "actor/lr",
                "actor_train/grad_norm")  # fmt: skip


def _prepare_module():
    spec = importlib.util.spec_from_file_location("dpo_demo_prepare", DEMO / "prepare_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dpo_data(demo_dir, tmp_path_factory) -> Path:
    """32 training and 16 held-out pairs of the demo task (right answer vs a seeded wrong one)."""
    out = tmp_path_factory.mktemp("dpo_data")
    prepare = _prepare_module()
    for name, count in (("train", 32), ("heldout", 16)):
        problems = demo_task.read_jsonl(demo_dir / f"{name}.jsonl")[:count]
        prepare.write_jsonl(prepare.pairs(problems, [""] * count, seed=0), out / f"{name}.jsonl")
    return out


def _config(demo_dir, data, output_dir, *overrides):
    from roll.configs import compose_config, load_config
    from roll.pipeline.dpo.config import DPOConfig

    base = [
        f"pretrain={demo_dir / 'model'}",
        f"actor_train.data_args.file_name={data / 'train.jsonl'}",
        f"validation.data_args.file_name={data / 'heldout.jsonl'}",
        f"output_dir={output_dir}",
        "actor_train.training_args.per_device_train_batch_size=8",
        "actor_train.training_args.learning_rate=1.0e-3",
        "max_steps=2",
        "save_steps=1",
        "eval_steps=2",
        "track_with=stdout",
    ]
    return load_config(DPOConfig, compose_config(str(DEMO), "dpo_tiny", [*base, *overrides]))


def _run(config) -> dict:
    from roll.pipeline.dpo.pipeline import DPOPipeline

    with DPOPipeline(config) as pipeline:
        return pipeline.run()


def test_dpo_pipeline_end_to_end(demo_dir, dpo_data, ray_session, tmp_path):
    history = _run(_config(demo_dir, dpo_data, tmp_path / "a"))
    first, second = history["steps"][0], history["steps"][1]
    assert set(ROLL_METRICS) <= set(first)
    # step 1: the policy is the reference, so h = 0: loss ln 2, rewards 0, every tie counted wrong (ROLL's acc)
    assert first["actor/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert first["actor/chosen_reward"] == pytest.approx(0, abs=1e-5) and first["actor/acc"] == 0
    assert history["before"]["val/actor/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert second["actor/loss"] < first["actor/loss"] and second["actor/acc"] > 0.5
    after = history["after"]
    assert after["val/actor/loss"] != history["before"]["val/actor/loss"]  # two steps: moved, not learned yet
    assert (tmp_path / "a" / "checkpoints" / "step-2" / "actor_train" / "hf" / "config.json").is_file()
    assert not (tmp_path / "a" / "checkpoints" / "step-2" / "reference").exists()  # the reference is frozen

    # the same pairs in 2 micro-batches of 4 pairs: the same optimizer step (the loss is a mean of equal means)
    split = _run(_config(demo_dir, dpo_data, tmp_path / "b", "actor_train.training_args.per_device_train_batch_size=4",
                         "actor_train.training_args.gradient_accumulation_steps=2"))  # fmt: skip
    for key in ("actor/loss", "actor_train/grad_norm", "actor/margins"):
        assert split["steps"][1][key] == pytest.approx(second[key], rel=1e-4, abs=1e-6), key
    assert split["after"]["val/actor/loss"] == pytest.approx(after["val/actor/loss"], rel=1e-4)

    # resumed from step 1's checkpoint: step 2 as in the uninterrupted run
    resumed = _run(_config(demo_dir, dpo_data, tmp_path / "c",
                           f"resume_from_checkpoint={tmp_path / 'a' / 'checkpoints' / 'step-1'}"))  # fmt: skip
    assert resumed["first_step"] == 1
    for key in ("actor/loss", "actor_train/grad_norm", "actor/margins", "actor/acc"):
        assert resumed["steps"][1][key] == pytest.approx(second[key], rel=1e-6, abs=1e-7), key
    assert resumed["after"]["val/actor/loss"] == pytest.approx(after["val/actor/loss"], rel=1e-6)

    # two data-parallel ranks of 4 pairs each (gloo): the same optimizer steps as one rank of 8
    parallel = _run(_config(demo_dir, dpo_data, tmp_path / "d", "actor_train.device_mapping=[0,1]",
                            "actor_train.training_args.per_device_train_batch_size=4"))  # fmt: skip
    for key in ("actor/loss", "actor_train/grad_norm", "actor/margins"):
        assert parallel["steps"][1][key] == pytest.approx(second[key], rel=1e-4, abs=1e-6), key
    assert parallel["after"]["val/actor/loss"] == pytest.approx(after["val/actor/loss"], rel=1e-4)
