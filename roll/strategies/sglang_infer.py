"""`sglang`: rollouts with SGLang's offline engine (`sglang.Engine`). UNVERIFIED HERE: SGLang has no CPU
build these machines can run, so the engine itself was never started by this project; every part that
does not need it is unit-tested against a test double (tests/strategies/test_sglang.py).

API matched (read in SGLang's own source, sgl-project/sglang: python/sglang/srt/entrypoints/engine.py,
srt/sampling/sampling_params.py, srt/managers/tokenizer_manager.py, srt/model_executor/model_runner.py;
the 0.5.x line — version.py of a stored snapshot says 0.5.3rc2, engine.py read at a later main commit):
  Engine(**ServerArgs fields)          model_path, tp_size, mem_fraction_static, dtype, random_seed, ...
  Engine.generate(input_ids=[[...]], sampling_params=[{...}], return_logprob=True, logprob_start_len=...,
                  rid=[...]) -> list of {"meta_info": {"output_token_logprobs": [(logprob, token_id, text|None)],
                  "input_token_logprobs": [...], "finish_reason": {"type": "stop"|"length"|"abort", ...}, "id": rid}}
  sampling_params keys                 max_new_tokens, temperature (0 = greedy), top_p, top_k (-1 = off), n,
                                       stop_token_ids, sampling_seed, ignore_eos, no_stop_trim
  Engine.update_weights_from_tensor(named_tensors, load_format=None, flush_cache=True) -> (success, message)
  Engine.init_weights_update_group(master_address, master_port, rank_offset, world_size, group_name, backend)
  Engine.update_weights_from_distributed(names, dtypes, shapes, group_name, flush_cache, load_format)
  Engine.get_weights_by_name(name, truncate_size) -> nested list, first `truncate_size` rows
  Engine.release_memory_occupation(tags=None) / resume_memory_occupation(tags=None), flush_cache(), shutdown()
  Engine.tokenizer_manager.abort_request(rid="", abort_all=False) (the Engine itself has no abort method there)

Same batch layout as `hf_infer` / `vllm` (docs/contracts.md). Rollout log-probs: SGLang's sampler returns
log(softmax(logits / temperature)) of the sampled token — temperature-scaled, before top-k/top-p filtering
(so with top_k/top_p on it differs from `vllm`'s processed log-probs; keep them off for exact on-policy).

Every sample is its own request (n = 1, `num_return_sequences` copies of each prompt, adjacent), so each
gets its own `sampling_seed` (one seeded request with n > 1 would repeat the same sample) and the layout
does not depend on how SGLang orders the expansion of n. The radix cache shares the prompt prefill.

`strategy_config` keys (anything else is an error listing these):
  engine (passed to sglang.Engine): ENGINE_KEYS below
  roll: model_update_buffer_size_mb (bucket size of a weight update, default 512),
        weight_update_mode ("tensor": in-process hand-off through update_weights_from_tensor, colocated or
        fed by the Ray object store — the pipeline's path; "distributed": a collective group, see
        init_weight_update_group / update_weights_from_distributed — not wired into the pipeline yet)
"""

import time

import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.base import InferenceStrategy, RequestResult, buckets
from roll.utils.functional import rollout_tensors

ENGINE_KEYS = {
    "mem_fraction_static": float,
    "tp_size": int,
    "dtype": str,
    "max_running_requests": int,
    "max_total_tokens": int,
    "context_length": int,
    "chunked_prefill_size": int,
    "max_prefill_tokens": int,
    "disable_radix_cache": bool,
    "disable_cuda_graph": bool,
    "enable_memory_saver": bool,
    "attention_backend": str,
    "load_format": str,
    "random_seed": int,
    "base_gpu_id": int,
    "log_level": str,
}
ROLL_KEYS = {"model_update_buffer_size_mb": float, "weight_update_mode": str}
WEIGHT_UPDATE_MODES = ("tensor", "distributed")
DEFAULT_BUFFER_MB = 512.0
SEED_STRIDE = 2**20  # per-request seeds: base + prompt_index * n + sample_index


def create_engine(**kwargs):
    """The real engine; sglang is imported here only (the module imports without it). Tests replace this."""
    import sglang

    return sglang.Engine(**kwargs)


def _type_ok(value, expected) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, expected) and not isinstance(value, bool)


def validate_strategy_config(config: dict | None, model_dtype: str) -> tuple[dict, dict]:
    """(engine kwargs, roll settings) from strategy_config; unknown keys, wrong types or values are errors."""
    config = dict(config or {})
    valid = {**ENGINE_KEYS, **ROLL_KEYS}
    unknown = sorted(set(config) - set(valid))
    if unknown:
        raise ValueError(f"sglang: unknown strategy_config keys {unknown}; valid keys: {sorted(valid)}")
    for key, value in config.items():
        if not _type_ok(value, valid[key]):
            raise ValueError(f"sglang: strategy_config.{key} = {value!r} must be of type {valid[key].__name__}")
    if "mem_fraction_static" in config and not 0 < config["mem_fraction_static"] <= 1:
        raise ValueError(
            f"sglang: strategy_config.mem_fraction_static = {config['mem_fraction_static']} must be in (0, 1]"
        )
    if config.get("tp_size", 1) < 1:
        raise ValueError("sglang: strategy_config.tp_size must be >= 1")
    if config.setdefault("dtype", model_dtype) != model_dtype:
        raise ValueError(
            f"sglang: strategy_config.dtype = {config['dtype']!r} differs from model_args.dtype = "
            f"{model_dtype!r}; the trainer and the sync check use model_args.dtype — set that instead"
        )
    roll = {
        "model_update_buffer_size_mb": float(config.pop("model_update_buffer_size_mb", DEFAULT_BUFFER_MB)),
        "weight_update_mode": config.pop("weight_update_mode", "tensor"),
    }
    if roll["model_update_buffer_size_mb"] <= 0:
        raise ValueError("sglang: strategy_config.model_update_buffer_size_mb must be > 0")
    if roll["weight_update_mode"] not in WEIGHT_UPDATE_MODES:
        raise ValueError(
            f"sglang: strategy_config.weight_update_mode = {roll['weight_update_mode']!r}; "
            f"valid: {list(WEIGHT_UPDATE_MODES)}"
        )
    config.setdefault("random_seed", 0)
    config.setdefault(
        "enable_memory_saver", True
    )  # release/resume_memory_occupation free real memory (verl does the same)
    config.setdefault("log_level", "error")
    return config, roll


def sampling_params(settings: dict, stop_token_ids: list[int], seed: int | None) -> dict:
    """One request's SGLang sampling_params dict (always n = 1) from roll's generation settings."""
    greedy = not settings["do_sample"]
    params = {
        "max_new_tokens": int(settings["max_new_tokens"]),
        "n": 1,
        "temperature": 0.0 if greedy else float(settings["temperature"]),
        "top_p": 1.0 if greedy else float(settings["top_p"]),
        "top_k": -1 if greedy or not settings["top_k"] else int(settings["top_k"]),
        "repetition_penalty": float(settings.get("repetition_penalty", 1.0)),
        "stop_token_ids": list(stop_token_ids),
        "ignore_eos": False,
        "no_stop_trim": True,
    }
    if settings.get("stop_strings"):
        params["stop"] = list(settings["stop_strings"])
    if seed is not None:
        params["sampling_seed"] = int(seed)
    return params


def build_requests(
    prompts: torch.Tensor, prompt_mask: torch.Tensor, settings: dict, stop_token_ids: list[int], base_seed: int | None
) -> tuple[list[list[int]], list[dict]]:
    """input_ids and sampling_params of the B * n requests, row i * n + j = sample j of prompt i."""
    n = settings["num_return_sequences"]
    input_ids, params = [], []
    for i, (row, keep) in enumerate(zip(prompts, prompt_mask)):
        ids = row[keep.bool()].tolist()
        for j in range(n):
            input_ids.append(ids)
            params.append(
                sampling_params(settings, stop_token_ids, None if base_seed is None else base_seed + i * n + j)
            )
    return input_ids, params


def completion_of(output: dict) -> tuple[list[int], list[float], str]:
    """(token ids, log-probs, finish type) of one SGLang generate output, from meta_info["output_token_logprobs"]
    (one (logprob, token_id, text) entry per generated token, the stop token included)."""
    meta = output["meta_info"]
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise RuntimeError(
            "sglang: the output has no meta_info['output_token_logprobs'] (return_logprob=True was not honoured)"
        )
    finish = meta.get("finish_reason") or {}
    return [int(e[1]) for e in entries], [float(e[0]) for e in entries], finish.get("type", "length")


def outputs_to_batch(
    outputs: list[dict],
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    n: int,
    response_length: int,
    pad_token_id: int,
    stop_token_ids: list[int],
) -> dict:
    """The contract's tensors (docs/contracts.md) from B * n outputs in request order."""
    rows = len(prompts) * n
    if len(outputs) != rows:
        raise RuntimeError(f"sglang: {len(outputs)} outputs for {rows} requests")
    responses = torch.full((rows, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros(rows, response_length)
    log_probs = torch.zeros(rows, response_length)
    stops = set(stop_token_ids)
    for row, output in enumerate(outputs):
        ids, lps, _ = completion_of(output)
        for k, token in enumerate(ids):  # up to and including the first stop token (defensive: SGLang stops there)
            if token in stops:
                ids, lps = ids[: k + 1], lps[: k + 1]
                break
        ids, lps = ids[:response_length], lps[:response_length]
        if ids:
            responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_mask[row, : len(ids)] = 1.0
            log_probs[row, : len(ids)] = torch.tensor(lps, dtype=torch.float32)
    return rollout_tensors(prompts, prompt_mask, responses, response_mask, log_probs, n)


def _check_update(result, what: str) -> None:
    """SGLang's weight-update calls return (success, message); a failure must not pass silently."""
    if isinstance(result, tuple) and result and result[0] is False:
        raise RuntimeError(f"sglang: {what} failed: {result[1] if len(result) > 1 else result}")


class SGLangInferStrategy(InferenceStrategy):
    roles = frozenset({"generate"})  # compute_log_probs works at temperature 1.0 only: not a reference role
    rollout_log_probs = True
    stop_strings = True
    vision_language_limit = "the sglang strategy sends token ids only (no image_data path is written)"

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        validate_strategy_config(strategy_config, dtype)

    def initialize(self, total_steps: int = 0) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

        args = self.config.model_args
        engine_kwargs, self.settings = validate_strategy_config(self.config.strategy_args.strategy_config, args.dtype)
        path = args.model_name_or_path
        gen = GenerationConfig.from_pretrained(path)
        eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
        self.stop_token_ids = [int(t) for t in eos if t is not None]
        self.eos_token_id = self.stop_token_ids[0]
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else self.eos_token_id
        # HF parameter names and shapes (meta device: no memory) for state_checksum's get_weights_by_name
        with torch.device("meta"):
            meta_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
        self.param_shapes = {name: tuple(p.shape) for name, p in meta_model.named_parameters()}
        self.load_format = engine_kwargs.get("load_format", "auto")
        started = time.perf_counter()
        self.engine = create_engine(model_path=path, **engine_kwargs)
        self.weights_loaded = self.load_format != "dummy"
        self.released = False
        self.logger.info("SGLang engine up in %.1f s: %s", time.perf_counter() - started, engine_kwargs)

    @property
    def module(self) -> torch.nn.Module:
        raise NotImplementedError("sglang: the model lives inside the engine; use load_weights / state_checksum")

    def _check_ready(self) -> None:
        if self.released:
            raise RuntimeError("sglang: the engine's memory is released (offload() without reload())")
        if not self.weights_loaded:
            raise RuntimeError(
                "sglang: no weights since start (load_format=dummy) or since offload(): "
                "call load_weights first (the pipeline syncs before every rollout)"
            )

    # --- generation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, batch: DataProto, generation_config: dict) -> DataProto:
        self._check_ready()
        settings = self.sampling_settings(generation_config)
        prompts = batch.batch["prompts"]
        prompt_mask = batch.batch["attention_mask"][:, : prompts.shape[1]]
        seed = batch.meta_info.get("seed")
        # folded below 2**63 as in vllm_infer: agentic rollouts pass large per-turn seeds
        base = None if seed is None else (int(seed) * 1009 + self.rank) * SEED_STRIDE % 2**63
        input_ids, params = build_requests(prompts, prompt_mask, settings, self.stop_token_ids, base)
        outputs = self.engine.generate(input_ids=input_ids, sampling_params=params, return_logprob=True)
        n = settings["num_return_sequences"]
        out = DataProto.from_dict(
            tensors=outputs_to_batch(
                outputs, prompts, prompt_mask, n, settings["max_new_tokens"], self.pad_token_id, self.stop_token_ids
            )
        )
        for key, values in batch.non_tensor_batch.items():
            out.non_tensor_batch[key] = values.repeat(n)
        out.meta_info = dict(batch.meta_info)
        return out

    # --- request-level generation ---------------------------------------------------------------------
    @torch.no_grad()
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """One request through Engine.generate(rid=request_id). abort_request from another thread schedules
        tokenizer_manager.abort_request(rid) on the engine's event loop (thread-safe); the engine then
        finishes the request with finish_reason type "abort" and this returns the tokens so far."""
        self._check_ready()
        settings = self.sampling_settings(sampling, request=True)
        seed = settings["seed"]
        params = sampling_params(settings, self.stop_token_ids, seed)
        self._begin_request(request_id)
        try:
            output = self.engine.generate(
                input_ids=list(prompt_ids), sampling_params=params, return_logprob=True, rid=request_id
            )
        finally:
            aborted = self._end_request(request_id)
        ids, lps, finish = completion_of(output)
        if finish == "stop" and ids and ids[-1] in self.stop_token_ids:
            reason = "stop"
        else:
            reason = "abort" if aborted or finish == "abort" else "length"
        return RequestResult(request_id, ids, lps, reason)

    def _abort_in_engine(self, request_id: str) -> None:
        manager = self.engine.tokenizer_manager
        self.engine.loop.call_soon_threadsafe(lambda: manager.abort_request(rid=request_id))

    # --- scoring ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        """log-probs of `responses` from SGLang's input-token log-probs (logprob_start_len=0: entry k is the
        log-prob of token k given the tokens before it). Whether SGLang scales those by a request's
        temperature is not verified here, so only temperature 1.0 is accepted (the sync probe's)."""
        self._check_ready()
        temperature = batch.meta_info.get("temperature", 1.0)
        if temperature != 1.0:
            raise ValueError(
                f"sglang: compute_log_probs at temperature {temperature}: only 1.0 is supported; "
                f"score with hf_infer / deepspeed_infer"
            )
        responses, response_mask = batch.batch["responses"], batch.batch["response_mask"]
        prompt_width = batch.batch["input_ids"].shape[1] - responses.shape[1]
        mask = batch.batch["attention_mask"]
        sequences = [row[keep.bool()].tolist() for row, keep in zip(batch.batch["input_ids"], mask)]
        starts = mask[:, :prompt_width].sum(dim=1).tolist()
        params = {"max_new_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "n": 1}
        outputs = self.engine.generate(
            input_ids=sequences,
            sampling_params=[dict(params) for _ in sequences],
            return_logprob=True,
            logprob_start_len=0,
        )
        log_probs = torch.zeros(responses.shape)
        for row, (output, ids, start) in enumerate(zip(outputs, sequences, starts)):
            entries = output["meta_info"]["input_token_logprobs"]
            if len(entries) != len(ids):
                raise RuntimeError(f"sglang: {len(entries)} input log-probs for {len(ids)} input tokens")
            for k in range(start, len(ids)):
                log_probs[row, k - start] = float(entries[k][0])
        return log_probs * response_mask

    def compute_values(self, batch: DataProto) -> torch.Tensor:
        raise NotImplementedError("sglang cannot compute critic values; use a training strategy for the critic")

    # --- weights ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        """The trainer's HF-named tensors into the engine, bucket by bucket (model_update_buffer_size_mb),
        through update_weights_from_tensor; the KV/radix cache is flushed with the last bucket."""
        if self.released:
            raise RuntimeError("sglang: load_weights while the engine's memory is released; call reload() first")
        if self.settings["weight_update_mode"] != "tensor":
            raise RuntimeError(
                "sglang: weight_update_mode=distributed: weights arrive through "
                "init_weight_update_group / update_weights_from_distributed, which the pipeline does "
                "not drive yet; use weight_update_mode=tensor (the default)"
            )
        started = time.perf_counter()
        dtype = getattr(torch, self.config.model_args.dtype)
        limit = self.settings["model_update_buffer_size_mb"] * 2**20
        stats = {"tensors": 0, "bytes": 0, "buckets": 0}
        pending = None
        for bucket in buckets(named_tensors, limit):
            converted = [(name, tensor.detach().to(dtype).contiguous()) for name, tensor in bucket]
            if pending is not None:  # send the previous bucket; only the last one flushes the cache
                _check_update(
                    self.engine.update_weights_from_tensor(named_tensors=pending, load_format=None, flush_cache=False),
                    "update_weights_from_tensor",
                )
            pending = converted
            stats["buckets"] += 1
            stats["tensors"] += len(converted)
            stats["bytes"] += sum(t.numel() * t.element_size() for _, t in converted)
        if pending is not None:
            _check_update(
                self.engine.update_weights_from_tensor(named_tensors=pending, load_format=None, flush_cache=True),
                "update_weights_from_tensor",
            )
        self.weights_loaded = True
        self.logger.info(
            "loaded %d tensors (%.1f MB) in %d buckets in %.2f s",
            stats["tensors"],
            stats["bytes"] / 2**20,
            stats["buckets"],
            time.perf_counter() - started,
        )

    def init_weight_update_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str = "roll_weight_sync",
        backend: str = "nccl",
    ) -> None:
        """Separated roles: join the collective group the trainer broadcasts on (trainer rank 0 + engine ranks
        from rank_offset). Not wired into the pipeline yet; unverified here."""
        _check_update(
            self.engine.init_weights_update_group(
                master_address=master_address,
                master_port=master_port,
                rank_offset=rank_offset,
                world_size=world_size,
                group_name=group_name,
                backend=backend,
            ),
            "init_weights_update_group",
        )
        self.group_name = group_name

    def update_weights_from_distributed(self, metas) -> None:
        """Receive tensors the trainer broadcasts on the group, described by (name, dtype name, shape) in
        broadcast order, bucket by bucket (the trainer must broadcast with the same bucketing)."""
        if self.released:
            raise RuntimeError("sglang: weight update while the engine's memory is released; call reload() first")
        if self.settings["weight_update_mode"] != "distributed" or getattr(self, "group_name", None) is None:
            raise RuntimeError(
                "sglang: update_weights_from_distributed needs weight_update_mode=distributed and "
                "init_weight_update_group first"
            )
        limit = self.settings["model_update_buffer_size_mb"] * 2**20
        metas = list(metas)
        groups, group, size = [], [], 0
        for name, dtype, shape in metas:
            nbytes = torch.Size(shape).numel() * getattr(torch, dtype).itemsize
            if group and size + nbytes > limit:
                groups.append(group)
                group, size = [], 0
            group.append((name, dtype, list(shape)))
            size += nbytes
        if group:
            groups.append(group)
        for index, group in enumerate(groups):
            _check_update(
                self.engine.update_weights_from_distributed(
                    names=[m[0] for m in group],
                    dtypes=[m[1] for m in group],
                    shapes=[m[2] for m in group],
                    group_name=self.group_name,
                    flush_cache=index == len(groups) - 1,
                ),
                "update_weights_from_distributed",
            )
        self.weights_loaded = True

    def state_checksum(self) -> float:
        """Σ (Σp + Σp²) in float64 over the engine's weights, read back by HF name with get_weights_by_name
        (full tensors: slow, fine for the sync check of a small model; TP > 1 unverified)."""
        total = 0.0
        for name, shape in self.param_shapes.items():
            values = self.engine.get_weights_by_name(name, truncate_size=max(shape[0] if shape else 1, 1))
            if values is None:
                raise RuntimeError(f"sglang: get_weights_by_name({name!r}) returned nothing")
            p = torch.tensor(values, dtype=torch.float64)
            total += p.sum().item() + (p * p).sum().item()
        return total

    # --- memory ---------------------------------------------------------------------------------------------
    def offload(self) -> None:
        """release_memory_occupation(): weights and KV cache leave the GPU (enable_memory_saver). SGLang does not
        keep the released weights, so generation is refused until reload() and the next load_weights."""
        if not self.released:
            self.engine.release_memory_occupation()
            self.released = True
            self.weights_loaded = False

    def reload(self) -> None:
        if self.released:
            self.engine.resume_memory_occupation()
            self.released = False

    def shutdown(self) -> None:
        self.engine.shutdown()
