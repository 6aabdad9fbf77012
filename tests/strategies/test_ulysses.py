"""Ulysses sequence parallelism (model_args.ulysses_size=2) on the FSDP2 strategies, 2 ranks (gloo): one
Ulysses group of 2 ranks = one data-parallel rank, each rank running half of every row's sequence.

- fsdp2_infer scores like the plain HF model (log-probs within 1e-5): the tiny Qwen2 (2 heads, 2 KV heads,
  sdpa; padded and packed) and a GQA Qwen2 with 4 heads and 1 KV head (repeated to each rank) on the eager kernel;
- fsdp2_train (activation checkpointing on: its recompute runs the all-to-alls again) trains like the plain
  single-process loop on the same global batch (per-step losses and final parameters, the tolerances of
  test_train_strategies.py), also with token-budget micro-batches, packed or not, and so do the critic's
  value model and LoRA;
- token-mean (the loss normalised by the step's global token count) with Ulysses equals FSDP2 without it on
  the same global batch (2 data-parallel ranks).

One spawned pair of processes runs every scenario (harness.launch).
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import lora_scenarios as ls
from tests.strategies.test_train_strategies import (
    DYNAMIC_KEYS,
    LOSS_KEYS,
    PARAM_ATOL,
    _assert_steps_close,
    _log_probs,
    _max_param_diff,
    assert_critic_like_plain,
)

ULYSSES = {"ulysses_size": 2}
FSDP2 = {"reshard_after_forward": True}
ROWS = h.WORLD_SIZE * h.ROWS_PER_RANK  # one data-parallel group gets the whole global batch
GQA_MODEL = "gqa_model"
LORA_TARGET = r".*\.(q_proj|v_proj|up_proj|down_proj)"
DYNAMIC = {"use_dynamic_batching_in_train": True, "max_tokens_per_microbatch_in_train": 48}
# packed rows of odd token counts: the packed row is padded to a multiple of 2 before it is split
PACKED = {**DYNAMIC, "use_sequence_packing": True}
PACKED_INFER = {
    "use_dynamic_batching_in_infer": True,
    "max_tokens_per_microbatch_in_infer": 20,
    "use_sequence_packing": True,
}


def scenarios() -> list[dict]:
    train = dict(strategy="fsdp2_train", config=FSDP2, gradient_checkpointing=True)
    return [
        dict(name="infer", strategy="fsdp2_infer", config=None, model_args=ULYSSES),
        dict(
            name="infer_gqa_eager",
            strategy="fsdp2_infer",
            config=None,
            model=GQA_MODEL,
            model_args={**ULYSSES, "attn_implementation": "eager"},
        ),
        dict(name="train", micro=4, accumulation=ROWS // 4, model_args=ULYSSES, **train),
        dict(
            name="train_dynamic",
            micro=4,
            accumulation=ROWS // 4,
            model_args=ULYSSES,
            worker=DYNAMIC,
            record_micro_rows=True,
            **train,
        ),  # fmt: skip
        # token-mean, 2 steps: Ulysses (1 group, 16 rows) vs plain data parallelism (2 ranks × 8 rows)
        dict(
            name="token_mean",
            micro=4,
            accumulation=ROWS // 4,
            model_args=ULYSSES,
            loss_agg_mode="token-mean",
            steps=2,
            **train,
        ),  # fmt: skip
        dict(name="token_mean_dp", micro=4, accumulation=ROWS // 8, loss_agg_mode="token-mean", steps=2, **train),
        dict(name="train_packed", micro=4, accumulation=ROWS // 4, model_args=ULYSSES, worker=PACKED, **train),
        # ROLL's tiled MLP on the sequence shards Ulysses leaves each rank
        dict(
            name="train_packed_tiled",
            micro=4,
            accumulation=ROWS // 4,
            model_args=ULYSSES,
            worker=PACKED,
            **{**train, "config": {**FSDP2, "apply_tiled_mlp": True, "tiled_num_shards": 3}},
        ),  # fmt: skip
        dict(name="infer_packed", strategy="fsdp2_infer", config=None, model_args=ULYSSES, worker=PACKED_INFER),
        dict(name="critic", micro=4, accumulation=ROWS // 4, model_args=ULYSSES, critic=True, **train),
        dict(
            name="lora",
            runner=ls.RUNNER,
            target=LORA_TARGET,
            micro=4,
            accumulation=ROWS // 4,
            model_args=ULYSSES,
            **train,
        ),  # fmt: skip
    ]


def _gqa_model(workdir, model_dir):
    from transformers import AutoTokenizer

    from roll.demo.tiny_model import save_random_qwen2

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    path, _ = save_random_qwen2(
        workdir / GQA_MODEL,
        tokenizer,
        hidden_size=128,
        intermediate_size=256,
        num_layers=2,
        num_heads=4,
        num_kv_heads=1,
        max_position_embeddings=256,
        seed=5,
    )
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ulysses")
    model_dir, data_file = h.prepare(workdir)
    gqa_dir = _gqa_model(workdir, model_dir)
    results = h.launch(scenarios(), model_dir, data_file, workdir)
    failed = {name: r["error"] for name, r in results.items() if "error" in r}
    assert not failed, failed
    return {
        "reference": h.plain_reference(model_dir, data_file),
        "critic_reference": h.plain_reference(model_dir, data_file, critic=True),
        "lora_reference": ls.plain_lora_reference(model_dir, data_file, LORA_TARGET),
        "results": results,
        "model_dir": model_dir,
        "gqa_dir": gqa_dir,
        "data_file": data_file,
    }


@pytest.mark.parametrize(
    "name,model_key,kernel",
    [("infer", "model_dir", None), ("infer_gqa_eager", "gqa_dir", "eager"), ("infer_packed", "model_dir", None)],
)
def test_log_probs_equal_the_unsplit_model(runs, name, model_key, kernel):
    from transformers import AutoModelForCausalLM

    extra = {"attn_implementation": kernel} if kernel else {}
    model = AutoModelForCausalLM.from_pretrained(runs[model_key], dtype=torch.float32, **extra).eval()
    result = runs["results"][name]
    assert len(result["log_probs"]) == 1  # one data-parallel group: its first rank's result only
    expected = _log_probs(model, torch.load(runs["data_file"])[0])
    got = torch.cat(result["log_probs"])
    assert got.shape == expected.shape and expected.abs().sum() > 0
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


@pytest.mark.parametrize("name", ["train", "train_dynamic", "train_packed", "train_packed_tiled"])
def test_training_equals_the_plain_loop_on_the_same_global_batch(runs, name):
    result, reference = runs["results"][name], runs["reference"]
    assert result["layout"].dp_size == 1 and result["layout"].dp_ranks == (0, 0)
    assert torch.equal(result["received"][0], result["received"][1])  # both ranks of the group got every row
    keys = LOSS_KEYS + ("actor/pg_clipfrac",)
    if name == "train_dynamic":  # token-budget groups of the whole batch
        assert result["micro_rows"] and all(sum(step) == ROWS for step in result["micro_rows"])
    if name != "train":  # per-micro-batch means differ with other micro-batches
        keys = DYNAMIC_KEYS
    _assert_steps_close(result["steps"], reference["steps"], keys)
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL
    # scoring by the trained strategy (Ulysses forward in eval mode) = the reference model's log-probs
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    model.load_state_dict(reference["params"])
    expected = _log_probs(model, torch.load(runs["data_file"])[0])
    assert torch.allclose(torch.cat(result["log_probs"]), expected, atol=1e-4)


def test_critic_value_model_trains_and_scores_like_the_plain_loop(runs):
    """The value model (token-classification head, one output per token) through the same split forward."""
    assert_critic_like_plain(runs["results"]["critic"], runs)


def test_lora_adapters_train_like_the_plain_peft_loop(runs):
    """LoRA (peft wraps the projections, attention stays the Ulysses wrapper): same losses and adapters as the
    single-process peft loop, and the reference log-probs with the adapters disabled are the base model's."""
    from transformers import AutoModelForCausalLM

    result, reference = runs["results"]["lora"], runs["lora_reference"]
    _assert_steps_close(result["steps"], reference["steps"], DYNAMIC_KEYS)
    assert max((result["after"][n] - reference["params"][n]).abs().max().item() for n in reference["params"]) < 2e-5
    base = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    expected = _log_probs(base, torch.load(runs["data_file"])[0])
    assert torch.allclose(result["reference_log_probs"][0], expected, atol=1e-5)


def test_token_mean_with_ulysses_equals_data_parallel_without(runs):
    """The step's token count is summed over all ranks (each row counted by both ranks of its group) and dp_size
    doubles with it, so the normalisation, and the update, are those of plain data parallelism."""
    ulysses, plain = runs["results"]["token_mean"], runs["results"]["token_mean_dp"]
    assert plain["layout"].dp_size == 2
    _assert_steps_close(ulysses["steps"], plain["steps"], LOSS_KEYS)
    assert _max_param_diff(ulysses["params"], plain["params"]) < PARAM_ATOL


# --- 4 ranks: rlvr_fsdp2_sp2's shape (Ulysses groups of 2 inside hybrid-sharding groups, ROLL's fsdp_size) -------
HYBRID = {**FSDP2, "fsdp_size": 2}  # 2 shard groups of 2 ranks, parameters replicated across them


def hybrid_scenarios() -> list[dict]:
    return [
        dict(name="hybrid_infer", strategy="fsdp2_infer", config={"fsdp_size": 2}, model_args=ULYSSES),
        dict(
            name="hybrid_train",
            strategy="fsdp2_train",
            config=HYBRID,
            micro=4,
            accumulation=ROWS // 8,
            gradient_checkpointing=True,
            model_args=ULYSSES,
        ),  # fmt: skip
    ]


@pytest.fixture(scope="module")
def hybrid_runs(runs, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ulysses_hybrid")
    results = h.launch(hybrid_scenarios(), runs["model_dir"], runs["data_file"], workdir, world_size=4)
    failed = {name: r["error"] for name, r in results.items() if "error" in r}
    assert not failed, failed
    return results


def test_hybrid_sharding_with_ulysses_scores_and_trains_like_the_plain_model(runs, hybrid_runs):
    from transformers import AutoModelForCausalLM

    infer, train, reference = hybrid_runs["hybrid_infer"], hybrid_runs["hybrid_train"], runs["reference"]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    batch0 = torch.load(runs["data_file"])[0]
    assert len(infer["log_probs"]) == 2  # 2 data-parallel groups (3 and 7 rows), one result each
    assert torch.allclose(torch.cat(infer["log_probs"]), _log_probs(model, batch0), atol=1e-5)
    assert train["layout"].dp_ranks == (0, 0, 1, 1)
    _assert_steps_close(train["steps"], reference["steps"], LOSS_KEYS + ("actor/pg_clipfrac",))
    assert _max_param_diff(train["params"], reference["params"]) < PARAM_ATOL
