"""Training strategies give the same training: DeepSpeed ZeRO-0/1/2/3 and FSDP2 (2 ranks, gloo) against a
plain single-process PyTorch loop, from the same tiny checkpoint and data, 3 optimizer steps of the
production PPO loss (ActorWorker._policy_loss: vanilla clip + low-var KL loss + entropy bonus, AdamW with
weight decay, linear LR schedule with warm-up, gradient clipping that binds).

Also: micro-batch 1 × accumulation 8 = micro-batch 8 × accumulation 1; save → load → continue = the
uninterrupted run; offload + reload between steps changes nothing and moves every tensor (offload_probe.py);
forward-only strategies score like HF.

All scenarios run in one pair of spawned processes (see harness.py); each test checks one of them.

Tolerances (float32): per-step losses and grad norms rtol 1e-5 (atol 1e-6; observed ≤ 3e-6 relative);
final parameters max |Δ| < 2e-5 (observed ≤ 2.1e-6: summation order differs between engines —
reduce-scatter vs all-reduce, bucketed flat buffers, micro-batch order — and Adam's first steps amplify
near-zero gradient differences). Resume and offload against the same strategy's uninterrupted run:
bit-identical (atol 0). bf16 compute (FSDP2 mixed precision): losses within 5 %, update direction
cosine > 0.95.
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import offload_probe

LOSS_RTOL, LOSS_ATOL, PARAM_ATOL, SAME_RUN_ATOL = 1e-5, 1e-6, 2e-5, 0.0
FSDP2 = {"reshard_after_forward": True}

EQUIVALENCE = {  # name: (strategy, strategy_config, gradient checkpointing)
    "ds_zero0": ("deepspeed_train", h.ds_config(0), False),
    "ds_zero1": ("deepspeed_train", h.ds_config(1), False),
    "ds_zero2": ("deepspeed_train", h.ds_config(2), False),
    "ds_zero3": ("deepspeed_train", h.ds_config(3), True),
    "fsdp2": ("fsdp2_train", FSDP2, True),
    "fsdp2_no_reshard": ("fsdp2_train", {"reshard_after_forward": False}, False),
    # ROLL's wrap_policy: embeddings and output layer as their own units (test_fsdp2_units.py checks the units)
    "fsdp2_wrap_units": (
        "fsdp2_train",
        {**FSDP2, "wrap_policy": {"wrap_embeddings": True, "wrap_lm_output": True}},
        True,
    ),
}
RESUMED = ("ds_zero0", "ds_zero2", "ds_zero3", "fsdp2")
INVARIANCE = ("ds_zero0", "ds_zero2", "ds_zero3", "fsdp2")
OFFLOADED = ("ds_zero0", "ds_zero1", "ds_zero2", "ds_zero3", "fsdp2")
INFER = {"fsdp2_infer": ("fsdp2_infer", None), "ds_infer_zero3": ("deepspeed_infer", h.ds_config(3))}
PARKED_INFER = ("fsdp2_infer",)  # a round trip before scoring (deepspeed_infer moves its module on a GPU only)
# token-mean needs the step's global token count (train_common.global_batch_info) to be split-invariant
TOKEN_MEAN_INVARIANCE = ("ds_zero2", "fsdp2")
FROZEN_ENGINES = ("ds_zero2", "fsdp2")  # model_args.freeze_module_prefix (ROLL's partial fine-tuning)
FROZEN = ("model.embed_tokens", "model.layers.0.")
CRITIC = ("ds_zero0", "ds_zero3", "fsdp2")  # the value model (random head) on the sharded engines and one that is not
# Token budgets (rows hold 4..16 real tokens, 8 rows per rank and step): 24 makes 4 training micro-batches per
# rank and step (≠ gradient_accumulation_steps 2, rows regrouped by length; in step 2 one rank needs only 3 and
# must split a group to match); 20 makes 2 vs 3 scoring forwards on the uneven 3 / 7 row shards, so sharded
# engines must pad the count.
DYNAMIC = {
    "use_dynamic_batching_in_train": True,
    "max_tokens_per_microbatch_in_train": 24,
    "use_dynamic_batching_in_infer": True,
    "max_tokens_per_microbatch_in_infer": 20,
}
PACKED = {**DYNAMIC, "use_sequence_packing": True}
DYNAMIC_BATCHING = ("ds_zero2", "fsdp2")
TILED = {"apply_tiled_mlp": True, "tiled_num_shards": 3}
PACKED_ONLY = ("ds_zero3",)  # ZeRO-3 + activation checkpointing, packed (its padded twin is ds_zero3 itself)


def scenarios() -> list[dict]:
    out = []
    for name, (strategy, config, checkpointing) in EQUIVALENCE.items():
        out.append(
            dict(
                name=name,
                strategy=strategy,
                config=config,
                micro=4,
                accumulation=2,
                gradient_checkpointing=checkpointing,
                save_after=1 if name in RESUMED else None,
            )
        )
    for name in RESUMED:
        strategy, config, checkpointing = EQUIVALENCE[name]
        out.append(
            dict(
                name=f"{name}/resumed",
                strategy=strategy,
                config=config,
                micro=4,
                accumulation=2,
                gradient_checkpointing=checkpointing,
                resume_from=name,
            )
        )
    for name in INVARIANCE:
        strategy, config, _ = EQUIVALENCE[name]
        out.append(dict(name=f"{name}/micro1_acc8", strategy=strategy, config=config, micro=1, accumulation=8))
        out.append(dict(name=f"{name}/micro8_acc1", strategy=strategy, config=config, micro=8, accumulation=1))
    for name in TOKEN_MEAN_INVARIANCE:
        strategy, config, _ = EQUIVALENCE[name]
        for micro, accumulation in ((1, 8), (8, 1)):
            out.append(
                dict(
                    name=f"{name}/token_mean_micro{micro}_acc{accumulation}",
                    strategy=strategy,
                    config=config,
                    micro=micro,
                    accumulation=accumulation,
                    loss_agg_mode="token-mean",
                )
            )
    for name in OFFLOADED:
        strategy, config, checkpointing = EQUIVALENCE[name]
        out.append(
            dict(
                name=f"{name}/offload",
                strategy=strategy,
                config=config,
                micro=4,
                accumulation=2,
                gradient_checkpointing=checkpointing,
                offload=True,
            )
        )
    for name in CRITIC:
        strategy, config, _ = EQUIVALENCE[name]
        out.append(dict(name=f"{name}/critic", strategy=strategy, config=config, micro=4, accumulation=2, critic=True))
    for name in ("ds_zero3", "fsdp2"):
        strategy, config, _ = EQUIVALENCE[name]
        out.append(
            dict(
                name=f"{name}/partial_checkpoint",
                strategy=strategy,
                config=config,
                micro=4,
                accumulation=2,
                model="model_without_lm_head",
                steps=0,
            )
        )
    out.append(
        dict(
            name="fsdp2/bf16_compute",
            strategy="fsdp2_train",
            config={"param_dtype": "bfloat16"},
            micro=4,
            accumulation=2,
        )
    )
    for name in FROZEN_ENGINES:
        strategy, config, checkpointing = EQUIVALENCE[name]
        frozen = {"freeze_module_prefix": ",".join(FROZEN)}
        out.append(dict(name=f"{name}/frozen", strategy=strategy, config=config, micro=4, accumulation=2,
                        gradient_checkpointing=checkpointing, model_args=frozen))  # fmt: skip
    for name, (strategy, config) in INFER.items():
        out.append(dict(name=name, strategy=strategy, config=config, load_weights=True, offload=name in PARKED_INFER))
    return out + micro_batching_scenarios()


def micro_batching_scenarios() -> list[dict]:
    out = []
    for name in DYNAMIC_BATCHING + PACKED_ONLY:
        strategy, config, checkpointing = EQUIVALENCE[name]
        variants = {"dynamic_packed": (PACKED, None)}
        if name in DYNAMIC_BATCHING:
            variants.update(dynamic=(DYNAMIC, None), dynamic_token_mean=(DYNAMIC, "token-mean"))
        for variant, (worker, loss_agg_mode) in variants.items():
            out.append(
                dict(
                    name=f"{name}/{variant}",
                    strategy=strategy,
                    config=config,
                    micro=4,
                    accumulation=2,
                    gradient_checkpointing=checkpointing,
                    worker=worker,
                    loss_agg_mode=loss_agg_mode,
                    record_micro_rows=True,
                )
            )
    infer_keys = {k: v for k, v in PACKED.items() if "train" not in k}
    out.append(dict(name="fsdp2_infer/dynamic_packed", strategy="fsdp2_infer", config=None, worker=infer_keys))
    out.append(dict(name="fsdp2_infer/tiled_dynamic_packed", strategy="fsdp2_infer", config=TILED, worker=infer_keys))
    # ROLL's tiled MLP under FSDP2, activation checkpointing and packing: the twin of fsdp2/dynamic_packed
    out.append(
        dict(
            name="fsdp2/tiled_mlp_packed",
            strategy="fsdp2_train",
            config={**FSDP2, **TILED},
            micro=4,
            accumulation=2,
            gradient_checkpointing=True,
            worker=PACKED,
        )
    )
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("strategies")
    model_dir, data_file = h.prepare(workdir)
    h.partial_checkpoint(model_dir, workdir)
    reference = h.plain_reference(model_dir, data_file)
    critic_reference = h.plain_reference(model_dir, data_file, critic=True)
    results = h.launch(scenarios(), model_dir, data_file, workdir)
    failed = {name: r["error"] for name, r in results.items() if "error" in r}
    assert not failed, failed
    return {
        "reference": reference,
        "critic_reference": critic_reference,
        "results": results,
        "model_dir": model_dir,
        "data_file": data_file,
    }


def _assert_steps_close(steps, expected, keys, rtol=LOSS_RTOL, atol=LOSS_ATOL):
    assert len(steps) == len(expected)
    for index, (got, want) in enumerate(zip(steps, expected)):
        for key in keys:
            assert got[key] == pytest.approx(want[key], rel=rtol, abs=atol), (index, key, got[key], want[key])


def _max_param_diff(params, expected) -> float:
    assert sorted(params) == sorted(expected), set(params) ^ set(expected)
    return max((params[name] - expected[name]).abs().max().item() for name in expected)


LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/ppo_kl", "grad_norm", "lr")


def test_reference_exercises_clipping_and_schedule(runs):
    steps = runs["reference"]["steps"]
    assert all(step["grad_norm"] > h.TRAINING["max_grad_norm"] for step in steps)  # clipping binds every step
    assert [step["lr"] for step in steps] == pytest.approx([1e-3, 5e-4, 0.0])  # warm-up then linear decay
    assert any(step["actor/pg_clipfrac"] > 0 for step in steps)  # PPO clip is active


@pytest.mark.parametrize("name", list(EQUIVALENCE))
def test_equivalent_to_plain_pytorch(runs, name):
    result, reference = runs["results"][name], runs["reference"]
    _assert_steps_close(result["steps"], reference["steps"], LOSS_KEYS + ("actor/pg_clipfrac",))
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", list(EQUIVALENCE))
def test_log_probs_and_checksum_of_trained_model(runs, name):
    """compute_log_probs on uneven shards (3 and 7 rows, micro-batches of 3) and the checksum of the
    gathered weights agree with the reference model after the same training."""
    from transformers import AutoModelForCausalLM

    from roll.strategies.train_common import checksum

    result, reference = runs["results"][name], runs["reference"]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    model.load_state_dict(reference["params"])
    expected = _log_probs(model, torch.load(runs["data_file"])[0])
    got = torch.cat(result["log_probs"])
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-4)
    assert result["checksum"] == pytest.approx(checksum(reference["params"].items()), rel=1e-6)


def _log_probs(model, tensors):
    from roll.utils.functional import response_log_probs, slice_response_logits

    batch = h.as_proto(tensors, slice(0, 10))
    with torch.no_grad():
        logits = model(**{k: batch.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    responses = batch.batch["responses"]
    return (
        response_log_probs(slice_response_logits(logits, responses.shape[1]), responses) * batch.batch["response_mask"]
    )


@pytest.mark.parametrize("name", RESUMED)
def test_save_load_continue_equals_uninterrupted(runs, name):
    uninterrupted, resumed = runs["results"][name], runs["results"][f"{name}/resumed"]
    assert resumed["first_step"] == 1 and len(resumed["steps"]) == h.STEPS - 1
    _assert_steps_close(resumed["steps"], uninterrupted["steps"][1:], LOSS_KEYS, rtol=0, atol=SAME_RUN_ATOL)
    assert _max_param_diff(resumed["params"], uninterrupted["params"]) <= SAME_RUN_ATOL
    # the checkpoint also holds a plain HF copy with the tokenizer
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= set(uninterrupted["hf_files"])


@pytest.mark.parametrize("name", INVARIANCE)
def test_micro_batch_1_x_8_equals_8_x_1(runs, name):
    small, large = runs["results"][f"{name}/micro1_acc8"], runs["results"][f"{name}/micro8_acc1"]
    keys = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")
    _assert_steps_close(small["steps"], large["steps"], keys)
    assert _max_param_diff(small["params"], large["params"]) < PARAM_ATOL
    _assert_steps_close(large["steps"], runs["reference"]["steps"], keys)  # and both equal the reference
    assert _max_param_diff(large["params"], runs["reference"]["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", TOKEN_MEAN_INVARIANCE)
def test_token_mean_micro_batch_1_x_8_equals_8_x_1(runs, name):
    """Each rank's micro-batches hold different token counts; the loss is still the global token mean."""
    small = runs["results"][f"{name}/token_mean_micro1_acc8"]
    large = runs["results"][f"{name}/token_mean_micro8_acc1"]
    _assert_steps_close(
        small["steps"], large["steps"], ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")
    )
    assert _max_param_diff(small["params"], large["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_reload_leaves_training_unchanged(runs, name):
    plain, offloaded = runs["results"][name], runs["results"][f"{name}/offload"]
    _assert_steps_close(offloaded["steps"], plain["steps"], LOSS_KEYS, rtol=0, atol=SAME_RUN_ATOL)
    assert _max_param_diff(offloaded["params"], plain["params"]) <= SAME_RUN_ATOL


@pytest.mark.parametrize("name", PARKED_INFER)
def test_forward_only_offload_moves_every_weight(runs, name):
    """The weights leave and come back (the log-probs after the round trip are checked against HF below)."""
    offload_probe.assert_every_tensor_moved(runs["results"][name]["round_trips"], optimizer=False)


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_moves_every_parameter_and_optimizer_tensor(runs, name):
    """Watched by offload_probe: out of compute memory at offload, back bit-identical at reload (fails on an
    offload that returns early)."""
    offload_probe.assert_every_tensor_moved(runs["results"][f"{name}/offload"]["round_trips"])


@pytest.mark.parametrize("name", CRITIC)
def test_critic_equivalent_to_plain_pytorch(runs, name):
    """Value model: the head is not in the checkpoint and each rank initialises it differently; every
    engine must train rank 0's (= the reference's) head, and compute_values must match."""
    assert_critic_like_plain(runs["results"][f"{name}/critic"], runs)


def assert_critic_like_plain(result: dict, runs: dict) -> None:
    """A critic scenario's steps, parameters and compute_values against the plain single-process loop."""
    reference = runs["critic_reference"]
    _assert_steps_close(result["steps"], reference["steps"], ("critic/vf_loss", "grad_norm", "lr"))
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL
    model = h.load_value_model(runs["model_dir"]).eval()
    model.load_state_dict(reference["params"])
    batch = h.as_proto(torch.load(runs["data_file"])[0], slice(0, 10))
    with torch.no_grad():
        logits = model(**{k: batch.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    expected = logits[:, -h.RESPONSE_LENGTH - 1 : -1].squeeze(-1)
    # on the generated tokens: padding positions are read nowhere (every use is masked) and hold 0 where the
    # forward was cut to the micro-batch's longest row (batching.hf_logits)
    real = batch.batch["response_mask"].bool()
    assert torch.allclose(torch.cat(result["log_probs"])[real], expected[real], atol=1e-5)


@pytest.mark.parametrize("name", ("ds_zero3", "fsdp2"))
def test_weights_missing_from_checkpoint_are_rank_0s(runs, name):
    """lm_head.weight is not in the checkpoint and each rank initialises it with another seed: the sharded
    engine must hold rank 0's tensor (= the one the same seed gives in one process), not a mix of slices."""
    from transformers import AutoModelForCausalLM

    result = runs["results"][f"{name}/partial_checkpoint"]
    torch.manual_seed(h.CRITIC_SEED)
    model = AutoModelForCausalLM.from_pretrained(
        runs["model_dir"].parent / "model_without_lm_head", dtype=torch.float32
    )
    assert _max_param_diff(result["params"], dict(model.named_parameters())) == 0


def test_fsdp2_bf16_mixed_precision_trains_close_to_float32(runs):
    """param_dtype=bfloat16: compute in bf16, float32 master weights and AdamW state (bf16 tolerance)."""
    result, reference = runs["results"]["fsdp2/bf16_compute"], runs["reference"]
    _assert_steps_close(
        result["steps"], reference["steps"], ("actor/pg_loss", "actor/kl_loss", "lr"), rtol=0.05, atol=5e-3
    )
    assert all(p.dtype == torch.float32 for p in result["params"].values())
    from transformers import AutoModelForCausalLM

    initial = dict(AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).named_parameters())
    update = torch.cat([(result["params"][n] - initial[n]).flatten() for n in initial])
    expected = torch.cat([(reference["params"][n] - initial[n]).flatten() for n in initial])
    assert torch.nn.functional.cosine_similarity(update, expected, dim=0) > 0.95


@pytest.mark.parametrize("name", list(INFER))
def test_forward_only_strategies_score_like_hf_and_load_weights(runs, name):
    from transformers import AutoModelForCausalLM

    from roll.strategies.train_common import checksum

    result = runs["results"][name]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    batch0 = torch.load(runs["data_file"])[0]
    assert torch.allclose(torch.cat(result["log_probs"]), _log_probs(model, batch0), atol=1e-5)
    assert result["checksum"] == pytest.approx(checksum(model.named_parameters()), rel=1e-9)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01)
    assert result["shifted_checksum"] == pytest.approx(checksum(model.named_parameters()), rel=1e-9)
    assert _max_param_diff(result["params"], dict(model.named_parameters())) < 1e-6
    assert torch.allclose(torch.cat(result["shifted_log_probs"]), _log_probs(model, batch0), atol=1e-5)


# --- dynamic batching and sequence packing ---------------------------------------------------------------------
DYNAMIC_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")


@pytest.mark.parametrize("name", DYNAMIC_BATCHING)
def test_dynamic_batching_equals_fixed(runs, name):
    """A varying number of token-budget micro-batches per step (and per rank) gives the fixed split's training."""
    dynamic, fixed = runs["results"][f"{name}/dynamic"], runs["results"][name]
    counts = [len(step) for step in dynamic["micro_rows"]]
    assert all(sum(step) == h.ROWS_PER_RANK for step in dynamic["micro_rows"]) and set(counts) != {2}, counts
    _assert_steps_close(dynamic["steps"], fixed["steps"], DYNAMIC_KEYS)
    assert _max_param_diff(dynamic["params"], fixed["params"]) < PARAM_ATOL
    # scoring with token-budget forwards (aligned over ranks), rows back in order
    assert torch.allclose(torch.cat(dynamic["log_probs"]), torch.cat(fixed["log_probs"]), atol=1e-5)


@pytest.mark.parametrize("name", DYNAMIC_BATCHING)
def test_dynamic_batching_token_mean_equals_fixed(runs, name):
    """token-mean: the global token count and dp_size follow the step's micro-batch count."""
    dynamic, fixed = runs["results"][f"{name}/dynamic_token_mean"], runs["results"][f"{name}/token_mean_micro8_acc1"]
    _assert_steps_close(dynamic["steps"], fixed["steps"], DYNAMIC_KEYS)
    assert _max_param_diff(dynamic["params"], fixed["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", DYNAMIC_BATCHING + PACKED_ONLY)
def test_sequence_packing_equals_padding(runs, name):
    """Packed rows (one row per micro-batch, position ids restarting) train and score as the padded rows;
    with the same micro-batches, even the per-micro-batch metrics (ppo_kl, clipfrac) agree."""
    packed = runs["results"][f"{name}/dynamic_packed"]
    padded = runs["results"][f"{name}/dynamic" if name in DYNAMIC_BATCHING else name]
    keys = DYNAMIC_KEYS + (("actor/ppo_kl", "actor/pg_clipfrac") if name in DYNAMIC_BATCHING else ())
    _assert_steps_close(packed["steps"], padded["steps"], keys)
    assert _max_param_diff(packed["params"], padded["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(packed["log_probs"]), torch.cat(padded["log_probs"]), atol=1e-5)


@pytest.mark.parametrize("name", ("fsdp2_infer/dynamic_packed", "fsdp2_infer/tiled_dynamic_packed"))
def test_forward_only_strategy_packed_dynamic_scores_like_hf(runs, name):
    """Also with ROLL's tiled MLP (fsdp2_infer takes apply_tiled_mlp: the scoring forward in chunks)."""
    from transformers import AutoModelForCausalLM

    result = runs["results"][name]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    batch0 = torch.load(runs["data_file"])[0]
    assert torch.allclose(torch.cat(result["log_probs"]), _log_probs(model, batch0), atol=1e-5)


@pytest.mark.parametrize("name", FROZEN_ENGINES)
def test_freeze_module_prefix_keeps_those_weights_and_trains_the_rest(runs, name):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32)
    initial = {n: p.detach() for n, p in model.named_parameters()}
    params = runs["results"][f"{name}/frozen"]["params"]
    frozen = [n for n in params if n.startswith(FROZEN)]
    assert frozen and all(torch.equal(params[n], initial[n]) for n in frozen), name
    trained = [n for n in params if not n.startswith(FROZEN) and n in initial]
    assert trained and all(not torch.equal(params[n], initial[n]) for n in trained), name


def test_fsdp2_tiled_mlp_trains_and_scores_as_the_untiled_model(runs):
    """apply_tiled_mlp (3 chunks per MLP) with FSDP2, activation checkpointing and packed rows: the same steps,
    parameters and log-probs as fsdp2/dynamic_packed (the same micro-batches, untiled)."""
    tiled, plain = runs["results"]["fsdp2/tiled_mlp_packed"], runs["results"]["fsdp2/dynamic_packed"]
    _assert_steps_close(tiled["steps"], plain["steps"], DYNAMIC_KEYS + ("actor/ppo_kl", "actor/pg_clipfrac"))
    assert _max_param_diff(tiled["params"], plain["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(tiled["log_probs"]), torch.cat(plain["log_probs"]), atol=1e-5)
