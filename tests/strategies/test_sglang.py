"""The `sglang` strategy WITHOUT SGLang: SGLang cannot run on these machines (no CPU build), so the engine is
replaced by `FakeSGLangEngine`, a test double defined here and used nowhere else. It implements the
methods and return formats of `sglang.Engine` that the strategy calls, as read in SGLang's source (see
roll/strategies/sglang_infer.py), on top of a real tiny HF model — so the pipeline's real weight-sync
checks (checksum + probe log-probs) run against it. What this proves: the strategy's config translation,
requests, output conversion, weight buckets, memory calls and pipeline wiring. What it cannot prove: that
the real engine behaves like the double.

Also the request-level generation/abort of `hf_infer`, for real (vllm's is in test_vllm.py).
"""

import asyncio
import importlib.util
import threading

import pytest
import torch

from roll.strategies import sglang_infer
from roll.strategies.sglang_infer import (
    ENGINE_KEYS,
    build_requests,
    completion_of,
    outputs_to_batch,
    sampling_params,
    validate_strategy_config,
)
from tests.strategies.vllm_scenarios import (
    WORDS,
    N,
    RoleDouble,
    StandInWorker,
    layout_checks,
    perturbed_copy,
    prompt_batch,
    worker_config,
)

# SamplingParams API fields of SGLang (srt/sampling/sampling_params.py, read for this test double)
SGLANG_SAMPLING_FIELDS = {
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "custom_params",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
}


class FakeTokenizerManager:
    def __init__(self):
        self.aborted: set[str] = set()

    def abort_request(self, rid: str = "", abort_all: bool = False):  # sglang TokenizerManager.abort_request
        self.aborted.add(rid)


class FakeSGLangEngine:
    """TEST DOUBLE for sglang.Engine (never used outside tests): same method names, keyword arguments and
    return formats as the verified API, computing with a real HF model on CPU."""

    def __init__(self, model_path, dtype="auto", load_format="auto", **server_args):
        from transformers import AutoModelForCausalLM

        self.server_args = {"model_path": model_path, "dtype": dtype, "load_format": load_format, **server_args}
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).eval()
        if load_format == "dummy":
            with torch.no_grad():
                for p in self.model.parameters():
                    p.normal_(0, 0.02)
        self.calls: list[tuple] = []
        self.released = False
        self.loop = asyncio.new_event_loop()  # sglang.Engine keeps one and runs generate on it
        self.tokenizer_manager = FakeTokenizerManager()
        self.on_token = None  # test hook: called (rid, n_generated) inside the engine loop

    # --- generation ---------------------------------------------------------------------------------
    def generate(
        self,
        prompt=None,
        sampling_params=None,
        input_ids=None,
        image_data=None,
        return_logprob=False,
        logprob_start_len=None,
        top_logprobs_num=None,
        rid=None,
        stream=False,
        **kwargs,
    ):
        assert not self.released, "generate on released memory"
        assert prompt is None and input_ids is not None and return_logprob
        single = isinstance(input_ids[0], int)
        batch = [input_ids] if single else input_ids
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(batch)
        rids = [rid] if single else (rid or [f"req{i}" for i in range(len(batch))])
        for p in params:
            unknown = set(p) - SGLANG_SAMPLING_FIELDS
            assert not unknown, f"not SGLang sampling params: {unknown}"
        self.calls.append(("generate", len(batch)))

        async def run_all():
            return await asyncio.gather(
                *(self._one(ids, p, r, logprob_start_len) for ids, p, r in zip(batch, params, rids))
            )

        outs = self.loop.run_until_complete(run_all())
        return outs[0] if single else outs

    @torch.no_grad()
    async def _one(self, ids, params, rid, logprob_start_len):
        temperature = params.get("temperature", 1.0)
        greedy = temperature < 1e-6
        generator = None
        if params.get("sampling_seed") is not None:
            generator = torch.Generator().manual_seed(params["sampling_seed"])
        stops = set(params.get("stop_token_ids") or [])
        tokens, entries, finish = list(ids), [], None
        for step in range(params.get("max_new_tokens", 128)):
            logits = self.model(torch.tensor([tokens])).logits[0, -1].float()
            scaled = logits if greedy else logits / temperature  # SGLang: T=0 → top_k=1 at temperature 1
            log_probs = scaled.log_softmax(-1)
            if greedy:
                token = int(scaled.argmax())
            else:
                probs = log_probs.exp()
                if params.get("top_k", -1) > 0:
                    probs[probs < probs.topk(params["top_k"]).values[-1]] = 0
                token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
            tokens.append(token)
            entries.append((log_probs[token].item(), token, None))
            await asyncio.sleep(0)  # let scheduled callbacks (aborts) run, as the real engine's loop does
            if self.on_token:
                self.on_token(rid, step + 1)
                await asyncio.sleep(0)
            if rid in self.tokenizer_manager.aborted:
                finish = {"type": "abort", "message": "Abort before prefill"}
                break
            if token in stops:
                finish = {"type": "stop", "matched": token}
                break
        finish = finish or {"type": "length", "length": len(entries)}
        meta = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "completion_tokens": len(entries),
            "output_token_logprobs": entries,
        }
        if logprob_start_len is not None:
            full = self.model(torch.tensor([list(ids)])).logits[0].float().log_softmax(-1)
            meta["input_token_logprobs"] = [(None, ids[0], None)] + [
                (full[k - 1, ids[k]].item(), ids[k], None) for k in range(1, len(ids))
            ][logprob_start_len:]
        return {"text": "", "output_ids": [e[1] for e in entries], "meta_info": meta}

    # --- weights --------------------------------------------------------------------------------------
    @torch.no_grad()
    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        assert not self.released
        params = dict(self.model.named_parameters())
        self.calls.append(
            (
                "update_weights_from_tensor",
                [n for n, _ in named_tensors],
                load_format,
                flush_cache,
                {t.dtype for _, t in named_tensors},
            )
        )
        for name, tensor in named_tensors:
            if name not in params:
                return False, f"unknown parameter {name}"
            params[name].copy_(tensor)
        return True, "Success"

    def get_weights_by_name(self, name, truncate_size=100):
        param = dict(self.model.named_parameters()).get(name)
        return None if param is None else param.detach().cpu().to(torch.float32).numpy().tolist()[:truncate_size]

    def init_weights_update_group(
        self, master_address, master_port, rank_offset, world_size, group_name, backend="nccl"
    ):
        self.calls.append(
            ("init_weights_update_group", master_address, master_port, rank_offset, world_size, group_name, backend)
        )
        return True, "Succeeded to initialize custom process group."

    def update_weights_from_distributed(
        self, names, dtypes, shapes, group_name="weight_update_group", flush_cache=True, load_format=None
    ):
        self.calls.append(("update_weights_from_distributed", names, dtypes, shapes, group_name, flush_cache))
        return True, "Succeeded to update parameter online from distributed."

    # --- memory ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def release_memory_occupation(self, tags=None):
        self.calls.append(("release_memory_occupation", tags))
        self.released = True

    @torch.no_grad()
    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume_memory_occupation", tags))
        self.released = False
        for p in self.model.parameters():  # the memory saver does not keep released weights
            p.zero_()

    def flush_cache(self):
        self.calls.append(("flush_cache",))

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.loop.close()


# --- no engine needed ------------------------------------------------------------------------------------
def test_module_imports_without_sglang_and_is_registered():
    from roll.strategies import strategy_class

    assert strategy_class("sglang") is sglang_infer.SGLangInferStrategy
    if importlib.util.find_spec("sglang") is None:
        with pytest.raises(ModuleNotFoundError):
            sglang_infer.create_engine(model_path="x")


def test_strategy_config_validation():
    with pytest.raises(ValueError, match="unknown strategy_config keys \\['gpu_memory_utilization'\\]") as error:
        validate_strategy_config({"gpu_memory_utilization": 0.5}, "float32")
    for key in (*ENGINE_KEYS, "model_update_buffer_size_mb", "weight_update_mode"):
        assert key in str(error.value)
    engine, roll = validate_strategy_config(
        {"mem_fraction_static": 0.6, "tp_size": 2, "max_running_requests": 64, "model_update_buffer_size_mb": 8},
        "bfloat16",
    )
    assert engine == {
        "mem_fraction_static": 0.6,
        "tp_size": 2,
        "max_running_requests": 64,
        "dtype": "bfloat16",
        "random_seed": 0,
        "enable_memory_saver": True,
        "log_level": "error",
    }
    assert roll == {"model_update_buffer_size_mb": 8.0, "weight_update_mode": "tensor"}
    for bad, message in (
        ({"tp_size": "2"}, "tp_size = '2' must be of type int"),
        ({"disable_radix_cache": 1}, "must be of type bool"),
        ({"mem_fraction_static": 1.5}, "must be in \\(0, 1\\]"),
        ({"dtype": "bfloat16"}, "differs from model_args.dtype"),
        ({"weight_update_mode": "nccl"}, "valid: \\['tensor', 'distributed'\\]"),
        ({"model_update_buffer_size_mb": 0}, "must be > 0"),
    ):
        with pytest.raises(ValueError, match=message):
            validate_strategy_config(bad, "float32")


def test_requests_one_per_sample_adjacent_with_distinct_seeds():
    prompts = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    settings = {
        "max_new_tokens": 8,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 0,
        "do_sample": True,
        "num_return_sequences": 3,
    }
    ids, params = build_requests(prompts, mask, settings, [2], base_seed=100)
    assert ids == [[5, 6]] * 3 + [[7, 8, 9, 10]] * 3
    assert [p["sampling_seed"] for p in params] == list(range(100, 106))
    assert all(
        p["n"] == 1
        and p["temperature"] == 0.7
        and p["top_k"] == -1
        and p["stop_token_ids"] == [2]
        and p["max_new_tokens"] == 8
        and set(p) <= SGLANG_SAMPLING_FIELDS
        for p in params
    )
    greedy = sampling_params({**settings, "do_sample": False, "top_k": 5}, [2], None)
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == -1 and "sampling_seed" not in greedy


def _output(tokens, log_probs, finish):
    return {
        "text": "",
        "meta_info": {
            "finish_reason": finish,
            "output_token_logprobs": [(lp, t, None) for lp, t in zip(log_probs, tokens)],
        },
    }


def test_outputs_to_batch_layout_eos_padding_and_log_probs():
    eos, pad = 2, 0
    prompts, mask = torch.tensor([[0, 5], [6, 7]]), torch.tensor([[0, 1], [1, 1]])
    outputs = [
        _output([9, 2], [-0.1, -0.2], {"type": "stop", "matched": 2}),  # EOS after 1 token
        _output([9, 9, 9, 9, 9], [-0.3] * 5, {"type": "length", "length": 5}),  # longer than R: cut
        _output([4, 2, 8], [-0.4, -0.5, -0.6], {"type": "stop", "matched": 2}),  # defensive: cut after EOS
        _output([], [], {"type": "abort"}),
    ]
    t = outputs_to_batch(outputs, prompts, mask, n=2, response_length=4, pad_token_id=pad, stop_token_ids=[eos])
    assert t["responses"].tolist() == [[9, 2, 0, 0], [9, 9, 9, 9], [4, 2, 0, 0], [0, 0, 0, 0]]
    assert t["response_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert torch.allclose(
        t["rollout_log_probs"], torch.tensor([[-0.1, -0.2, 0, 0], [-0.3] * 4, [-0.4, -0.5, 0, 0], [0.0] * 4])
    )
    assert t["prompts"].tolist() == [[0, 5], [0, 5], [6, 7], [6, 7]]
    assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], 1))
    assert t["attention_mask"].tolist()[0] == [0, 1, 1, 1, 0, 0]
    assert t["position_ids"].tolist()[0] == [0, 0, 1, 2, 2, 2]
    with pytest.raises(RuntimeError, match="3 outputs for 4 requests"):
        outputs_to_batch(outputs[:3], prompts, mask, 2, 4, pad, [eos])
    with pytest.raises(RuntimeError, match="output_token_logprobs"):
        completion_of({"meta_info": {"finish_reason": None}})


# --- the strategy on the test double ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from roll.demo.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("sglang")
    torch.set_num_threads(1)
    base = build_tiny_model(str(root / "base"), WORDS, seed=3)
    return base, perturbed_copy(base, root / "trained", seed=1, eos_often=True)


@pytest.fixture
def make(monkeypatch):
    from roll.strategies import create_strategy

    engines = []

    def factory(**kwargs):
        engines.append(FakeSGLangEngine(**kwargs))
        return engines[-1]

    monkeypatch.setattr(sglang_infer, "create_engine", factory)

    def build(model_dir, name="sglang", config=None):
        strategy = create_strategy(name, StandInWorker(worker_config(model_dir, name, config)))
        strategy.initialize()
        return strategy

    build.engines = engines
    return build


def _weight_sync(monkeypatch, trainer, engine):
    from roll.pipeline.core import weight_sync as module

    probe = prompt_batch(trainer.strategy.model.config.vocab_size, rows=1, seed=123)
    return module.WeightSync(trainer, engine, probe), module.WeightSyncError


def test_pipeline_wiring_generate_sync_checksum_probe(models, make, monkeypatch):
    base, trained = models
    engine = make(
        base, config={"load_format": "dummy", "mem_fraction_static": 0.5, "model_update_buffer_size_mb": 0.05}
    )
    fake = make.engines[0]
    assert fake.server_args["model_path"] == str(base) and fake.server_args["mem_fraction_static"] == 0.5
    assert fake.server_args["dtype"] == "float32" and fake.server_args["random_seed"] == 0
    hf = make(trained, "hf_infer")
    batch = prompt_batch(hf.model.config.vocab_size)
    with pytest.raises(RuntimeError, match="load_format=dummy"):
        engine.generate(batch, {})

    sync, error_type = _weight_sync(monkeypatch, RoleDouble(hf), RoleDouble(engine))
    metrics = sync.sync_and_verify(step=0)  # the pipeline's initial sync: buckets, checksum, probe
    assert metrics["weight_sync/probe_max_abs_diff"] <= 1e-5
    assert engine.state_checksum() == pytest.approx(hf.state_checksum(), rel=1e-9)
    updates = [c for c in fake.calls if c[0] == "update_weights_from_tensor"]
    assert len(updates) > 1 and [c[3] for c in updates] == [False] * (len(updates) - 1) + [True]
    assert sorted(n for c in updates for n in c[1]) == sorted(dict(hf.model.named_parameters()))
    assert all(c[2] is None and c[4] == {torch.float32} for c in updates)

    greedy = {"do_sample": False, "num_return_sequences": 1}
    s_out, h_out = engine.generate(batch, greedy), hf.generate(batch, greedy)
    assert torch.equal(s_out.batch["responses"], h_out.batch["responses"])
    assert torch.equal(s_out.batch["response_mask"], h_out.batch["response_mask"])
    assert (s_out.batch["rollout_log_probs"] - h_out.batch["rollout_log_probs"]).abs().max() <= 1e-5

    batch.meta_info["seed"] = 11
    sampled = engine.generate(batch, {"temperature": 0.5})
    layout = layout_checks(batch, sampled, engine.pad_token_id, engine.eos_token_id)
    assert layout.pop("rows") == layout.pop("expected_rows") == len(batch) * N
    assert layout.pop("some_stopped_at_eos")
    assert all(layout.values()), layout
    scored = sampled.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
    scored.meta_info["temperature"] = 0.5
    assert (sampled.batch["rollout_log_probs"] - hf.compute_log_probs(scored)).abs().max() <= 1e-5
    assert torch.equal(engine.generate(batch, {"temperature": 0.5}).batch["responses"], sampled.batch["responses"])
    scored.meta_info["temperature"] = 1.0
    assert (engine.compute_log_probs(scored) - hf.compute_log_probs(scored)).abs().max() <= 1e-5
    scored.meta_info["temperature"] = 0.7
    with pytest.raises(ValueError, match="only 1.0"):
        engine.compute_log_probs(scored)

    # a skipped sync fails the pipeline's checks: the trainer moves on, the engine keeps the old weights
    with torch.no_grad():
        for p in hf.model.parameters():
            p.mul_(1.1)
    with pytest.raises(error_type, match="did not load the trained weights"):
        sync._check_checksums(1, [hf.state_checksum()])  # what the trainer sends now (fp32 both)
    with pytest.raises(error_type, match="stale or wrong weights"):
        sync._check_probe(step=1)
    assert sync.sync_and_verify(step=2)["weight_sync/probe_max_abs_diff"] <= 1e-5


def test_offload_reload_release_and_resume_memory(models, make, monkeypatch):
    base, _ = models
    engine = make(base)
    fake = make.engines[0]
    hf = make(base, "hf_infer")
    engine.offload()
    engine.offload()  # idempotent
    assert [c for c in fake.calls if "memory" in c[0]] == [("release_memory_occupation", None)]
    batch = prompt_batch(hf.model.config.vocab_size, rows=2)
    with pytest.raises(RuntimeError, match="released"):
        engine.generate(batch, {})
    with pytest.raises(RuntimeError, match="call reload\\(\\) first"):
        engine.load_weights(hf.model.named_parameters())
    engine.reload()
    assert fake.calls[-1] == ("resume_memory_occupation", None)
    with pytest.raises(RuntimeError, match="since offload"):  # SGLang dropped the weights: a sync must come first
        engine.generate(batch, {})
    sync, _ = _weight_sync(monkeypatch, RoleDouble(hf), RoleDouble(engine))
    sync.sync_and_verify(step=0)
    engine.shutdown()
    assert fake.calls[-1] == ("shutdown",)


def test_distributed_weight_update_calls(models, make):
    engine = make(models[0], config={"weight_update_mode": "distributed", "model_update_buffer_size_mb": 0.001})
    fake = make.engines[0]
    with pytest.raises(RuntimeError, match="init_weight_update_group first"):
        engine.update_weights_from_distributed([("a", "float32", (2,))])
    with pytest.raises(RuntimeError, match="pipeline does not drive yet"):
        engine.load_weights([])
    engine.init_weight_update_group("10.0.0.1", 29600, rank_offset=1, world_size=3, group_name="g")
    assert fake.calls[-1] == ("init_weights_update_group", "10.0.0.1", 29600, 1, 3, "g", "nccl")
    metas = [("a", "float32", (16, 16)), ("b", "bfloat16", (8,)), ("c", "float32", (4, 4))]  # 1024, 16, 64 bytes
    engine.update_weights_from_distributed(metas)  # buckets of ≤ 0.001 MB = 1048 bytes
    calls = [c for c in fake.calls if c[0] == "update_weights_from_distributed"]
    assert [c[1] for c in calls] == [["a", "b"], ["c"]]
    assert calls[0][2:] == (["float32", "bfloat16"], [[16, 16], [8]], "g", False)
    assert calls[1][2:] == (["float32"], [[4, 4]], "g", True)  # only the last bucket flushes the cache


def test_sglang_request_generation_and_abort(models, make, monkeypatch):
    base, _ = models
    engine = make(base)
    hf = make(base, "hf_infer")
    prompt = prompt_batch(hf.model.config.vocab_size, rows=1, seed=4)
    ids = prompt.batch["prompts"][0][prompt.batch["attention_mask"][0].bool()].tolist()
    result = engine.generate_request("r1", ids, {"do_sample": False, "max_new_tokens": 6})
    reference = hf.generate_request("h1", ids, {"do_sample": False, "max_new_tokens": 6})
    assert result.token_ids == reference.token_ids and result.finish_reason == reference.finish_reason
    assert max(abs(a - b) for a, b in zip(result.log_probs, reference.log_probs)) <= 1e-5
    assert engine.abort_request("r1") is False and engine.abort_request("unknown") is False

    fake = make.engines[0]
    fake.on_token = lambda rid, count: count == 2 and engine.abort_request(rid)  # abort mid-flight
    aborted = engine.generate_request("r2", ids, {"do_sample": True, "max_new_tokens": 8, "seed": 3})
    assert aborted.finish_reason == "abort" and len(aborted.token_ids) == 2 and len(aborted.log_probs) == 2
    assert "r2" in fake.tokenizer_manager.aborted and engine.abort_request("r2") is False
    with pytest.raises(ValueError, match="unknown request sampling keys \\['n'\\]"):
        engine.generate_request("r3", ids, {"n": 2})


# --- hf_infer request-level generation, for real -----------------------------------------------------------------
def test_hf_infer_request_matches_batched_generate_and_aborts(models, make):
    _, trained = models
    hf = make(trained, "hf_infer")
    batch = prompt_batch(hf.model.config.vocab_size, rows=4, seed=5)
    greedy = hf.generate(batch, {"do_sample": False, "num_return_sequences": 1})
    for row in range(4):
        ids = batch.batch["prompts"][row][batch.batch["attention_mask"][row].bool()].tolist()
        result = hf.generate_request(f"q{row}", ids, {"do_sample": False})
        length = int(greedy.batch["response_mask"][row].sum())
        assert result.token_ids == greedy.batch["responses"][row, :length].tolist()
        assert (
            max(abs(a - b) for a, b in zip(result.log_probs, greedy.batch["rollout_log_probs"][row, :length])) <= 1e-5
        )
        assert result.finish_reason == ("stop" if result.token_ids[-1] == hf.eos_token_id else "length")
    seeded = [hf.generate_request("s", ids, {"seed": 7}).token_ids for _ in range(2)]
    assert seeded[0] == seeded[1]

    forwards = []

    def hook(module, args, output):  # abort from inside generation, after the 3rd forward (3 tokens)
        forwards.append(1)
        if len(forwards) == 3:
            assert hf.abort_request("long")

    handle = hf.model.register_forward_hook(hook)
    try:
        result = hf.generate_request("long", ids, {"max_new_tokens": 8, "seed": 1})
    finally:
        handle.remove()
    assert result.finish_reason in ("abort", "stop") and len(result.token_ids) <= 3
    assert hf.abort_request("long") is False  # finished: no-op


def test_hf_infer_abort_from_another_thread(models, make):
    hf = make(models[0], "hf_infer")
    started = threading.Event()

    def hook(module, args, output):
        started.set()
        import time

        time.sleep(0.01)

    handle = hf.model.register_forward_hook(hook)
    results = {}
    worker = threading.Thread(
        target=lambda: results.update(r=hf.generate_request("t", [5, 6, 7], {"max_new_tokens": 200}))
    )
    worker.start()
    assert started.wait(30)
    assert hf.abort_request("t")
    worker.join(60)
    handle.remove()
    assert results["r"].finish_reason in ("abort", "stop") and len(results["r"].token_ids) < 200


def test_hf_infer_requests_of_one_call_are_one_batch_each_row_on_its_own(models, make):
    _, trained = models
    hf = make(trained, "hf_infer")
    batch = prompt_batch(hf.model.config.vocab_size, rows=4, seed=5)
    prompts = [batch.batch["prompts"][r][batch.batch["attention_mask"][r].bool()].tolist() for r in range(4)]
    alone = [hf.generate_request(f"a{r}", p, {"do_sample": False}) for r, p in enumerate(prompts)]
    limits = [8, 3, 8, 2]  # a resumed request has fewer tokens left than the others
    together = hf.generate_requests(
        [(f"b{r}", p, {"do_sample": False, "max_new_tokens": limits[r]}) for r, p in enumerate(prompts)]
    )
    assert [t.request_id for t in together] == ["b0", "b1", "b2", "b3"]
    for t, a, limit in zip(together, alone, limits):
        assert t.token_ids == a.token_ids[:limit] and len(t.log_probs) == len(t.token_ids) <= limit
        assert max((abs(x - y) for x, y in zip(t.log_probs, a.log_probs)), default=0.0) <= 1e-5
        assert t.finish_reason == ("stop" if t.token_ids[-1] == hf.eos_token_id else "length")

    forwards = []

    def hook(module, args, output):  # abort one row of the batch after 2 tokens; the other row runs on
        forwards.append(1)
        if len(forwards) == 2:
            assert hf.abort_request("cut")

    handle = hf.model.register_forward_hook(hook)
    try:
        cut, full = hf.generate_requests(
            [("cut", prompts[0], {"max_new_tokens": 30, "seed": 1}), ("full", prompts[0], {"max_new_tokens": 30})]
        )
    finally:
        handle.remove()
    assert cut.finish_reason in ("abort", "stop") and len(cut.token_ids) <= 2
    assert len(full.token_ids) > 2 or full.finish_reason == "stop"
    with pytest.raises(ValueError, match="share their sampling settings"):
        hf.generate_requests([("x", prompts[0], {"do_sample": False}), ("y", prompts[0], {"do_sample": True})])


def test_request_samples_are_laid_out_as_the_batched_generate_lays_them_out(models, make):
    """The request-level rollout (generate_opt_level 1) builds its training batch from RequestResults with
    samples_to_batch: for the same greedy replies it must give the batched `generate`'s tensors."""
    from roll.pipeline.rlvr.rollout.requests import Sample, samples_to_batch

    hf = make(models[1], "hf_infer")
    batch = prompt_batch(hf.model.config.vocab_size, rows=4, seed=5)
    width = hf.config.generating_args.max_new_tokens
    greedy = hf.generate(batch, {"do_sample": False, "num_return_sequences": 1})
    for row in range(4):
        ids = batch.batch["prompts"][row][batch.batch["attention_mask"][row].bool()].tolist()
        (result,) = hf.generate_requests([(f"r{row}", ids, {"do_sample": False})])
        sample = Sample(ids, result.token_ids, result.log_probs, [0] * len(result.token_ids), done=True)
        built = samples_to_batch([sample], batch[[row]], width, hf.pad_token_id)
        expected = greedy[[row]]
        for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
            assert torch.equal(built.batch[key].to(expected.batch[key].dtype), expected.batch[key]), (row, key)
        diff = (built.batch["rollout_log_probs"] - expected.batch["rollout_log_probs"]).abs().max().item()
        assert diff <= 1e-5, (row, diff)
