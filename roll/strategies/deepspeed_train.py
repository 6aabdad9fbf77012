"""`deepspeed_train` / `deepspeed_infer`: DeepSpeed ZeRO 0-3 (gloo and fp32 on CPU, NCCL on GPU).

`strategy_config` is a DeepSpeed JSON config (see roll/configs/blocks/deepspeed_zero*.yaml). Batch
keys left as "auto" (or absent) are taken from training_args; an explicit value that disagrees with
training_args is an error, never silently replaced.
"""

import copy
import sys
from pathlib import Path

import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.base import InferenceStrategy, TrainStrategy
from roll.strategies.batching import hf_logits
from roll.strategies.lora import (
    ADAPTER_DIR,
    LoraExport,
    adapter_state,
    adapters_disabled,
    apply_lora,
    lora_scalings,
    merged_hf_parameters,
    save_adapter,
    save_merged_hf,
)
from roll.strategies.offload import OFFLOAD_DEVICE
from roll.strategies.train_common import (
    EvalModeScoring,
    align_forward_counts,
    build_adamw,
    build_lr_scheduler,
    checksum,
    freeze_by_prefix,
    lr_lambda,
    mean_metrics,
    save_tokenizer,
    split_train_batch,
)

__all__ = ["DeepSpeedTrainStrategy", "DeepSpeedInferStrategy", "resolve_ds_config", "zero_stage", "lr_lambda"]


def _init_deepspeed_distributed() -> None:
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401

    # The CPU accelerator JIT-builds a shared-memory comm op on first init (60-90 s per process);
    # gloo works without it. The patch must hit the module object, not an imported name.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def resolve_ds_config(strategy_config: dict, training_args, world_size: int, dtype: str) -> dict:
    """Fill DeepSpeed's batch and precision keys from training_args; disagreements are errors."""
    config = copy.deepcopy(dict(strategy_config))
    for section in ("optimizer", "scheduler"):
        if section in config:
            raise ValueError(
                f"strategy_config.{section}: roll builds the optimizer and LR schedule from "
                f"training_args (learning_rate, weight_decay, lr_scheduler_type, warmup_steps); "
                f"remove the {section!r} section"
            )
    pairs = {
        "train_micro_batch_size_per_gpu": ("per_device_train_batch_size", training_args.per_device_train_batch_size),
        "gradient_accumulation_steps": ("gradient_accumulation_steps", training_args.gradient_accumulation_steps),
        "gradient_clipping": ("max_grad_norm", training_args.max_grad_norm),
    }
    for ds_key, (arg_key, value) in pairs.items():
        given = config.get(ds_key, "auto")
        if given != "auto" and given != value:
            raise ValueError(
                f"strategy_config.{ds_key}={given!r} disagrees with training_args.{arg_key}={value!r}; "
                f'set it to "auto" (or remove it) and keep training_args.{arg_key}'
            )
        config[ds_key] = value
    global_batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world_size
    given = config.get("train_batch_size", "auto")
    if given != "auto" and given != global_batch:
        raise ValueError(
            f"strategy_config.train_batch_size={given!r} but per_device_train_batch_size × "
            f'gradient_accumulation_steps × world_size = {global_batch}; set it to "auto"'
        )
    config["train_batch_size"] = global_batch
    for precision, wanted in (("bf16", dtype == "bfloat16"), ("fp16", dtype == "float16")):
        section = dict(config.get(precision, {}))
        if section.get("enabled", "auto") == "auto":
            section["enabled"] = wanted
        elif section["enabled"] != wanted:
            raise ValueError(
                f"strategy_config.{precision}.enabled={section['enabled']} disagrees with "
                f'model_args.dtype={dtype!r}; set it to "auto"'
            )
        config[precision] = section
    config.setdefault("steps_per_print", 10**9)  # roll prints its own progress
    return config


def zero_stage(config: dict) -> int:
    return int(config.get("zero_optimization", {}).get("stage", 0))


def deepspeed_checkpoint_globals() -> list:
    """The classes DeepSpeed pickles into its checkpoints besides tensors and plain data (ZeRO 0-3, fp32,
    bf16 and fp16, found with torch.serialization.get_unsafe_globals_in_checkpoint on deepspeed 0.19): a
    dataclass of two ints, an enum and the loss scalers, whose state is a few numbers."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [fragment_address, ZeroStageEnum, LossScaler, DynamicLossScaler]


def load_checkpoints_weights_only(engine) -> None:
    """DeepSpeed's TorchCheckpointEngine unpickles checkpoints with weights_only=False (a replaced file
    could run code); this engine's loads use weights_only=True, allowing only deepspeed_checkpoint_globals."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    if type(engine.checkpoint_engine) is not TorchCheckpointEngine:
        return  # the other engines (checkpoint.writer configs) call torch.load with torch's default, weights_only

    def load(path: str, map_location=None):
        with torch.serialization.safe_globals(deepspeed_checkpoint_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)

    engine.checkpoint_engine.load = load  # an instance attribute: this engine only


class DeepSpeedTrainStrategy(EvalModeScoring, LoraExport, TrainStrategy):
    roles = frozenset({"train", "critic"})
    lora = True  # actor_train with model_args.lora_* (roll/strategies/lora.py)
    freeze_module_prefix = True
    sum_pi_squared = True
    dynamic_batching_train = True
    dynamic_batching_infer = True
    sequence_packing = True
    vision_language = True
    log_prob_kernels = "transformers"  # hf_logits through the HF module DeepSpeed wraps

    def initialize(self, total_steps: int = 0) -> None:
        import deepspeed

        _init_deepspeed_distributed()
        args = self.config.training_args
        self.ds_config = resolve_ds_config(
            self.config.strategy_args.strategy_config, args, self.world_size, self.config.model_args.dtype
        )
        model = self.load_model()  # deepspeed.initialize broadcasts rank 0's weights (ZeRO-3: while partitioning)
        if not self.config.model_args.disable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        freeze_by_prefix(model, self.config.model_args.frozen_prefixes, self.logger)
        self._lora_on = self.config.model_args.lora
        if self._lora_on:  # only the adapters require gradients: the optimizer below holds only them
            model = apply_lora(model, self.config.model_args, self.logger)
        offload = self.ds_config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
        params = [p for p in model.parameters() if p.requires_grad]
        if offload not in (None, "none"):
            from deepspeed.ops.adam import DeepSpeedCPUAdam  # JIT-builds cpu_adam once (~2 min with gcc)

            optimizer = DeepSpeedCPUAdam(
                params,
                lr=args.learning_rate,
                betas=(args.adam_beta1, args.adam_beta2),
                eps=args.adam_epsilon,
                weight_decay=args.weight_decay,
                adamw_mode=True,
            )
        else:
            optimizer = build_adamw(params, args)
        scheduler = build_lr_scheduler(optimizer, args, total_steps)
        self.model, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config
        )
        load_checkpoints_weights_only(self.model)
        self.model.train()

    @property
    def module(self) -> torch.nn.Module:
        return self.model.module

    def train_step(self, batch: DataProto, loss_fn) -> dict:
        micros = split_train_batch(self.config, batch)
        history: dict[str, list] = {}
        own_norm = None
        for index, micro in enumerate(micros):
            # the boundary and the loss scale follow this step's micro-batch count, which dynamic batching
            # makes differ from gradient_accumulation_steps (every rank runs the same count)
            last = index == len(micros) - 1
            self.model.set_gradient_accumulation_boundary(last)
            logits = hf_logits(self.model, micro, self.device, self.config.use_sequence_packing)
            loss, metrics = loss_fn(micro.to(self.device), logits)
            self.model.backward(loss / len(micros), scale_wrt_gas=False)
            if last:
                own_norm = self._unpartitioned_grad_norm()
            self.model.step()  # steps the optimizer only at the accumulation boundary
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
        out = mean_metrics(history)
        grad_norm = self.model.get_global_grad_norm()
        grad_norm = own_norm if grad_norm is None else grad_norm
        out["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["lr"] = self.scheduler.get_last_lr()[0]
        return out

    @torch.no_grad()
    def _unpartitioned_grad_norm(self):
        """Pre-clipping gradient norm without ZeRO in fp32: DeepSpeed clips there but keeps no norm
        (get_global_grad_norm() stays None). The gradients are already averaged over ranks here."""
        if zero_stage(self.ds_config) > 0 or self.model.fp16_enabled() or self.model.bfloat16_enabled():
            return None
        norms = [p.grad.detach().float().norm() for p in self.module.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(norms)).item() if norms else 0.0

    def forward_logits(self, micro: DataProto) -> torch.Tensor:
        return hf_logits(self.model, micro, self.device, self.config.use_sequence_packing).float().cpu()

    def _align_forwards(self, micros: list[DataProto], batch: DataProto):
        if zero_stage(self.ds_config) == 3:  # weights are gathered inside each forward: same count on every rank
            return align_forward_counts(micros, batch)
        return super()._align_forwards(micros, batch)

    def named_full_parameters(self, only=None):
        """Every parameter of the module (or those whose name passes `only`), whole, under the module's own
        names (with LoRA: peft's names, adapters included). Under ZeRO-3 every rank must call this (it
        gathers shards)."""
        import deepspeed

        params = [(name, p) for name, p in self.module.named_parameters() if only is None or only(name)]
        if zero_stage(self.ds_config) == 3:  # one parameter gathered at a time: a weight sync holds one bucket
            return _gathered_one_by_one(deepspeed, params)
        return ((name, p.detach()) for name, p in params)

    def named_hf_parameters(self):
        """Full weights with HF names (with LoRA: the base model's names, adapters merged in). Under ZeRO-3
        every rank must call this (it gathers shards)."""
        if getattr(self, "_lora_on", False):
            return merged_hf_parameters(self.named_full_parameters(), lora_scalings(self.module))
        return self.named_full_parameters()

    def state_checksum(self) -> float:
        return checksum(self.named_hf_parameters())

    def save_checkpoint(self, path: str) -> None:
        """Engine state (weights, optimizer, LR schedule) plus an HF copy users can load directly. With LoRA
        the engine state holds the adapters only (the frozen base is model_name_or_path), `adapter/` the
        adapter in peft format and `hf/` the merged model."""
        self.model.save_checkpoint(path, tag="engine", exclude_frozen_parameters=self._lora_on)
        if self._lora_on:
            full = dict(self.named_full_parameters())
            merged = dict(merged_hf_parameters(full.items(), lora_scalings(self.module)))
            if self.rank == 0:
                save_adapter(self.module, adapter_state(full.items()), Path(path) / ADAPTER_DIR)
                save_merged_hf(self.module, merged, Path(path) / "hf")
                save_tokenizer(self.config.model_args.model_name_or_path, Path(path) / "hf", self.logger)
            return
        weights = dict(self.named_hf_parameters())
        if self.rank == 0:
            self.module.save_pretrained(str(Path(path) / "hf"), state_dict=weights)
            save_tokenizer(self.config.model_args.model_name_or_path, Path(path) / "hf", self.logger)

    def load_checkpoint(self, path: str) -> None:
        if not (Path(path) / "engine").is_dir():
            raise FileNotFoundError(f"{self.config.name}: {path} has no DeepSpeed 'engine' checkpoint")
        self.model.load_checkpoint(
            path,
            tag="engine",
            load_optimizer_states=True,
            load_lr_scheduler_states=True,
            load_module_strict=not self._lora_on,  # LoRA: the checkpoint holds the adapters, the base is loaded
        )

    def compute_reference_log_probs(self, batch: DataProto) -> torch.Tensor:
        """Log-probs of the frozen base model: the LoRA actor with its adapters disabled (no reference role)."""
        with adapters_disabled(self.module):
            return self.compute_log_probs(batch)

    # --- memory ---------------------------------------------------------------------------------------
    def offload(self) -> None:
        """Parameters, gradients and optimizer state to host memory between phases (colocated roles).
        ZeRO 1-3: DeepSpeed's own `offload_states` moves its weight and gradient partitions and buffers
        (copies into fresh host buffers, re-linked; on CPU too); the AdamW moments and ZeRO-3's fp32 master
        partitions are parked by roll/strategies/offload.py (DeepSpeed moves those only for its CUDA
        FusedAdam, or with `.to`, a no-op on CPU), as are a LoRA model's frozen base weights (outside
        DeepSpeed's groups). ZeRO-0: everything is parked."""
        stage = zero_stage(self.ds_config)
        if not self._engine_offloads_states():
            if stage == 0:
                self._park(self._zero0_groups())
            else:
                self._log_params_on_host()
            return
        from deepspeed.runtime.zero.offload_config import OffloadStateTypeEnum as State

        zero = self.model.optimizer
        include = [State.lp_grads, State.contiguous_grad_buffer]
        frozen = [p for p in self.module.parameters() if not p.requires_grad]
        if stage == 3:
            masters, frozen = list(zero.fp32_partitioned_groups_flat), [p.ds_tensor for p in frozen]
        else:
            include += [State.hp_params, State.lp_params]
            masters = []
        self.model.offload_states(include=include)  # ZeRO-3: also releases the gathered full weights
        if stage == 3:
            self._offload_zero3_lp_params()
        self._park(
            {
                "master weights": masters,
                "optimizer": [value for state in zero.optimizer.state.values() for value in state.values()],
                "frozen parameters": frozen,
            }
        )

    def reload(self) -> None:
        self._parking.reload()  # first: DeepSpeed's reload re-links its partitions to these
        if self._engine_offloads_states():
            self.model.reload_states()

    def _park(self, groups: dict) -> None:
        moved = self._parking.offload(groups)
        self.logger.debug("deepspeed_train offload: %s bytes", moved)

    def _zero0_groups(self) -> dict:
        params = list(self.module.parameters())
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # the torch AdamW under any wrapper
        return {
            "parameters": params,
            "gradients": [p.grad for p in params],
            "optimizer": [value for state in optimizer.state.values() for value in state.values()],
        }

    def _engine_offloads_states(self) -> bool:
        """DeepSpeed's offload_states needs a ZeRO optimizer and refuses offloaded parameters (they live on
        the host already)."""
        zero = self.ds_config.get("zero_optimization", {})
        params_offloaded = zero.get("offload_param", {}).get("device", "none") not in (None, "none")
        return zero_stage(self.ds_config) > 0 and not params_offloaded

    def _offload_zero3_lp_params(self) -> None:
        """ZeRO-3's low-precision weight partitions to a fresh host copy of their flat buffer, re-pointed with
        the mapping DeepSpeed's reload_states uses (`_get_parameter_partitions`: the trained parameters), so
        its reload undoes it. DeepSpeed 0.19.8's own lp_params offload maps *every* module parameter into
        that buffer, which holds only the trained ones ("start + length exceeds dimension size" when LoRA
        freezes the base), and on CPU re-uses one host buffer, so nothing visibly moves after the first
        round trip; the gathered full weights are released by offload_states (re-gathered on use)."""
        from deepspeed.runtime.zero.offload_config import OffloadStateTypeEnum
        from deepspeed.runtime.zero.utils import get_mapping_to_flat_buffer

        zero = self.model.optimizer
        if OffloadStateTypeEnum.lp_params in zero.offloaded_states:
            return
        buffer = zero.lp_param_buffer
        host_buffer = torch.empty_like(buffer, device=OFFLOAD_DEVICE, pin_memory=buffer.is_cuda)  # fresh on CPU too
        host_buffer.copy_(buffer)
        zero.lp_param_buffer.data = host_buffer
        for tensor, offset, numel in get_mapping_to_flat_buffer(zero._get_parameter_partitions()):
            tensor.data = host_buffer.narrow(0, offset, numel)
        zero.fp16_partitioned_groups_flat.clear()
        zero.offloaded_states.add(OffloadStateTypeEnum.lp_params)

    def _log_params_on_host(self) -> None:
        if not getattr(self, "_said_params_on_host", False):
            self.logger.info("deepspeed_train: offload_param keeps the weights and optimizer in host memory already")
            self._said_params_on_host = True


def resolve_ds_infer_config(strategy_config: dict, world_size: int, dtype: str) -> dict:
    """A forward-only engine: one row per micro-batch, no accumulation or clipping; the shipped configs'
    "auto" keys resolved (DeepSpeed itself does not accept "auto")."""
    config = copy.deepcopy(dict(strategy_config or {}))
    for section in ("optimizer", "scheduler"):
        if section in config:
            raise ValueError(
                f"strategy_config.{section}: deepspeed_infer does not train; remove the {section!r} section"
            )
    micro = config.get("train_micro_batch_size_per_gpu", "auto")
    config["train_micro_batch_size_per_gpu"] = 1 if micro == "auto" else micro
    config["gradient_accumulation_steps"] = 1
    config["train_batch_size"] = config["train_micro_batch_size_per_gpu"] * world_size
    config["gradient_clipping"] = 0.0
    for precision, wanted in (("bf16", dtype == "bfloat16"), ("fp16", dtype == "float16")):
        section = dict(config.get(precision, {}))
        if section.get("enabled", "auto") == "auto":
            section["enabled"] = wanted
        config[precision] = section
    config.setdefault("steps_per_print", 10**9)
    return config


class DeepSpeedInferStrategy(InferenceStrategy):
    """Forward-only (reference / old log-probs). ZeRO-3 shards the weights across ranks; lower stages
    keep a full copy per rank, so a plain module is enough."""

    roles = frozenset({"score"})
    sum_pi_squared = True
    vision_language = True
    dynamic_batching_infer = True
    sequence_packing = True
    log_prob_kernels = "transformers"  # hf_logits through the HF module DeepSpeed wraps

    def initialize(self, total_steps: int = 0) -> None:
        self.ds_config = resolve_ds_infer_config(
            self.config.strategy_args.strategy_config, self.world_size, self.config.model_args.dtype
        )
        if zero_stage(self.ds_config) != 3:
            super().initialize(total_steps)
            return
        import deepspeed

        _init_deepspeed_distributed()
        self.model, *_ = deepspeed.initialize(model=self.load_model(), config=self.ds_config)
        self.model.eval()

    @property
    def module(self) -> torch.nn.Module:
        return getattr(self.model, "module", self.model)

    def _align_forwards(self, micros: list[DataProto], batch: DataProto):
        if zero_stage(self.ds_config) == 3:  # weights are gathered inside each forward: same count on every rank
            return align_forward_counts(micros, batch)
        return super()._align_forwards(micros, batch)

    def named_hf_parameters(self):
        """Full weights with HF names. Under ZeRO-3 every rank must call this (it gathers shards)."""
        return DeepSpeedTrainStrategy.named_full_parameters(self)

    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        """Full HF-named tensors on every rank. Under ZeRO-3 (collective) each parameter is gathered, set
        from rank 0's copy and re-partitioned."""
        if zero_stage(self.ds_config) != 3:
            super().load_weights(named_tensors)
            return
        import deepspeed

        params = dict(self.module.named_parameters())
        weights = dict(named_tensors)
        unknown, missing = sorted(set(weights) - set(params)), sorted(set(params) - set(weights))
        if unknown or missing:
            raise KeyError(
                f"{self.config.name}: weights do not match the model: unknown {unknown[:3]}, missing {missing[:3]}"
            )
        for name, param in params.items():
            with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                if self.rank == 0:
                    param.copy_(weights[name].to(param.device, param.dtype))

    def state_checksum(self) -> float:
        return checksum(self.named_hf_parameters())


def _gathered_one_by_one(deepspeed, params):
    for name, param in params:
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            full = param.detach().cpu().clone()
        yield name, full
