"""The embedded DPO demo learns: examples/dpo_demo/dpo_tiny.yaml as shipped (40 steps) on the demo's pairs (the
warm-started model's own wrong replies rejected, the right answers chosen) raises the held-out preference metrics
and the greedy held-out accuracy (README's DPO figures)."""

import importlib.util
from pathlib import Path

from roll.demo.rlvr import DemoSettings
from tests.pipeline.demo_cache import prepared_demo

DEMO = Path(__file__).resolve().parents[2] / "examples" / "dpo_demo"


def _prepare_module():
    spec = importlib.util.spec_from_file_location("dpo_demo_prepare", DEMO / "prepare_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dpo_demo_learns(ray_session, tmp_path):
    from roll.configs import compose_config, load_config
    from roll.pipeline.dpo.config import DPOConfig
    from roll.pipeline.dpo.pipeline import DPOPipeline, final_model_dir

    settings, prepare = DemoSettings(), _prepare_module()
    base = prepared_demo(tmp_path / "base", settings)  # the shipped settings, from the build cache
    prepare.write_pairs(tmp_path, base / "model", settings)
    overrides = [
        f"pretrain={base / 'model'}",
        f"actor_train.data_args.file_name={tmp_path / 'train.jsonl'}",
        f"validation.data_args.file_name={tmp_path / 'heldout.jsonl'}",
        f"output_dir={tmp_path / 'out'}",
        "track_with=stdout",
    ]
    config = load_config(DPOConfig, compose_config(str(DEMO), "dpo_tiny", overrides))
    with DPOPipeline(config) as pipeline:
        history = pipeline.run()
    before, after = history["before"], history["after"]
    assert before["val/actor/logp_acc"] < 0.1  # the pairs reject the base model's own (preferred) replies
    assert after["val/actor/logp_acc"] > 0.9 and after["val/actor/acc"] > 0.9
    assert after["val/actor/margins"] > 1.0 and after["val/actor/loss"] < 0.4
    heldout = tmp_path / "heldout.jsonl"
    greedy_before = prepare.greedy_accuracy(base / "model", heldout)
    greedy_after = prepare.greedy_accuracy(final_model_dir(config), heldout)
    assert greedy_after >= greedy_before + 0.1, (greedy_before, greedy_after)  # measured 0 % -> 25 %
