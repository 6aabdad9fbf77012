"""`hf_infer`: batched sampling with transformers' `generate` (KV cache, left-padded prompts).

Rollout log-probs are taken from the scores `generate` samples from: the temperature-scaled
logits, after top-k/top-p filtering when those are on. The trainer's log-probs use the same
temperature without filtering, so keep top_k=0 and top_p=1.0 for exact on-policy log-probs
(the defaults); filtering shows up as mismatch in the `mismatch/*` metrics.
"""

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from roll.distributed.data_proto import DataProto
from roll.strategies.base import InferenceStrategy, RequestResult
from roll.utils.functional import compute_position_ids


def response_mask_from(responses: torch.Tensor, eos_token_id: int, generated_length: int) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS, 0 after it and on padding."""
    is_eos = (responses == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=-1) - is_eos) > 0
    in_range = torch.arange(responses.shape[1]).unsqueeze(0) < generated_length
    return (~after_eos & in_range).float()


class HFInferStrategy(InferenceStrategy):
    roles = frozenset({"generate", "score"})
    rollout_log_probs = True
    sum_pi_squared = True
    dynamic_batching_infer = True
    sequence_packing = True

    def initialize(self, total_steps: int = 0) -> None:
        super().initialize(total_steps)
        gen = self.model.generation_config
        self.eos_token_id = gen.eos_token_id if isinstance(gen.eos_token_id, int) else gen.eos_token_id[0]
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else self.eos_token_id

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
        output = self.model.generate(
            input_ids=prompts.to(self.device),
            attention_mask=prompt_mask.to(self.device),
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
            use_cache=True,
            **kwargs,
        )
        generated = output.sequences[:, prompts.shape[1] :].cpu()
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
        prompts = prompts.repeat_interleave(n, dim=0)
        attention_mask = torch.cat([prompt_mask.repeat_interleave(n, dim=0), response_mask.long()], dim=1)
        return DataProto.from_dict(
            tensors={
                "prompts": prompts,
                "responses": responses,
                "input_ids": torch.cat([prompts, responses], dim=1),
                "attention_mask": attention_mask,
                "position_ids": compute_position_ids(attention_mask),
                "response_mask": response_mask,
                "rollout_log_probs": log_probs * response_mask,
            }
        )

    # --- request-level generation (synchronous; abort from another thread stops at the next token) ---------
    @torch.no_grad()
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """One sample for one prompt with `generate`. abort_request(request_id) from another thread (or from
        a callback during generation) stops it after the current token; aborting an unknown or finished id
        is a no-op returning False (see InferenceStrategy.abort_request)."""
        settings = self.sampling_settings(sampling, request=True)
        seed = settings["seed"]
        kwargs = self._generate_kwargs(settings)
        self._begin_request(request_id)
        try:
            if seed is not None:
                torch.manual_seed(int(seed))
            prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
            stop = StoppingCriteriaList([_AbortCriterion(lambda: self._is_aborted(request_id))])
            output = self.model.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id,
                output_scores=True,
                return_dict_in_generate=True,
                use_cache=True,
                stopping_criteria=stop,
                **kwargs,
            )
        finally:
            aborted = self._end_request(request_id)
        generated = output.sequences[0, prompt.shape[1] :].cpu().tolist()
        log_probs = [
            torch.log_softmax(score[0].float(), -1)[token].item() for score, token in zip(output.scores, generated)
        ]
        if self.eos_token_id in generated:
            end = generated.index(self.eos_token_id) + 1
            return RequestResult(request_id, generated[:end], log_probs[:end], "stop")
        return RequestResult(request_id, generated, log_probs, "abort" if aborted else "length")


class _AbortCriterion(StoppingCriteria):
    """Stops `generate` once the request is marked aborted (checked after every generated token)."""

    def __init__(self, aborted):
        self.aborted = aborted

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), self.aborted(), dtype=torch.bool, device=input_ids.device)
