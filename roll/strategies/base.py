"""The strategy interface: one engine adapter per `strategy_name`, behind the same methods.

A strategy belongs to one worker (one process) and is built from its worker_config. Inference
strategies (`InferenceStrategy`) generate and score; training strategies (`TrainStrategy`) also take
optimizer steps, export weights and save checkpoints. Everything here is engine-independent;
subclasses bring the engine.

Each strategy class also declares what it can do (`roles`, `rollout_log_probs`, `sum_pi_squared`, ...,
class attributes below). The config checks read them through the registry (roll/strategies/__init__.py)
without starting anything, so a strategy module must import without its engine: engine imports go inside
methods.
"""

import abc
import threading
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from roll.distributed.data_proto import DataProto
from roll.strategies.batching import hf_logits, restore_order, scoring_micro_batches
from roll.strategies.offload import HostParking
from roll.utils.functional import response_log_probs, slice_response_logits
from roll.utils.logging import get_logger

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# Per-call sampling settings on top of generating_args: a batch's generation_config (meta_info) may set
# these; the batch's seed travels in meta_info["seed"].
def attention_kwargs(model_args) -> dict:
    """from_pretrained's attn_implementation from model_args (ROLL's `fa2` = flash_attention_2); {} = HF's choice."""
    name = getattr(model_args, "attn_implementation", None)
    if name is None:
        return {}
    return {"attn_implementation": "flash_attention_2" if name == "fa2" else name}


BATCH_SAMPLING_KEYS = (
    *("max_new_tokens", "temperature", "top_p", "top_k", "do_sample", "num_return_sequences"),
    *("repetition_penalty", "stop_strings"),
)
# ... and a single request these (one sample per request; `seed` makes it reproducible)
REQUEST_SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "do_sample", "seed")
# What a strategy can serve (its `roles`), by the pipeline role that needs it:
ROLES = (
    "train",  # actor_train: train_step with the policy loss, named_hf_parameters for the weight sync
    "generate",  # actor_infer: generate (+ generate_request / abort_request)
    "score",  # reference: compute_log_probs without training
    "critic",  # critic: a value head (worker.model_kind == "value"), compute_values and train_step
)


@dataclass
class RequestResult:
    """One request's completion (request-level generation: dynamic sampling, async rollout)."""

    request_id: str
    token_ids: list[int] = field(default_factory=list)  # generated ids; ends with the EOS id if finish_reason == "stop"
    log_probs: list[float] = field(default_factory=list)  # log-prob of each generated token, as rollout_log_probs
    finish_reason: str = "length"  # "stop" (EOS), "length" (max_new_tokens) or "abort" (tokens generated so far)


class InferenceStrategy:
    # --- capabilities (class attributes; no engine needed to read them) ----------------------------------
    roles: frozenset = frozenset()  # a subset of ROLES
    rollout_log_probs = False  # generate() returns `rollout_log_probs` of the sampled tokens (rollout IS)
    # the forward behind its log-probs (generate's rollout log-probs, compute_log_probs): strategies naming the
    # same family compute the same numbers from the same weights and dtype, up to float rounding (None: own kernels)
    log_prob_kernels: str | None = None
    sum_pi_squared = False  # compute_sum_pi_squared works (the optimal-token-baseline estimator's input)
    dynamic_batching_train = False  # train_step honours use_dynamic_batching_in_train
    dynamic_batching_infer = False  # the scoring forwards honour use_dynamic_batching_in_infer
    sequence_packing = False  # training and scoring forwards honour use_sequence_packing
    freeze_module_prefix = False  # training honours model_args.freeze_module_prefix (frozen parameters by name)
    ulysses = False  # model_args.ulysses_size > 1: Ulysses sequence parallelism (roll/strategies/ulysses.py)
    lora = False  # model_args.lora_* (peft LoRA adapters): only adapters train, the weight sync sends merged weights
    stop_strings = False  # generating_args.stop_strings end a sample
    lora_adapters = False  # load_adapter(named_tensors, adapter_config): serves a LoRA adapter (adapter-only sync)
    lora_limit: str | None = None  # why `lora` is False, where there is a reason to tell (the config checks show it)
    # vision-language models (roll/models/vl.py): images in generate and in the scoring/training forwards
    vision_language = False
    vision_language_limit: str | None = None  # why not, for the config checks (None: "not built for this engine")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.roles) - set(ROLES))
        if unknown:
            raise TypeError(f"{cls.__name__}.roles has unknown roles {unknown}; valid: {list(ROLES)}")
        if {"train", "critic"} & set(cls.roles) and not issubclass(cls, TrainStrategy):
            raise TypeError(f"{cls.__name__} declares roles {sorted(cls.roles)}: it must subclass TrainStrategy")

    @classmethod
    def data_parallel_size(cls, world_size: int, strategy_config: dict | None) -> int:
        """How many data-parallel shards `world_size` workers form (the rows of a step are split over
        them). A ValueError says why the combination cannot work. Read by the config checks."""
        return world_size

    @classmethod
    def check_strategy_config(cls, strategy_config: dict | None, *, dtype: str, world_size: int) -> None:
        """A ValueError naming the bad key and what would be valid, where this engine cannot take
        `strategy_config` (run at load time and by --dry_run, before any worker starts). The default accepts
        anything: a strategy with keys of its own overrides this."""

    @classmethod
    def check_lora(cls, model_args, strategy_config: dict | None) -> None:
        """A ValueError naming the key, where this `lora = True` strategy cannot train these lora_* settings with
        this strategy_config (read by the config checks; the default accepts them)."""

    @classmethod
    def dynamic_batching_limit(cls, strategy_config: dict | None) -> str | None:
        """Why this strategy_config rules out dynamic batching (None: it does not). Read by the config checks."""
        return None

    def __init__(self, worker):
        self.worker = worker
        self.config = worker.worker_config
        self.rank, self.world_size = worker.rank, worker.world_size
        self.logger = get_logger(f"{self.config.name}[{self.rank}].{type(self).__name__}")
        self.model = None
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self._parking = HostParking(self.device, type(self).__name__)  # offload/reload of training engines
        self._request_lock = threading.Lock()  # request-level generation: in-flight ids → aborted?
        self._in_flight: dict[str, bool] = {}

    # --- set-up --------------------------------------------------------------------------------
    def initialize(self, total_steps: int = 0) -> None:
        self.model = self.load_model().to(self.device)
        self.model.eval()

    def load_model(self, dtype: torch.dtype | None = None) -> torch.nn.Module:
        """The HF model from model_args (in model_args.dtype unless `dtype` is given); a one-output token
        head for value workers (the critic)."""
        args = self.config.model_args
        dtype = DTYPES[args.dtype] if dtype is None else dtype
        if dtype != torch.float32 and not torch.cuda.is_available():
            self.logger.warning(
                "model_args.dtype=%s on a CPU-only machine: expect it to be several times slower than float32",
                args.dtype,
            )
        from roll.models.vl import load_vl_model, vl_model_type

        vision_language = vl_model_type(args.model_name_or_path)
        if getattr(self.worker, "model_kind", "causal_lm") == "value":
            if vision_language:
                raise ValueError(
                    f"{self.config.name}: a critic (value model) of the vision-language model "
                    f"{args.model_name_or_path} ({vision_language}) is not built; use a critic-free estimator"
                )
            # No dropout before the value head (HF's default is 0.1): value targets are regressed exactly,
            # as in verl, and a resumed run does not depend on the worker's dropout RNG stream.
            config = AutoConfig.from_pretrained(args.model_name_or_path, num_labels=1)
            config.classifier_dropout = 0.0
            return AutoModelForTokenClassification.from_pretrained(
                args.model_name_or_path, config=config, dtype=dtype, **attention_kwargs(args)
            )
        if vision_language:  # the whole model: vision tower, language model, output layer
            return load_vl_model(args.model_name_or_path, dtype, **attention_kwargs(args))
        return AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=dtype, **attention_kwargs(args))

    @property
    def module(self) -> torch.nn.Module:
        """The plain HF module (engines wrap it)."""
        return self.model

    # --- forward ---------------------------------------------------------------------------------
    def forward_logits(self, micro: DataProto) -> torch.Tensor:
        return hf_logits(self.model, micro, self.device, self.config.use_sequence_packing).cpu()

    def _micro_batches(self, batch: DataProto):
        size = self.config.infer_batch_size
        for start in range(0, len(batch), size):
            yield batch[slice(start, start + size)]

    def _align_forwards(self, micros: list[DataProto], batch: DataProto) -> list[tuple[DataProto, bool]]:
        """(micro-batch, keep) pairs for the scoring forwards. Sharded engines override this to pad every
        rank to the same number of forwards (the padding is run with keep=False and discarded)."""
        return [(micro, True) for micro in micros]

    def _score(self, batch: DataProto, fn) -> torch.Tensor:
        """fn(micro, response-position logits) → (rows, R) for every row of `batch`, in its row order; the
        micro-batches are infer_batch_size rows or token-budget groups (use_dynamic_batching_in_infer)."""
        micros, order = scoring_micro_batches(self.config, batch)
        parts = []
        for micro, keep in self._align_forwards(micros, batch):
            logits = slice_response_logits(self.forward_logits(micro), micro.batch["responses"].shape[1])
            if keep:
                parts.append(fn(micro, logits))
        return restore_order(torch.cat(parts), order)

    @torch.no_grad()
    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        temperature = batch.meta_info.get("temperature", 1.0)
        return self._score(
            batch,
            lambda micro, logits: (
                response_log_probs(logits, micro.batch["responses"], temperature) * micro.batch["response_mask"]
            ),
        )

    def compute_reference_log_probs(self, batch: DataProto) -> torch.Tensor:
        """compute_log_probs of the frozen base model: a LoRA training strategy disables its adapters for it
        (the reference without a second model). Strategies without LoRA have no such model."""
        raise NotImplementedError(
            f"strategy {self.config.strategy_args.strategy_name!r} has no LoRA adapters to disable; "
            f"configure a 'reference' role"
        )

    @torch.no_grad()
    def compute_sum_pi_squared(self, batch: DataProto) -> torch.Tensor:
        """Σ_v π_v² at every response position (B, R), at the sampling temperature; 0 on padding.
        The optimal-token-baseline estimator weighs tokens by 1 − 2π(token) + Σπ²."""
        temperature = batch.meta_info.get("temperature", 1.0)
        return self._score(
            batch,
            lambda micro, logits: (
                (logits.float() / temperature).softmax(dim=-1).square().sum(dim=-1) * micro.batch["response_mask"]
            ),
        )

    @torch.no_grad()
    def compute_values(self, batch: DataProto) -> torch.Tensor:
        return self._score(batch, lambda micro, logits: logits.squeeze(-1).float())

    def generate(self, batch: DataProto, generation_config: dict) -> DataProto:
        raise NotImplementedError(
            f"strategy {self.config.strategy_args.strategy_name!r} cannot generate; "
            f"use hf_infer, vllm or sglang for actor_infer"
        )

    # --- request-level generation and abort (same semantics for hf_infer, vllm, sglang) ------------
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """Generate ONE sample for one prompt (unpadded token ids), blocking until it finishes or is aborted.
        `sampling` overrides generating_args with keys from REQUEST_SAMPLING_KEYS (`seed` makes it
        reproducible). An id already in flight is an error."""
        raise NotImplementedError(
            f"strategy {self.config.strategy_args.strategy_name!r} has no request-level "
            f"generation; use hf_infer, vllm or sglang"
        )

    def generate_requests(self, requests: list[tuple[str, list[int], dict | None]]) -> list[RequestResult]:
        """Several requests (request_id, prompt_ids, sampling) in one call, each ending (or aborted) on its own;
        the results come in the requests' order. Engines that batch them override this (hf_infer, vllm);
        this default runs them one after another."""
        return [self.generate_request(*request) for request in requests]

    def abort_request(self, request_id: str) -> bool:
        """Stop an in-flight request: its generate_request returns the tokens so far with finish_reason
        "abort". Returns True if the request was in flight; an unknown or already finished id is a no-op
        that returns False. May be called from another thread."""
        with self._request_lock:
            if request_id not in self._in_flight:
                return False
            self._in_flight[request_id] = True
        self._abort_in_engine(request_id)
        return True

    def _abort_in_engine(self, request_id: str) -> None:
        """Engine-side abort, called by abort_request (from the caller's thread) after marking the request."""

    def _begin_request(self, request_id: str) -> None:
        with self._request_lock:
            if request_id in self._in_flight:
                raise ValueError(f"{self.config.name}: request {request_id!r} is already in flight")
            self._in_flight[request_id] = False  # aborted?

    def _is_aborted(self, request_id: str) -> bool:
        with self._request_lock:
            return bool(self._in_flight.get(request_id, False))

    def _end_request(self, request_id: str) -> bool:
        """Forget the request; returns whether it was aborted."""
        with self._request_lock:
            return bool(self._in_flight.pop(request_id, False))

    def sampling_settings(self, overrides: dict | None = None, request: bool = False) -> dict:
        """generating_args merged with one call's overrides — the one place generation settings are
        resolved. A batch (`generate`'s generation_config) may override BATCH_SAMPLING_KEYS; a request
        (`generate_request`) REQUEST_SAMPLING_KEYS, and always gets num_return_sequences 1 and a `seed`
        (None unless given). An unknown key is an error naming the valid ones."""
        args = self.config.generating_args
        valid = REQUEST_SAMPLING_KEYS if request else BATCH_SAMPLING_KEYS
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            what = "request sampling keys" if request else "generation settings"
            hint = "" if request else " (a batch's seed goes in meta_info['seed'])"
            raise ValueError(
                f"{self.config.strategy_args.strategy_name}: unknown {what} {unknown}; valid: {list(valid)}{hint}"
            )
        merged = {
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "do_sample": args.do_sample,
            "repetition_penalty": args.repetition_penalty,
            "stop_strings": args.stop_strings,
            "num_return_sequences": 1 if request else args.num_return_sequences,
        }
        if request:
            merged["seed"] = None
        merged.update(overrides)
        if merged.get("top_k") is not None and merged["top_k"] < 0:
            merged["top_k"] = 0  # ROLL's and vLLM's top_k: -1 = off, roll's engines all read 0 as off
        return merged

    # --- weights ------------------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        params = dict(self.module.named_parameters())
        loaded = set()
        for name, tensor in named_tensors:
            if name not in params:
                raise KeyError(
                    f"{self.config.name}: weight {name!r} from the trainer has no parameter here "
                    f"(e.g. {sorted(params)[:3]})"
                )
            params[name].copy_(tensor.to(params[name].dtype))
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            raise KeyError(
                f"{self.config.name}: the trainer sent no value for {len(missing)} parameters, e.g. {missing[:3]}"
            )

    def state_checksum(self) -> float:
        """Σ over parameters of (Σp + Σp²) in float64 (train_common.checksum): any lost or stale tensor changes it."""
        from roll.strategies.train_common import checksum

        return checksum(self.module.named_parameters())

    # --- memory -------------------------------------------------------------------------------------
    def offload_frees_memory(self) -> bool:
        """Whether offload() frees anything on this node; the pipeline stops calling offload/reload of a role
        whose engines all say no. True unless an engine knows its offload is a no-op here."""
        return torch.cuda.is_available() if type(self).offload is InferenceStrategy.offload else True

    def offload(self) -> None:
        """Move weights off the accelerator between phases (colocated roles). Nothing to move on CPU."""
        if torch.cuda.is_available():
            self.model.to("cpu")
            torch.cuda.empty_cache()

    def reload(self) -> None:
        if torch.cuda.is_available():
            self.model.to("cuda")


class TrainStrategy(InferenceStrategy, metaclass=abc.ABCMeta):
    """What a training engine must offer (actor_train, critic), on top of scoring. Every method here is
    collective over the role's ranks: all ranks call it, in the same order, or sharded engines hang.
    A class that misses one of them cannot be instantiated (TypeError naming it)."""

    @abc.abstractmethod
    def initialize(self, total_steps: int = 0) -> None:
        """Build the engine from worker_config: the HF model (a one-output token head when
        worker.model_kind == "value"), the optimizer and an LR schedule over `total_steps` optimizer steps
        (training_args: AdamW settings, lr_scheduler_type, warmup_steps), in training mode."""

    @abc.abstractmethod
    def train_step(self, batch: DataProto, loss_fn) -> dict:
        """ONE optimizer step over this rank's `batch` of exactly per_device_train_batch_size ×
        gradient_accumulation_steps rows (train_common.split_train_batch: fixed micro-batches, or
        token-budget ones with use_dynamic_batching_in_train, as many on every rank).
        For each micro-batch: logits = forward(input_ids, attention_mask, position_ids) over the full
        sequence (rows, P+R, vocab or 1); `loss, metrics = loss_fn(micro on the device, logits)`; backward
        of loss / (number of micro-batches). Gradients are averaged over data-parallel ranks, clipped at
        training_args.max_grad_norm (≤ 0: no clipping), then one optimizer and LR-scheduler step.
        Returns loss_fn's metrics averaged over micro-batches, plus "grad_norm" (before clipping) and "lr"
        (after the scheduler step)."""

    @abc.abstractmethod
    def named_hf_parameters(self):
        """Iterator of (HF parameter name, full tensor) — what every inference strategy's load_weights
        takes (the weight sync). Gathers shards: every rank must consume it completely, in order."""

    @abc.abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Write the engine state (weights, optimizer moments and step counts, LR schedule) under `path`,
        plus a plain HF copy (weights + tokenizer) in `path/hf` written by rank 0."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore what save_checkpoint wrote, exactly: the next train_step equals an uninterrupted run's.
        A missing or incompatible checkpoint is an error naming `path`."""

    @abc.abstractmethod
    def offload(self) -> None:
        """Move parameters, gradients and optimizer state off the accelerator (colocated roles); the next
        train_step after reload() must equal one without the round trip. The same code runs without a GPU
        (roll/strategies/offload.py: host copies, compute storages freed), so CPU tests exercise it."""

    @abc.abstractmethod
    def reload(self) -> None:
        """Undo offload()."""


def buckets(named_tensors, limit_bytes: float):
    """Consecutive groups of (name, tensor) of at most `limit_bytes` each (a larger tensor goes alone)."""
    bucket, size = [], 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > limit_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
