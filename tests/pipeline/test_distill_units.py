"""The distillation kind without Ray: its config (ROLL's keys and meanings, refusals naming the key), its row
encoding (ROLL's layout with its label fix) and the student's loss under the strategies' loss_mask_keys
contract (micro-batch × accumulation invariance, hand-checked against roll.algorithms.distill on the whole batch)."""

from types import SimpleNamespace

import pytest
import torch

from roll.algorithms.distill import TeacherTopK, distill_loss, teacher_topk
from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.configs import load_config
from roll.configs.loader import ConfigError
from roll.demo import task as demo_task
from roll.demo.tiny_model import build_tokenizer
from roll.distributed.data_proto import DataProto
from roll.pipeline.distill.config import DistillConfig
from roll.pipeline.distill.data import collate, encode_row
from roll.pipeline.distill.worker import LOSS_MASK_KEYS, StudentWorker
from roll.strategies.train_common import loss_token_counts

WORKER = {"strategy_args": {"strategy_name": "deepspeed_train"}, "device_mapping": [0]}


def _data(**keys):
    return {
        "student_pretrain": "/models/student",  # ROLL's keys fill the roles' model paths
        "teacher_pretrain": "/models/teacher",
        "num_gpus_per_node": 2,
        "sequence_length": 32,
        "student": {**WORKER, "data_args": {"file_name": "train.jsonl"}},
        "teacher": {"strategy_args": {"strategy_name": "hf_infer"}, "device_mapping": [1]},
        **keys,
    }


def test_roll_keys_mean_what_roll_computes():
    config = load_config(DistillConfig, _data())
    assert config.student.model_args.model_name_or_path == "/models/student"
    assert config.teacher.model_args.model_name_or_path == "/models/teacher"
    assert config.student.worker_cls.endswith("distill.worker.StudentWorker")
    assert config.teacher.worker_cls.endswith("distill.worker.TeacherWorker")
    # ROLL's defaults: top-64, w = 0.5, forward KL, and max_grad_norm 0 = no clipping
    assert (config.logits_topk, config.distill_loss_weight, config.kd_objective) == (64, 0.5, "forward_kl")
    assert config.student.training_args.max_grad_norm == 0.0
    assert config.student.training_args.num_train_epochs == 1.0 and config.optimizer_steps() == {"student": 1}
    roll_paths = {
        role: {**block, "worker_cls": f"roll.pipeline.distill.distill_worker.{cls}"}
        for role, block, cls in (
            ("student", _data()["student"], "StudentWorker"),
            ("teacher", _data()["teacher"], "TeacherWorker"),
        )
    }
    assert load_config(DistillConfig, _data(**roll_paths)).teacher.worker_cls.endswith("distill.worker.TeacherWorker")


@pytest.mark.parametrize(
    "keys, named",
    [
        ({"kd_objective": "kl"}, "kd_objective"),
        ({"distill_loss_weight": 1.5}, "distill_loss_weight"),
        ({"logits_transfer_backend": "nccl_only"}, "logits_transfer_backend"),
        ({"temperature": 2.0}, "temperature"),  # unknown key
        ({"teacher": {"strategy_args": {"strategy_name": "vllm"}, "device_mapping": [1]}}, "teacher.strategy_args"),
        ({"student": {**WORKER, "training_args": {"max_grad_norm": 2.0}, "data_args": {"file_name": "t.jsonl"}}},
         "student.training_args.max_grad_norm"),
    ],
)  # fmt: skip
def test_bad_keys_are_refused_naming_the_key(keys, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(DistillConfig, _data(**keys))


def test_every_problem_at_once():
    student = {**WORKER, "training_args": {"max_grad_norm": 2.0}, "data_args": {"file_name": "t.jsonl"}}
    with pytest.raises(ConfigError) as error:
        load_config(DistillConfig, _data(student=student, validation={"data_args": {}}))
    assert {key for key, _ in error.value.problems} == {
        "validation.data_args.file_name",
        "student.training_args.max_grad_norm",
    }


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(demo_task.tokenizer_corpus())


def test_rows_are_rolls_layout_with_eos_labelled(tokenizer):
    row = {"question": "What is 2 plus 3 ?", "answer": "\\boxed{5}"}
    ids, mask, labels, cut = encode_row(row, "row 0", tokenizer, None, "question", "answer", 32, False)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "\n" + row["question"]}], add_generation_prompt=True, tokenize=False
    )
    prompt_len = len(tokenizer(prompt)["input_ids"])
    real = sum(mask)
    answer_ids = tokenizer("\\boxed{5}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert not cut and len(ids) == len(labels) == 32 and mask == [1] * real + [0] * (32 - real)
    assert labels[:prompt_len] == [IGNORE_INDEX] * prompt_len  # the user turn and the assistant header
    assert labels[prompt_len:real] == ids[prompt_len:real] == answer_ids  # the answer and its EOS
    assert labels[real:] == [IGNORE_INDEX] * (32 - real)  # padding (pad id 0) by the attention mask
    _, _, on_prompt, _ = encode_row(row, "row 0", tokenizer, None, "question", "answer", 32, True)
    assert on_prompt[:real] == ids[:real] and on_prompt[real:] == labels[real:]
    short = encode_row(row, "row 0", tokenizer, None, "question", "answer", prompt_len + 2, False)
    assert short[3] and short[2][prompt_len:] == answer_ids[:2]  # ROLL's truncation; the count is logged


def _batch(rows=8, width=12, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, width), generator=g)
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=g)
    mask = (torch.arange(width) < lengths[:, None]).long()
    labels = torch.where((torch.arange(width) >= 3) & (mask == 1), ids, torch.full_like(ids, IGNORE_INDEX))
    teacher = teacher_topk(torch.randn(rows, width, vocab, generator=g), 5)
    batch = collate(
        [{"input_ids": i.tolist(), "attention_mask": m.tolist(), "labels_for_loss": lab.tolist()} for i, m, lab in
         zip(ids, mask, labels)]
    )  # fmt: skip
    batch.batch.update(
        teacher_probs=teacher.probs, teacher_log_probs=teacher.log_probs, teacher_inf_mask=teacher.inf_mask,
        teacher_topk_indices=teacher.indices,
    )  # fmt: skip
    return batch


SETTINGS = {"kd_objective": "reverse_kl", "distill_loss_weight": 0.7, "kd_temperature": 2.0, "adaptive_kl_alpha": 0.5,
            "skew_lambda": 0.1}  # fmt: skip


def _step_gradient(batch: DataProto, micro_batches: int, model):
    """What a strategy's train_step does with the student's loss: the loss_mask_keys counts, each micro-batch's
    loss / micro-batches backward, metrics averaged over micro-batches."""
    batch.meta_info.update(loss_mask_keys=LOSS_MASK_KEYS, distill=SETTINGS)
    counts = loss_token_counts(batch, micro_batches)
    model.zero_grad()
    worker = SimpleNamespace(data_parallel_info=lambda: {"dp_size": 1})
    metrics = []
    for micro in batch.chunk(micro_batches):
        micro.meta_info.update(counts)
        logits = model(micro.batch["input_ids"])
        loss, values = StudentWorker._loss(worker, micro, logits)
        (loss / micro_batches).backward()
        metrics.append(values)
    return model.weight.grad.clone(), {k: sum(m[k] for m in metrics) / micro_batches for k in metrics[0]}


def test_student_loss_is_the_global_token_mean_however_the_rows_are_split():
    torch.manual_seed(0)
    model = torch.nn.Embedding(40, 40)  # logits = a row of a table per token: a model with a gradient
    batch = _batch()
    whole, whole_metrics = _step_gradient(batch, 1, model)
    split, split_metrics = _step_gradient(_batch(), 4, model)
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-7)
    assert split_metrics == pytest.approx(whole_metrics, rel=1e-5)
    # the whole batch's loss from roll.algorithms.distill with N = the labels that some position predicts
    tensors = batch.batch
    n = int((tensors["labels_for_loss"][:, 1:] != IGNORE_INDEX).sum())
    reference, metrics = distill_loss(
        model(tensors["input_ids"]), tensors["labels_for_loss"],
        TeacherTopK(tensors["teacher_probs"], tensors["teacher_log_probs"], tensors["teacher_topk_indices"],
                    tensors["teacher_inf_mask"]),
        n, "reverse_kl", 0.7, kd_temperature=2.0,
    )  # fmt: skip
    model.zero_grad()
    reference.backward()
    torch.testing.assert_close(model.weight.grad, whole, rtol=1e-5, atol=1e-7)
    assert whole_metrics == pytest.approx(metrics, rel=1e-5)
