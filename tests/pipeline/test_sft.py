"""The SFT pipeline end to end (Ray + DeepSpeed + HF on CPU) on the embedded demo's data (examples/sft_demo):
the loss falls, the validation loss is reported before and after, and the step's token-mean loss does not
depend on how the global batch is split — micro-batch × gradient accumulation, data-parallel 2 = 1 — nor on a
stop and resume at a checkpoint. The demo's learning (held-out accuracy) is the learning-tier test here."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SFT_DEMO = REPO / "examples" / "sft_demo"
STEPS, STOP = 4, 2
LOSS, VAL_LOSS = "sft_train/loss@sum", "sft_train/val_loss"

pytestmark = pytest.mark.usefixtures("ray_session")


def demo_module():
    sys.path.insert(0, str(SFT_DEMO))
    try:
        import sft_demo
    finally:
        sys.path.remove(str(SFT_DEMO))
    return sft_demo


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    """The demo's model and rows, prepared as the launcher does (no training: ~0.5 s)."""
    out = tmp_path_factory.mktemp("sft_demo") / "data"
    demo_module().prepare_sft_demo(out, log=lambda *_: None)
    return out


def overrides(data: Path, out: Path, *more) -> list[str]:
    """sft_tiny.yaml on the prepared `data`, writing to `out`, then `more`."""
    return [
        f"model_path={data / 'model'}",
        f"sft_train.data_args.file_name={data / 'train.jsonl'}",
        f"validation.data_args.file_name={data / 'validation.jsonl'}",
        f"output_dir={out}",
        "track_with=stdout",
        "logging_steps=1",
        *more,
    ]


def sft_config(data: Path, out: Path, *more):
    from roll.configs import compose_config, load_config
    from roll.pipeline.sft.config import SFTConfig

    return load_config(SFTConfig, compose_config(str(SFT_DEMO), "sft_tiny", overrides(data, out, *more)))


def run(config) -> dict:
    from roll.pipeline.sft.pipeline import SFTPipeline

    with SFTPipeline(config) as pipeline:
        return pipeline.run()


def losses(history: dict) -> list[float]:
    return [history["steps"][s][LOSS] for s in sorted(history["steps"])]


@pytest.fixture(scope="module")
def runs(sft_data, tmp_path_factory) -> dict:
    """Four steps of 32 rows split three ways (packed rows among them) and on Megatron, a run stopped after step 2
    then resumed, and a LoRA run."""
    root = tmp_path_factory.mktemp("sft_runs")
    small = [
        "sft_train.training_args.per_device_train_batch_size=8",
        "sft_train.training_args.gradient_accumulation_steps=4",
    ]
    dp2 = ["num_gpus_per_node=2", "sft_train.device_mapping=list(range(0,2))"]
    apart = [f"checkpoint_dir={root / 'stopped_checkpoints'}", f"save_steps={STOP}", "eval_steps=0"]
    full = [f"max_steps={STEPS}", f"save_steps={STEPS}", f"eval_steps={STEPS}"]
    plain = [f"max_steps={STEPS}", "save_steps=0", "eval_steps=0"]
    megatron = ["sft_train.strategy_args.strategy_name=megatron_train", "sft_train.strategy_args.strategy_config=null"]
    lora = ["sft_train.model_args.lora_target=all-linear", "sft_train.model_args.lora_rank=8"]
    return {
        "full": run(sft_config(sft_data, root / "full", *full, *small)),
        "dp2": run(
            sft_config(sft_data, root / "dp2", *plain, *dp2, "sft_train.training_args.per_device_train_batch_size=16")
        ),
        "stopped": run(sft_config(sft_data, root / "stopped", f"max_steps={STOP}", *apart, *small)),
        "resumed": run(
            sft_config(sft_data, root / "stopped", f"max_steps={STEPS}", *apart, "resume_from_checkpoint=true", *small)
        ),
        "megatron": run(sft_config(sft_data, root / "megatron", *plain, *megatron)),
        "packed": run(sft_config(sft_data, root / "packed", *plain, "sft_train.use_sequence_packing=true")),
        "lora": run(sft_config(sft_data, root / "lora", *full, *lora)),
        "root": root,
    }


def test_loss_falls_and_validation_is_reported_before_and_after(runs):
    full = runs["full"]
    assert losses(full)[-1] < losses(full)[0] - 1.0, losses(full)  # measured 5.87 -> ~3.5 at lr 3e-3
    before, after = full["before"][VAL_LOSS], full["steps"][STEPS - 1][VAL_LOSS]
    assert after < before - 1.0, (before, after)
    assert before == pytest.approx(losses(full)[0], abs=0.2)  # the random model: ~ln(vocab) on both
    hf = runs["root"] / "full" / "checkpoints" / f"step-{STEPS}" / "sft_train" / "hf"
    assert (hf / "config.json").is_file() and (hf / "tokenizer.json").is_file()


def test_the_token_mean_loss_does_not_depend_on_the_split(runs):
    """8 rows × 4 accumulated micro-batches, 2 data-parallel ranks of 16, one micro-batch of 32 rows packed into
    one sequence: one gradient (the global token mean), so the same losses step after step."""
    reference = losses(runs["full"])
    assert losses(runs["dp2"]) == pytest.approx(reference, rel=2e-5, abs=2e-5)
    assert losses(runs["packed"]) == pytest.approx(reference, rel=1e-4, abs=1e-4)
    # another engine (Megatron's own model and loss path): the same global token mean
    assert losses(runs["megatron"]) == pytest.approx(reference, rel=1e-4, abs=1e-4)


def test_lora_trains_the_adapters_and_exports_a_merged_model(runs):
    from transformers import AutoModelForCausalLM

    lora = runs["lora"]
    assert losses(lora)[0] == pytest.approx(losses(runs["full"])[0], rel=1e-6)  # adapters start at zero
    # rank-8 adapters learn slower than the full model: measured 5.87 -> 5.44 in 4 steps
    assert all(b < a for a, b in zip(losses(lora), losses(lora)[1:])) and losses(lora)[-1] < losses(lora)[0] - 0.3
    assert lora["steps"][STEPS - 1][VAL_LOSS] < lora["before"][VAL_LOSS]
    hf = runs["root"] / "lora" / "checkpoints" / f"step-{STEPS}" / "sft_train" / "hf"
    merged = AutoModelForCausalLM.from_pretrained(hf)  # a plain model: the adapters merged into the weights
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_resumed_run_continues_exactly(runs):
    resumed = runs["resumed"]
    assert resumed["first_step"] == STOP and sorted(resumed["steps"]) == [STOP, STEPS - 1]
    assert losses(runs["stopped"]) + losses(resumed) == pytest.approx(losses(runs["full"]), rel=1e-6, abs=1e-6)


def test_demo_learns(sft_data, tmp_path, capsys):
    """The shipped demo config (sft_tiny.yaml, 80 steps) through train_sft (the fine-tuned model's directory, as
    another pipeline's warm start would take it): held-out greedy accuracy from 0 to at least 60 % (measured
    0.0 % -> 87.5 %) and the validation loss from ~5.9 to under 0.3 (measured 0.093)."""
    import re

    from roll.pipeline.sft.pipeline import train_sft

    demo = demo_module()
    before = demo.heldout_accuracy(sft_data / "model", sft_data)["accuracy"]
    model_dir = train_sft(str(SFT_DEMO), "sft_tiny", overrides(sft_data, tmp_path / "out", "logging_steps=10"))
    after = demo.heldout_accuracy(model_dir, sft_data)["accuracy"]
    assert before == 0.0 and after >= 0.6, (before, after)
    printed = re.search(r"validation loss ([0-9.]+) -> ([0-9.]+)", capsys.readouterr().out)
    assert printed and float(printed[1]) > 5.0 and float(printed[2]) < 0.3, printed
