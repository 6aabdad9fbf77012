"""Dynamic batching (token budgets) and sequence packing, single process: the grouping, the packed HF
forward (values and gradients) against the padded one, hf_infer scoring, and the config checks.
The 2-rank engine runs (DeepSpeed ZeRO-2/3, FSDP2, fsdp2_infer) are in test_train_strategies.py.

Tolerances (float32): packed vs padded and padded-to-the-longest-row vs padded-to-the-max logits, log-probs,
losses and gradients max |Δ| < 1e-5.
"""

import dataclasses

import pytest
import torch

from roll.strategies.batching import hf_logits, token_budget_groups
from roll.strategies.loss_settings import LossSettings
from roll.strategies.train_common import split_train_batch
from tests.strategies import harness as h

ATOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model_dir, data_file = h.prepare(tmp_path_factory.mktemp("micro_batching"))
    return model_dir, torch.load(data_file)[0]


def test_token_budget_groups_respect_the_budget_and_cover_every_row_once():
    lengths = [9, 3, 16, 4, 7, 12, 5, 5, 1, 14]
    groups = token_budget_groups(lengths, 20, "x.max_tokens")
    assert sorted(row for group in groups for row in group) == list(range(len(lengths)))
    assert all(sum(lengths[row] for row in group) <= 20 for group in groups)
    assert len(groups) == 4  # first-fit decreasing: 16+4, 14+5+1, 12+7, 9+5+3 (76 tokens: 4 is the least)
    more = token_budget_groups(lengths, 20, "x.max_tokens", min_groups=8)
    assert len(more) == 8 and all(sum(lengths[row] for row in group) <= 20 for group in more)
    with pytest.raises(ValueError, match=r"x\.max_tokens=15 is smaller than a row of 16 tokens"):
        token_budget_groups(lengths, 15, "x.max_tokens")


def test_dynamic_train_split_uses_the_budget_and_the_step_counts(tmp_path, tiny):
    _, tensors = tiny
    config = h.make_worker_config(tmp_path, "fsdp2_train", None, micro=4, accumulation=4, world_size=1)
    config = dataclasses.replace(config, use_dynamic_batching_in_train=True, max_tokens_per_microbatch_in_train=24)
    micros = split_train_batch(config, h.as_proto(tensors))
    assert sum(len(micro) for micro in micros) == 16 and len(micros) != 4
    assert all(micro.batch["attention_mask"].sum() <= 24 for micro in micros)
    info = LossSettings.of(micros[0]).global_batch_info
    assert all(LossSettings.of(micro).global_batch_info == info for micro in micros)
    assert info["dp_size"] == len(micros) and info["batch_num_tokens"] == tensors["response_mask"].sum().item()


def test_packed_forward_equals_padded_in_values_and_gradients(tiny):
    """One packed row (position ids restart per row, no mask) vs the left/right-padded batch, sdpa and eager."""
    from transformers import AutoModelForCausalLM

    from roll.workers.actor_worker import ActorWorker

    model_dir, tensors = tiny
    batch = h.as_proto(tensors, slice(0, 6))
    real = batch.batch["attention_mask"].bool()
    for implementation in ("sdpa", "eager"):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=implementation)
        grads, padded = [], None
        for packing in (False, True):
            model.zero_grad()
            logits = hf_logits(model, batch, "cpu", packing)
            loss, _ = ActorWorker._policy_loss(None, batch, logits)
            loss.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            if packing:
                assert (logits[~real] == 0).all()
                assert (logits[real] - padded[real]).abs().max() < ATOL, implementation
            padded = logits.detach()
        assert max((a - b).abs().max().item() for a, b in zip(*grads)) < ATOL, implementation


def _widened(batch, left: int, right: int):
    """`batch` with `left` more prompt padding columns and `right` more response padding columns (the layout
    of a longer prompt_length / response_length): padded to more than its longest row."""
    import torch.nn.functional as F

    out = batch[slice(0, len(batch))]
    for key in ("input_ids", "attention_mask", "position_ids"):
        out.batch[key] = F.pad(batch.batch[key], (left, right))
    for key in ("responses", "response_mask", "old_log_probs", "ref_log_probs", "advantages"):
        out.batch[key] = F.pad(batch.batch[key], (0, right))
    return out


def test_forward_padded_to_the_longest_row_equals_padded_to_the_max(tiny):
    """hf_logits runs the forward on the micro-batch's real columns only: logits, log-probs, the policy loss
    (token-mean and Dr.GRPO's length-normalised mode, which reads the padded width) and its gradients equal a
    forward over the whole padded width; the forward really is narrower."""
    from transformers import AutoModelForCausalLM

    from roll.strategies.batching import real_columns
    from roll.utils.functional import response_log_probs, slice_response_logits
    from roll.workers.actor_worker import ActorWorker

    model_dir, tensors = tiny
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    widths = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    for mode in ("token-mean", "seq-mean-token-sum-norm"):
        batch = _widened(h.as_proto(tensors, slice(0, 6), loss_agg_mode=mode), left=5, right=4)
        mask = batch.batch["attention_mask"]
        cols = real_columns(mask)
        assert cols.stop - cols.start <= mask.shape[1] - 9
        results = []
        for trimmed in (False, True):
            model.zero_grad()
            if trimmed:
                logits = hf_logits(model, batch, "cpu", packing=False)
            else:  # the forward over every column, as before padding to the longest row
                logits = model(**{k: batch.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
            loss, _ = ActorWorker._policy_loss(None, batch, logits)
            loss.backward()
            responses = batch.batch["responses"]
            log_probs = response_log_probs(slice_response_logits(logits.detach(), responses.shape[1]), responses)
            grads = [p.grad.clone() for p in model.parameters()]
            results.append((logits.detach(), log_probs * batch.batch["response_mask"], loss.detach(), grads))
        assert widths[-1] == cols.stop - cols.start and widths[-2] == mask.shape[1]
        (full_logits, full_lp, full_loss, full_grads), (logits, lp, loss, grads) = results
        real = mask.bool()
        assert (logits[:, : cols.start] == 0).all() and (logits[:, cols.stop :] == 0).all()
        assert (logits[real] - full_logits[real]).abs().max() < ATOL, mode
        assert (lp - full_lp).abs().max() < ATOL and (loss - full_loss).abs() < ATOL, mode
        assert max((a - b).abs().max().item() for a, b in zip(grads, full_grads)) < ATOL, mode


def test_packing_refuses_position_ids_that_do_not_restart(tiny):
    from transformers import AutoModelForCausalLM

    model_dir, tensors = tiny
    batch = h.as_proto(tensors, slice(0, 2))
    batch.batch["position_ids"] = batch.batch["position_ids"] + 1
    with pytest.raises(ValueError, match="position ids 0..n-1"):
        hf_logits(AutoModelForCausalLM.from_pretrained(model_dir), batch, "cpu", True)


def test_hf_infer_dynamic_packed_scoring_equals_fixed(tiny):
    """hf_infer's compute_log_probs / compute_sum_pi_squared: token-budget groups (rows reordered by length,
    then restored) and packing give the fixed infer_batch_size result."""
    from roll.strategies import create_strategy

    model_dir, tensors = tiny
    batch = h.as_proto(tensors, slice(0, 11))
    results = []
    for keys in (
        {},
        {"use_dynamic_batching_in_infer": True, "max_tokens_per_microbatch_in_infer": 20},
        {"use_dynamic_batching_in_infer": True, "max_tokens_per_microbatch_in_infer": 20, "use_sequence_packing": True},
    ):
        config = dataclasses.replace(h.make_worker_config(model_dir, "hf_infer", None, 1, 1, 1), **keys)
        strategy = create_strategy("hf_infer", h.StandInWorker(config, 0, 1))
        strategy.initialize()
        results.append((strategy.compute_log_probs(batch), strategy.compute_sum_pi_squared(batch)))
    (fixed_lp, fixed_pi), *others = results
    for log_probs, sum_pi in others:
        assert (log_probs - fixed_lp).abs().max() < ATOL and (sum_pi - fixed_pi).abs().max() < ATOL


# --- config validation -------------------------------------------------------------------------------------
def _error(*overrides) -> str:
    from tests.configs.test_config import error_of

    return error_of(*overrides)


def test_budget_below_the_longest_row_names_the_key_and_the_minimum():
    message = _error(
        "actor_train.use_dynamic_batching_in_train=true", "actor_train.max_tokens_per_microbatch_in_train=20"
    )
    assert "actor_train.max_tokens_per_microbatch_in_train" in message and "= 30" in message
    message = _error("reference.use_dynamic_batching_in_infer=true")
    assert "reference.max_tokens_per_microbatch_in_infer' = None" in message


def test_keys_a_strategy_would_ignore_are_errors():
    message = _error(
        "actor_infer.use_sequence_packing=true",
        "actor_infer.strategy_args.strategy_name=vllm",
    )
    assert "actor_infer.use_sequence_packing" in message and "'vllm'" in message
    message = _error(  # megatron packs at PP 1 only (the pipeline stages exchange fixed shapes)
        "actor_train.use_sequence_packing=true",
        "actor_train.strategy_args.strategy_name=megatron_train",
        "actor_train.strategy_args.strategy_config={pipeline_model_parallel_size: 2}",
        "actor_train.device_mapping=[0,1]",
    )
    assert "'actor_train.use_sequence_packing' with megatron_train" in message and "pipeline_model_parallel_size 1" in (
        message
    )
    assert "actor_infer.use_dynamic_batching_in_train" in _error("actor_infer.use_dynamic_batching_in_train=true")
    assert "only read with" in _error("actor_train.max_tokens_per_microbatch_in_train=64")


def test_valid_micro_batching_settings_load():
    from tests.configs.test_config import tiny as load

    config = load(
        "actor_train.use_dynamic_batching_in_train=true",
        "actor_train.max_tokens_per_microbatch_in_train=30",
        "actor_train.use_sequence_packing=true",
        "reference.use_dynamic_batching_in_infer=true",
        "reference.max_tokens_per_microbatch_in_infer=64",
        "reference.use_sequence_packing=true",
    )
    assert config.actor_train.use_sequence_packing and config.reference.max_tokens_per_microbatch_in_infer == 64
