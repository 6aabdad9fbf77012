"""The DPO kind without Ray: ROLL's data layout (encoder + collator), the config's keys and rules, the ROLL
translation of its YAML keys, and that the configured loss settings reach the worker's loss (ROLL's quirk Q1)."""

import json
import math
from pathlib import Path

import pytest
import torch

from roll.configs import ConfigError, compose_config, load_config
from roll.demo.tiny_model import build_tokenizer
from roll.pipeline.dpo.config import DPO_WORKER, ROLL_DPO_WORKER, DPOConfig
from roll.pipeline.dpo.data import Columns, collate, load_pairs, renderer
from roll.pipeline.dpo.worker import loss_settings, rows_config, step_loss
from roll.utils.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "dpo_demo"
PAIRS = [
    {"instruction": "What is 1 plus 2 ?", "chosen": "3", "rejected": "4"},
    {"instruction": "What is 2 plus 2 ?", "chosen": "4", "rejected": "2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"},
    {"instruction": "What is 3 plus 1 ?", "chosen": "4", "rejected": "1"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([p["instruction"] for p in PAIRS] + ["1 2 3 4"])


def _write(tmp_path, rows, name="pairs.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _data_args(file_name):
    from roll.pipeline.dpo.config import DPODataArgs

    return DPODataArgs(file_name=file_name)


def test_pairs_are_laid_out_as_roll(tmp_path, tokenizer, caplog):
    width = 40
    pairs = load_pairs(_data_args(_write(tmp_path, PAIRS)), "actor_train.data_args", Columns(), tokenizer, None, width)
    assert len(pairs) == 2  # the long rejected answer does not fit: dropped, as ROLL drops it
    render = renderer(tokenizer, None)
    user = [{"role": "user", "content": PAIRS[0]["instruction"]}]
    prompt = render(user)  # WITHOUT the generation prompt: the span holds the assistant header (ROLL's Q3)
    assert "assistant" not in prompt
    assert pairs[0].prompt_id_len == len(tokenizer(prompt)["input_ids"])
    assert pairs[0].chosen_ids == tokenizer(render([*user, {"role": "assistant", "content": "3"}]))["input_ids"]
    batch = collate(pairs, width, tokenizer.pad_token_id).batch
    assert batch["input_ids"].shape == (4, width)  # chosen_0, rejected_0, chosen_1, rejected_1
    for row, ids in enumerate([pairs[0].chosen_ids, pairs[0].rejected_ids, pairs[1].chosen_ids, pairs[1].rejected_ids]):
        assert batch["input_ids"][row, : len(ids)].tolist() == ids
        assert batch["attention_mask"][row].tolist() == [1] * len(ids) + [0] * (width - len(ids))  # right padded
        assert (batch["input_ids"][row, len(ids) :] == tokenizer.pad_token_id).all()
        assert batch["position_ids"][row, : len(ids)].tolist() == list(range(len(ids)))
    assert batch["prompt_id_lens"].tolist() == [pairs[0].prompt_id_len] * 2 + [pairs[1].prompt_id_len] * 2


def test_bad_pairs_are_named(tmp_path, tokenizer):
    key = "actor_train.data_args"
    with pytest.raises(InputError, match=r"pairs.jsonl row 1: 'rejected' \(rejected_key\) = None: expected"):
        load_pairs(_data_args(_write(tmp_path, [PAIRS[0], {"instruction": "x", "chosen": "y"}])), key, Columns(),
                   tokenizer, None, 40)  # fmt: skip
    with pytest.raises(InputError, match=r"pairs.jsonl row 0: no 'rejected' column \(the rejected_key"):
        load_pairs(_data_args(_write(tmp_path, [{"instruction": "x", "chosen": "y"}])), key, Columns(), tokenizer,
                   None, 40)  # fmt: skip
    with pytest.raises(InputError, match="every pair is longer than sequence_length = 3"):
        load_pairs(_data_args(_write(tmp_path, PAIRS)), "actor_train.data_args", Columns(), tokenizer, None, 3)
    custom = [{"q": "What is 1 plus 2 ?", "good": "3", "bad": "4"}]
    pairs = load_pairs(_data_args(_write(tmp_path, custom)), "k", Columns("q", "good", "bad"), tokenizer, None, 40)
    assert len(pairs) == 1


def _default(*overrides):
    return load_config(DPOConfig, compose_config(str(DEMO), "dpo_tiny", list(overrides)))


def test_default_config_keys_and_plan():
    config = _default()
    assert (config.actor_train.worker_cls, config.reference.worker_cls) == (DPO_WORKER, DPO_WORKER)
    assert (config.beta, config.ipo, config.label_smoothing) == (0.1, False, 0.0)
    assert config.global_pairs == 32 and config.rows_per_step()[0] == 64
    assert config.optimizer_steps() == {"actor_train": 1}
    assert "global batch 32 pairs (64 rows)" in config.describe_plan()
    # batch sizes count pairs in the config, rows in the engine's copy; the user's config stays as written
    rows = rows_config(config.actor_train)
    assert (rows.training_args.per_device_train_batch_size, rows.infer_batch_size) == (64, 128)
    pairs = config.actor_train
    assert (pairs.training_args.per_device_train_batch_size, pairs.infer_batch_size) == (32, 64)


def test_run_length():
    config = _default("max_steps=null")
    assert config.run_length(100)[0] == 3  # one epoch of whole global batches (32 pairs): drop_last
    config = _default("max_steps=null", "+actor_train.training_args.num_train_epochs=2")
    assert config.run_length(100)[0] == 6
    config = _default("max_steps=4", "+actor_train.training_args.num_train_epochs=2")
    assert config.run_length(100)[0] == 4  # ROLL's loop: the epochs, stopped at max_steps
    assert _default("max_steps=50").run_length(100)[0] == 50  # no epochs: max_steps, passing over the data again


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["ipo=true", "label_smoothing=0.1"], "applies to the sigmoid"),
        (["beta=0"], "beta"),
        (["label_smoothing=1.5"], "label_smoothing"),
        (["reference=null"], "'reference' is required"),
        (["sequence_length=null"], "'sequence_length' is required"),
        (["actor_train.use_sequence_packing=true"], "use_sequence_packing"),
        (["actor_train.use_dynamic_batching_in_train=true"], "could split a chosen/rejected pair"),
        (["+chosen_column=x"], "chosen_column"),  # strict: unknown keys are errors naming them
        (["+actor_train.data_args.prompt_key=q"], "prompt_key"),  # the prompt column is a top-level key
        (["+reference.training_args.num_train_epochs=2"], "only actor_train's"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _default(*overrides)


def test_roll_spellings(tmp_path):
    """ROLL's DPO keys: its worker path, pretrain, global_template, the offload switches (noted), and a
    data_args.dataset_dir ROLL's DPO pipeline never reads (dropped, not joined)."""
    data = {
        "pretrain": "/models/m",
        "global_template": "chatml",
        "is_offload_states": True,
        "sequence_length": 64,
        "beta": 0.5,
        "actor_train": {
            "worker_cls": ROLL_DPO_WORKER,
            "data_args": {"file_name": ["data/pairs.json"], "dataset_dir": "data"},
            "strategy_args": {"strategy_name": "deepspeed_train"},
            "device_mapping": "list(range(0,1))",
        },
        "reference": {"strategy_args": {"strategy_name": "hf_infer"}, "device_mapping": "list(range(0,1))"},
        "validation": {"data_args": {"file_name": "data/val.json"}},
    }
    config = load_config(DPOConfig, data)
    assert config.actor_train.worker_cls == DPO_WORKER
    assert config.actor_train.model_args.model_name_or_path == "/models/m"
    assert config.reference.model_args.model_name_or_path == "/models/m"
    assert config.actor_train.data_args.file_name == ["data/pairs.json"]
    assert config.actor_train.data_args.chat_template == config.validation.data_args.chat_template == "chatml"
    assert any("is_offload_states: True" in note for note in config.describe_notes())
    assert DPOConfig.claims_roll_example((ROOT / "examples" / "dpo_demo" / "dpo_tiny.yaml").read_text())


def test_the_configured_loss_settings_reach_the_loss():
    """ROLL reads beta / ipo / label_smoothing from meta_info with fallbacks and never puts them there (Q1); here
    the pipeline does, and the loss, rewards and metrics follow them."""
    assert loss_settings({}) == {"ipo": False, "beta": 0.1, "label_smoothing": 0.0}  # ROLL's fallbacks
    width = 4
    batch = {"attention_mask": torch.ones(2, width, dtype=torch.long), "prompt_id_lens": torch.tensor([2, 2])}
    policy = torch.tensor([[0.0, -1.0, -0.5], [0.0, -2.0, -1.0]])  # chosen sum -1.5, rejected -3.0 (span 2, 3)
    reference = torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.5, -1.0]])  # chosen -2.0, rejected -2.5
    h = (-1.5 - -3.0) - (-2.0 - -2.5)  # 1.0
    settings = {"ipo": False, "beta": 0.5, "label_smoothing": 0.2}
    loss, metrics = step_loss(policy, reference, batch, settings)
    expected = -0.8 * math.log(1 / (1 + math.exp(-0.5 * h))) - 0.2 * math.log(1 / (1 + math.exp(0.5 * h)))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["actor/chosen_reward"] == pytest.approx(0.5 * 0.5)
    assert metrics["actor/reject_reward"] == pytest.approx(0.5 * -0.5)
    assert metrics["actor/acc"] == 1.0 and metrics["actor/margins"] == pytest.approx(0.5)
    loss, _ = step_loss(policy, reference, batch, {"ipo": True, "beta": 0.5, "label_smoothing": 0.0})
    assert loss.item() == pytest.approx((h - 1 / (2 * 0.5)) ** 2)
