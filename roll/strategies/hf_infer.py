"""`hf_infer`: batched sampling with transformers' `generate` (KV cache, left-padded prompts).

Rollout log-probs are taken from the scores `generate` samples from: the temperature-scaled
logits, after top-k/top-p filtering when those are on. The trainer's log-probs use the same
temperature without filtering, so keep top_k=0 and top_p=1.0 for exact on-policy log-probs
(the defaults); filtering shows up as mismatch in the `mismatch/*` metrics.

strategy_config (optional):
    cache_implementation   null (default): transformers' dynamic KV cache, generating from the batch's longest
                           prompt. "static": a preallocated cache of prompt_length + max_new_tokens positions and
                           every prompt at its padded width, so each batch of one size has the same shapes; on a
                           GPU transformers then compiles the decode step (torch.compile, CUDA graphs), compiled
                           once per batch size. The same samples and log-probs as the dynamic cache up to float
                           rounding (tests/strategies/test_hf_infer_static_cache.py); request-level generation
                           (generate_request) keeps the dynamic cache.
    keep_resident          false (default); true: the weights stay on the GPU while colocated roles run (no
                           offload/reload around their phases: for a GPU with memory for every role at once;
                           compiled decode steps keep their weights' addresses)
"""

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from roll.distributed.data_proto import DataProto
from roll.models.vl import is_vl_config, vision_placeholder_ids
from roll.strategies.base import InferenceStrategy, RequestResult
from roll.strategies.batching import real_columns
from roll.strategies.vl_forward import is_vl_batch, prompt_vision_inputs
from roll.utils.functional import rollout_tensors

CACHE_IMPLEMENTATIONS = (None, "dynamic", "static")
KEYS = ("cache_implementation", "keep_resident")


def response_mask_from(responses: torch.Tensor, eos_token_id: int, generated_length: int) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS, 0 after it and on padding."""
    is_eos = (responses == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=-1) - is_eos) > 0
    in_range = torch.arange(responses.shape[1]).unsqueeze(0) < generated_length
    return (~after_eos & in_range).float()


class HFInferStrategy(InferenceStrategy):
    roles = frozenset({"generate", "score"})
    rollout_log_probs = True
    log_prob_kernels = "transformers"  # the HF module's own forward (generate's KV-cached decode, hf_logits)
    sum_pi_squared = True
    dynamic_batching_infer = True
    sequence_packing = True
    vision_language = True  # pixel values into generate and the forwards (roll/strategies/vl_forward.py)

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        config = dict(strategy_config or {})
        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            raise ValueError(f"hf_infer: unknown strategy_config keys {unknown}; valid: {list(KEYS)}")
        if config.get("cache_implementation") not in CACHE_IMPLEMENTATIONS:
            raise ValueError(
                f"hf_infer: strategy_config.cache_implementation = {config['cache_implementation']!r}; valid: "
                f"{list(CACHE_IMPLEMENTATIONS)} (null = dynamic)"
            )
        if not isinstance(config.get("keep_resident", False), bool):
            raise ValueError(f"hf_infer: strategy_config.keep_resident = {config['keep_resident']!r}: true or false")

    def initialize(self, total_steps: int = 0) -> None:
        super().initialize(total_steps)
        config = self.config.strategy_args.strategy_config or {}
        self.static_cache = config.get("cache_implementation") == "static"
        gen = self.model.generation_config
        self.eos_token_id = gen.eos_token_id if isinstance(gen.eos_token_id, int) else gen.eos_token_id[0]
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else self.eos_token_id
        # a VL model's image/video placeholders are never sampled: the training forward would look for vision
        # features at them (roll/strategies/vl_forward.py)
        model_config = self.model.config
        self.banned_token_ids = vision_placeholder_ids(model_config) if is_vl_config(model_config) else []

    def offload_frees_memory(self) -> bool:
        """strategy_config.keep_resident: the pipeline never offloads this role (see the module docstring)."""
        keep = (self.config.strategy_args.strategy_config or {}).get("keep_resident", False)
        return not keep and super().offload_frees_memory()

    @staticmethod
    def _generate_kwargs(settings: dict) -> dict:
        """`generate` keyword arguments from sampling_settings (greedy: no sampling knobs, as HF expects)."""
        # stop_strings: refused for hf_infer by the config checks (StrategyCapability stop_strings)
        kwargs = {key: value for key, value in settings.items() if key not in ("seed", "stop_strings")}
        if not kwargs["do_sample"]:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if kwargs.get("repetition_penalty") == 1.0:
            del kwargs["repetition_penalty"]  # off: keep HF's logits processors (and log-probs) untouched
        return kwargs

    @torch.no_grad()
    def generate(self, batch: DataProto, generation_config: dict) -> DataProto:
        kwargs = self._generate_kwargs(self.sampling_settings(generation_config))
        if batch.meta_info.get("seed") is not None:
            torch.manual_seed(int(batch.meta_info["seed"]) * 1009 + self.rank)
        n, response_length = kwargs["num_return_sequences"], kwargs["max_new_tokens"]
        parts = [self._generate_chunk(chunk, kwargs, response_length) for chunk in self._micro_batches(batch)]
        out = DataProto.concat(parts)
        for key, values in batch.non_tensor_batch.items():
            out.non_tensor_batch[key] = values.repeat(n)
        out.meta_info = dict(batch.meta_info)
        return out

    def _generate_chunk(self, chunk: DataProto, kwargs: dict, response_length: int) -> DataProto:
        prompts, prompt_mask = chunk.batch["prompts"], chunk.batch["attention_mask"]
        # generate from the chunk's longest prompt: the left-padding columns every prompt has (prompt_length is a
        # maximum) would be attended to, masked, at every new token; positions come from the mask either way.
        # A static cache keeps the padded width instead: the same shapes every batch, nothing to recompile
        first = 0 if self.static_cache else real_columns(prompt_mask).start
        if self.static_cache:
            kwargs = {**kwargs, "cache_implementation": "static"}
        vision = {}
        if is_vl_batch(chunk):  # pixel values, grids and token types: generate computes the prompt's M-RoPE ids
            vision = prompt_vision_inputs(
                self.model, prompts[:, first:], chunk.non_tensor_batch["multi_modal_inputs"], self.device
            )
        if self.banned_token_ids:
            vision["suppress_tokens"] = self.banned_token_ids
        output = self.model.generate(
            input_ids=prompts[:, first:].to(self.device),
            attention_mask=prompt_mask[:, first:].to(self.device),
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
            use_cache=True,
            **vision,
            **kwargs,
        )
        generated = output.sequences[:, prompts.shape[1] - first :].cpu()
        length = generated.shape[1]
        responses = torch.full((generated.shape[0], response_length), self.pad_token_id, dtype=torch.long)
        responses[:, :length] = generated
        response_mask = response_mask_from(responses, self.eos_token_id, length)
        responses[response_mask == 0] = self.pad_token_id
        log_probs = torch.zeros(responses.shape, dtype=torch.float32)
        if length:
            scores = torch.stack(output.scores, dim=1).float().cpu()  # (rows, length, vocab), as sampled from
            log_probs[:, :length] = torch.gather(scores.log_softmax(-1), -1, generated.unsqueeze(-1)).squeeze(-1)
        n = kwargs["num_return_sequences"]
        tensors = rollout_tensors(prompts, prompt_mask, responses, response_mask, log_probs * response_mask, n)
        return DataProto.from_dict(tensors=tensors)

    # --- request-level generation (synchronous; abort from another thread stops at the next token) ---------
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """One sample for one prompt with `generate`. abort_request(request_id) from another thread (or from
        a callback during generation) stops it after the current token; aborting an unknown or finished id
        is a no-op returning False (see InferenceStrategy.abort_request)."""
        return self.generate_requests([(request_id, prompt_ids, sampling)])[0]

    @torch.no_grad()
    def generate_requests(self, requests: list[tuple[str, list[int], dict | None]]) -> list[RequestResult]:
        """The requests as one left-padded `generate` batch; each row stops at its EOS, its own max_new_tokens
        or its abort. The requests must share their sampling settings apart from max_new_tokens and seed (a
        batch has one random stream: the first request's seed seeds it)."""
        settings = [self.sampling_settings(sampling, request=True) for _, _, sampling in requests]
        shared = [{k: v for k, v in s.items() if k not in ("max_new_tokens", "seed")} for s in settings]
        if any(s != shared[0] for s in shared):
            raise ValueError(
                "hf_infer.generate_requests: requests of one call must share their sampling settings apart from "
                f"max_new_tokens and seed; got {shared[0]} and {next(s for s in shared if s != shared[0])}"
            )
        limits = [s["max_new_tokens"] for s in settings]
        kwargs = self._generate_kwargs({**settings[0], "max_new_tokens": max(limits)})
        ids = [request_id for request_id, _, _ in requests]
        for request_id in ids:
            self._begin_request(request_id)
        try:
            if settings[0]["seed"] is not None:
                torch.manual_seed(int(settings[0]["seed"]))
            width = max(len(prompt) for _, prompt, _ in requests)
            prompt = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(prompt)
            for row, (_, prompt_ids, _) in enumerate(requests):
                prompt[row, width - len(prompt_ids) :] = torch.tensor(list(prompt_ids), dtype=torch.long)
                mask[row, width - len(prompt_ids) :] = 1
            stop = _AbortCriterion(lambda: [self._is_aborted(request_id) for request_id in ids], width)
            output = self.model.generate(
                input_ids=prompt.to(self.device),
                attention_mask=mask.to(self.device),
                eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id,
                output_scores=True,
                return_dict_in_generate=True,
                use_cache=True,
                stopping_criteria=StoppingCriteriaList([stop]),
                **({"suppress_tokens": self.banned_token_ids} if self.banned_token_ids else {}),
                **kwargs,
            )
        finally:
            aborted = [self._end_request(request_id) for request_id in ids]
        generated = output.sequences[:, width:].cpu()
        log_probs = (
            torch.gather(torch.stack(output.scores, dim=1).float().cpu().log_softmax(-1), -1, generated.unsqueeze(-1))
            .squeeze(-1)
            .tolist()
            if generated.shape[1]
            else [[] for _ in requests]
        )
        results = []
        for row, request_id in enumerate(ids):
            tokens = generated[row].tolist()
            end = min(limits[row], stop.stopped_at.get(row, len(tokens)))  # an aborted row: pads after its abort
            if self.eos_token_id in tokens[:end]:
                end = tokens.index(self.eos_token_id) + 1
                results.append(RequestResult(request_id, tokens[:end], log_probs[row][:end], "stop"))
                continue
            reason = "abort" if aborted[row] and end < limits[row] else "length"
            results.append(RequestResult(request_id, tokens[:end], log_probs[row][:end], reason))
        return results


class _AbortCriterion(StoppingCriteria):
    """Stops each row of `generate` once its request is marked aborted (checked after every generated token);
    `stopped_at[row]` = how many tokens that row had generated then (HF pads the row after it)."""

    def __init__(self, aborted, prompt_width: int):
        self.aborted, self.prompt_width, self.stopped_at = aborted, prompt_width, {}

    def __call__(self, input_ids, scores, **kwargs):
        flags = self.aborted()
        for row, flag in enumerate(flags):
            if flag and row not in self.stopped_at:
                self.stopped_at[row] = input_ids.shape[1] - self.prompt_width
        return torch.tensor(flags, dtype=torch.bool, device=input_ids.device)
