"""`fsdp2_train` / `fsdp2_infer`: torch FSDP2 (`torch.distributed.fsdp.fully_shard`) over all ranks of
the role (gloo on CPU, NCCL on GPU).

Every rank loads the HF folder, then each module class in `wrap_modules` (default: the model's
`_no_split_modules`, i.e. its decoder layers) and finally the root are sharded over a 1-D device mesh
of `world_size` ranks (ROLL's `fsdp_size` dividing the world: a 2-D mesh, sharded within groups of that many
ranks and replicated across them). Parameters become DTensors sharded on dim 0; the optimizer (AdamW from
training_args) holds only this rank's shards. `model_args.ulysses_size` splits each row's sequence over groups
of ranks (roll/strategies/ulysses.py).

`strategy_config` keys (all optional; an unknown key is an error naming the valid ones):
    reshard_after_forward  true (default): free gathered weights after each forward (ZeRO-3-like);
                           false: keep them until backward (ZeRO-2-like, more memory, fewer all-gathers)
    cpu_offload            false (default); true: FSDP2's CPUOffloadPolicy — sharded parameters, gradients
                           and the optimizer step live in host memory (GPU only; ignored on CPU)
    param_dtype            "auto" (default) = model_args.dtype; the dtype forward/backward compute in.
                           Master weights and optimizer state are always float32: with bfloat16 this is
                           FSDP2 mixed precision, the same split DeepSpeed's bf16 mode makes.
    reduce_dtype           "float32" (default): the dtype gradients are reduce-scattered in
    wrap_modules           null (default) = model._no_split_modules; or a list of module class names
                           sharded as their own units
    apply_tiled_mlp        false (default); true: ROLL's tiled MLP (roll/strategies/tiled_mlp.py)
    tiled_num_shards       4 (default): its chunks along the sequence, an integer >= 1
    keep_resident          false (default); true: the role stays on its GPU while colocated roles run (no
                           offload/reload around their phases: for a GPU with memory for every role at once;
                           the round trip is exact, so results are the same). roll's own key
    moe_use_grouped_mm     false (default); true: a MoE model's experts use transformers' "grouped_mm" kernel
                           (ROLL's key; transformers picks it by default where it can, true makes it required;
                           a model without MoE experts is an error, as in ROLL)
ROLL's wrap_policy (transformer_layer_cls_to_wrap = wrap_modules; wrap_embeddings / wrap_lm_output /
moe_experts: extra units, roll/strategies/fsdp2_units.py), offload_policy and fsdp_size are taken too.

Gradient accumulation: each micro-batch's loss is divided by gradient_accumulation_steps before
backward; FSDP2 reduce-scatters (averages over ranks) after every backward and accumulates the sharded
gradients; then one clip (training_args.max_grad_norm) and one AdamW + LR-scheduler step per train_step.

Checkpoints (`save_checkpoint(path)`): `path/fsdp2/` is a torch.distributed.checkpoint (sharded, one
file per rank, reshardable to another world size) of model and optimizer state, plus the LR scheduler
in `path/fsdp2/scheduler.pt`; `path/hf/` is a full HF copy (weights gathered to rank 0, tokenizer).
"""

from pathlib import Path

import torch

from roll.distributed.data_proto import DataProto
from roll.models.vl import ULYSSES_VL_LIMIT, is_vl_config
from roll.strategies.base import DTYPES, InferenceStrategy, TrainStrategy
from roll.strategies.batching import hf_logits
from roll.strategies.fsdp2_units import extra_units
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
from roll.strategies.offload import ParkedOffload
from roll.strategies.tiled_mlp import TILED_MLP_CLASSES, enable_tiled_mlp
from roll.strategies.train_common import (
    EvalModeScoring,
    align_forward_counts,
    broadcast_parameters,
    build_adamw,
    build_lr_scheduler,
    checksum,
    freeze_by_prefix,
    gradient_clip_value,
    mean_metrics,
    save_tokenizer,
    split_train_batch,
)
from roll.strategies.ulysses import enable_ulysses, layout, ulysses_logits, ulysses_size_of
from roll.utils.checkpoint import load_state
from roll.utils.logging import get_logger

config_logger = get_logger(__name__)

FSDP2_DEFAULTS = {
    "reshard_after_forward": True,
    "cpu_offload": False,
    "param_dtype": "auto",
    "reduce_dtype": "float32",
    "wrap_modules": None,
    "apply_tiled_mlp": False,  # ROLL's tiled MLP (roll/strategies/tiled_mlp.py)
    "tiled_num_shards": 4,  # its chunks along the sequence (ROLL's default)
    "keep_resident": False,  # roll's: no offload/reload around colocated roles' phases
    "moe_use_grouped_mm": False,  # ROLL's: the MoE experts computed with transformers' "grouped_mm" kernel
}
# ROLL's keys: offload_policy = cpu_offload; fsdp_size = shard-group size (hybrid sharding when it divides the world);
# wrap_policy.transformer_layer_cls_to_wrap = wrap_modules
ROLL_FSDP2_KEYS = ("offload_policy", "fsdp_size", "wrap_policy")
# keys of ROLL's example YAMLs that ROLL's own FSDP2 strategy never reads: accepted with a logged note
ROLL_IGNORED_FSDP2_KEYS = {
    "use_batched_model_update": "ROLL's FSDP2 strategy never reads it (roll's weight sync is bucketed by "
    "model_update_buffer_size_mb)",
    # ROLL's apply_fsdp2 turns it off itself (with a warning) for transformers >= 5.2.0, whose MoE experts are
    # fused; roll requires transformers 5.x, so ROLL ignores it here too
    "apply_expert_patch": "ROLL's apply_fsdp2 sets it to false itself with transformers >= 5.2.0 (fused MoE "
    "experts), the transformers roll runs on, so ROLL ignores it here too (its value still gates "
    "wrap_policy.moe_experts, as in ROLL)",
}
# ROLL FSDP2 keys for features roll does not build: refused with the reason (a value of 1 turns them off: taken)
_FSDP2_EP = (
    "ROLL's expert parallelism inside FSDP2 (MoE experts sharded over an efsdp_size × ep_size mesh) is not built; "
    "roll's expert parallelism is megatron_train's expert_model_parallel_size (set it to 1 to shard the experts "
    "as the other parameters)"
)
ROLL_UNBUILT_FSDP2_KEYS: dict[str, str] = {"ep_size": _FSDP2_EP, "efsdp_size": _FSDP2_EP}
CHECKPOINT_DIR, SCHEDULER_FILE = "fsdp2", "scheduler.pt"


# ROLL's wrap_policy: transformer_layer_cls_to_wrap = wrap_modules; the others set extra fully_shard units
WRAP_POLICY_KEYS = ("transformer_layer_cls_to_wrap", "wrap_embeddings", "wrap_lm_output", "moe_experts")
WRAP_EXTRA_DEFAULTS = {"wrap_embeddings": False, "wrap_lm_output": False, "moe_experts": None, "expert_patch": False}


def _class_names(value, key: str) -> list[str] | None:
    """A class name or a list of them (ROLL takes either); None/empty = none."""
    names = [value] if isinstance(value, str) else value
    if names is not None and (not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names)):
        raise ValueError(f"fsdp2 strategy_config.wrap_policy.{key}={value!r}: expected a list of module class names")
    return list(names or []) or None


def _roll_wrap_policy(policy) -> tuple[list[str] | None, dict]:
    """ROLL's wrap_policy: (the layer classes = wrap_modules, the extra units: wrap_embeddings, wrap_lm_output,
    moe_experts)."""
    if policy is None:
        return None, {}
    if not isinstance(policy, dict) or set(policy) - set(WRAP_POLICY_KEYS):
        raise ValueError(f"fsdp2 strategy_config.wrap_policy={policy!r}: valid keys are {list(WRAP_POLICY_KEYS)}")
    extra = {}
    for key in ("wrap_embeddings", "wrap_lm_output"):
        if not isinstance(policy.get(key, False), bool):
            raise ValueError(f"fsdp2 strategy_config.wrap_policy.{key}={policy[key]!r}: expected true or false")
        extra[key] = policy.get(key, False)
    extra["moe_experts"] = _class_names(policy.get("moe_experts"), "moe_experts")
    return _class_names(policy.get("transformer_layer_cls_to_wrap"), "transformer_layer_cls_to_wrap"), extra


def resolve_fsdp2_config(strategy_config, model_dtype: str, world_size: int | None = None) -> dict:
    """strategy_config with defaults filled in; unknown keys and bad values are errors."""
    given = dict(strategy_config or {})
    # ROLL wraps moe_experts only when apply_expert_patch is set (its raw value, though the patch itself is off)
    expert_patch = given.get("apply_expert_patch") is True
    for key in sorted(set(given) & set(ROLL_IGNORED_FSDP2_KEYS)):
        config_logger.warning("fsdp2 strategy_config.%s is ignored: %s", key, ROLL_IGNORED_FSDP2_KEYS[key])
        del given[key]
    for key in set(given) & set(ROLL_UNBUILT_FSDP2_KEYS):
        if given[key] == 1 and not isinstance(given[key], bool):  # ROLL's default: the feature is off
            del given[key]
    unbuilt = sorted(set(given) & set(ROLL_UNBUILT_FSDP2_KEYS))
    if unbuilt:
        raise ValueError(
            "; ".join(
                f"fsdp2 strategy_config.{key} (ROLL's) is refused: {ROLL_UNBUILT_FSDP2_KEYS[key]}" for key in unbuilt
            )
        )
    unknown = sorted(set(given) - set(FSDP2_DEFAULTS) - set(ROLL_FSDP2_KEYS))
    if unknown:
        raise ValueError(
            f"fsdp2 strategy_config has unknown keys {unknown}; valid: {sorted(FSDP2_DEFAULTS)} "
            f"(ROLL's {list(ROLL_FSDP2_KEYS)} too; a DeepSpeed config such as ${{deepspeed_zero2}} does not apply "
            f"to fsdp2: set strategy_config to null or to these keys)"
        )
    layers, wrap_extra = _roll_wrap_policy(given.pop("wrap_policy", None))
    if layers is not None and given.setdefault("wrap_modules", layers) != layers:
        raise ValueError(f"fsdp2 strategy_config.wrap_policy={layers!r} conflicts with wrap_modules: set one")
    policy = given.pop("offload_policy", None)
    if policy is not None:
        if given.setdefault("cpu_offload", policy) != policy:
            raise ValueError(f"fsdp2 strategy_config.offload_policy={policy!r} conflicts with cpu_offload: set one")
    shard_group = _shard_group(given.pop("fsdp_size", None), world_size)
    config = {**FSDP2_DEFAULTS, **given, "shard_group": shard_group, **WRAP_EXTRA_DEFAULTS, **wrap_extra}
    config["expert_patch"] = expert_patch
    for key in ("reshard_after_forward", "cpu_offload", "apply_tiled_mlp", "keep_resident", "moe_use_grouped_mm"):
        if not isinstance(config[key], bool):
            raise ValueError(f"fsdp2 strategy_config.{key}={config[key]!r}: expected true or false")
    shards = config["tiled_num_shards"]
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"fsdp2 strategy_config.tiled_num_shards={shards!r}: expected an integer >= 1")
    if config["param_dtype"] == "auto":
        config["param_dtype"] = model_dtype
    for key in ("param_dtype", "reduce_dtype"):  # ROLL's spellings (bf16, fp16, fp32) too
        config[key] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(config[key], config[key])
    for key in ("param_dtype", "reduce_dtype"):
        if config[key] not in DTYPES:
            raise ValueError(
                f"fsdp2 strategy_config.{key}={config[key]!r}; valid: {sorted(DTYPES)} "
                f"(param_dtype also 'auto' = model_args.dtype)"
            )
    wrap = config["wrap_modules"]
    if wrap is not None and (isinstance(wrap, str) or not all(isinstance(name, str) for name in wrap)):
        raise ValueError(f"fsdp2 strategy_config.wrap_modules={wrap!r}: expected a list of module class names")
    return config


def _shard_group(size, world_size: int | None) -> int | None:
    """ROLL's fsdp_size: null, -1, ≤ 1 or ≥ the world = shard over all ranks (None); otherwise hybrid sharding,
    each parameter sharded over groups of `size` consecutive ranks and replicated across the groups."""
    if size is None or (
        isinstance(size, int) and not isinstance(size, bool) and (size <= 1 or size >= (world_size or size))
    ):
        return None
    if isinstance(size, bool) or not isinstance(size, int) or (world_size and world_size % size):
        raise ValueError(
            f"fsdp2 strategy_config.fsdp_size={size!r}: expected an integer that divides the role's "
            f"{world_size or '?'} ranks (hybrid sharding groups), or null / -1 / ≥ the world size (all ranks)"
        )
    return size


def init_process_group() -> None:
    """The default process group from the RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT env the Worker sets."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def _device() -> torch.device:
    if torch.cuda.is_available():
        import os

        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def shard_model(
    model: torch.nn.Module, world_size: int, fsdp_config: dict, device: torch.device, logger
) -> torch.nn.Module:
    """fully_shard each `wrap_modules` unit, then the root (which takes the remaining parameters:
    embeddings, final norm, output layer). Module and parameter names stay the HF ones."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    group = fsdp_config.get("shard_group")
    if group is None:
        mesh = init_device_mesh(device.type, (world_size,))
    else:  # HSDP: fully_shard shards over the inner dimension and replicates (all-reduces) over the outer one
        mesh = init_device_mesh(device.type, (world_size // group, group), mesh_dim_names=("replicate", "shard"))
    param_dtype, reduce_dtype = DTYPES[fsdp_config["param_dtype"]], DTYPES[fsdp_config["reduce_dtype"]]
    stored_dtype = next(model.parameters()).dtype
    mp_policy = MixedPrecisionPolicy(
        param_dtype=None if param_dtype == stored_dtype else param_dtype,
        reduce_dtype=None if reduce_dtype == stored_dtype else reduce_dtype,
    )
    offload_policy = OffloadPolicy()
    if fsdp_config["cpu_offload"]:
        if device.type == "cpu":
            logger.info(
                "fsdp2: cpu_offload=true has nothing to do on a CPU-only machine (everything is in host "
                "memory already); ignored"
            )
        else:
            offload_policy = CPUOffloadPolicy(pin_memory=True)
    unit_names = fsdp_config["wrap_modules"]
    if unit_names is None:
        unit_names = list(getattr(model, "_no_split_modules", None) or [])
    broadcast_parameters(model, device)
    units = [m for m in model.modules() if type(m).__name__ in set(unit_names)]
    if unit_names and not units:
        raise ValueError(
            f"fsdp2 strategy_config.wrap_modules={unit_names}: no module of {type(model).__name__} "
            f"has one of these class names"
        )
    kwargs = {
        "mesh": mesh,
        "reshard_after_forward": fsdp_config["reshard_after_forward"],
        "mp_policy": mp_policy,
        "offload_policy": offload_policy,
    }
    first, last = extra_units(model, fsdp_config, logger)
    for unit in first + units + last:  # inner units before the modules holding them (MoE experts in layers)
        if not isinstance(unit, FSDPModule):
            fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    logger.info(
        "fsdp2: %d %s units + root sharded over %s ranks (%s)",
        len(units),
        "/".join(unit_names) or "no",
        world_size if group is None else f"groups of {group} (replicated {world_size // group}×) of {world_size}",
        ", ".join(
            f"{k}={fsdp_config[k]}" for k in ("reshard_after_forward", "param_dtype", "reduce_dtype", "cpu_offload")
        ),
    )
    return model


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every rank (a collective for a sharded DTensor: every rank must call it)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


class FSDP2InferStrategy(ParkedOffload, InferenceStrategy):
    """Forward only (reference log-probs, values): weights sharded, gathered layer by layer per forward."""

    roles = frozenset({"score"})
    sum_pi_squared = True
    dynamic_batching_infer = True
    sequence_packing = True
    ulysses = True  # model_args.ulysses_size: groups of ranks split each row's sequence (roll/strategies/ulysses.py)
    vision_language = True  # VL models without Ulysses (the config checks refuse the pair)
    log_prob_kernels = "transformers"  # hf_logits through the fully_shard-ed HF module
    ulysses_group = None  # this rank's Ulysses group (None: off)

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        resolve_fsdp2_config(strategy_config, dtype, world_size)

    def initialize(self, total_steps: int = 0) -> None:
        init_process_group()
        self.device = _device()
        self.fsdp_config = resolve_fsdp2_config(
            self.config.strategy_args.strategy_config, self.config.model_args.dtype, self.world_size
        )
        # sharded in host memory: fully_shard moves each unit to the mesh device itself, one unit at a time
        model = self._with_tiled_mlp(
            self._with_ulysses(self._with_experts_kernel(self.load_model(dtype=self._stored_dtype())))
        )
        self.model = shard_model(model, self.world_size, self.fsdp_config, self.device, self.logger)
        self.model.eval()

    def _with_experts_kernel(self, model: torch.nn.Module) -> torch.nn.Module:
        """moe_use_grouped_mm: the experts' kernel set to "grouped_mm" (ROLL sets the experts'
        _experts_implementation; transformers' setter does the same and checks the model has experts)."""
        if self.fsdp_config["moe_use_grouped_mm"]:
            if not model._can_set_experts_implementation():
                raise ValueError(
                    f"fsdp2 strategy_config.moe_use_grouped_mm: {type(model).__name__} has no MoE experts whose "
                    "kernel could be chosen; remove the key (ROLL fails on such a model too)"
                )
            model.set_experts_implementation("grouped_mm")
        return model

    def _with_ulysses(self, model: torch.nn.Module) -> torch.nn.Module:
        """model_args.ulysses_size > 1: this rank's group, and the model's attention switched to the Ulysses
        wrapper around its own kernel (before sharding and LoRA)."""
        size = ulysses_size_of(self.config.model_args)
        if size > 1 and is_vl_config(model.config):
            raise ValueError(f"{self.config.name}: {ULYSSES_VL_LIMIT}")
        if size > 1:
            self.ulysses_group, self._ulysses_kernel = enable_ulysses(model, size)
            self.logger.info(
                "ulysses: sequence split over %d ranks (group rank %d) around %s attention",
                size,
                self.ulysses_group.rank,
                self._ulysses_kernel,
            )
        return model

    def _with_tiled_mlp(self, model: torch.nn.Module) -> torch.nn.Module:
        """apply_tiled_mlp: every decoder layer's MLP computed in tiled_num_shards sequence chunks (instances
        patched, before sharding and LoRA)."""
        if self.fsdp_config["apply_tiled_mlp"]:
            shards = self.fsdp_config["tiled_num_shards"]
            tiled = enable_tiled_mlp(model, shards)
            if tiled:
                self.logger.info("fsdp2: tiled MLP in %d MLPs, %d chunks each", len(tiled), shards)
            else:  # ROLL patches these classes only and runs such a model untiled too
                self.logger.warning(
                    "fsdp2 strategy_config.apply_tiled_mlp: %s has no %s module, nothing is tiled (as in ROLL)",
                    type(model).__name__,
                    "/".join(TILED_MLP_CLASSES),
                )
        return model

    def data_parallel_info(self) -> dict:
        """With Ulysses the ranks of a group share a data-parallel rank (the same rows); the first reports."""
        return layout(self.rank, self.world_size, ulysses_size_of(self.config.model_args))

    def _logits(self, micro: DataProto) -> torch.Tensor:
        """hf_logits, or its Ulysses twin: the same (rows, T, V) logits on every rank of the group."""
        if self.ulysses_group is None:
            return hf_logits(self.model, micro, self.device, self.config.use_sequence_packing)
        dtype = DTYPES[self.fsdp_config["param_dtype"]]
        group, packing = self.ulysses_group, self.config.use_sequence_packing
        return ulysses_logits(self.model, micro, self.device, group, self._ulysses_kernel, dtype, packing)

    def _stored_dtype(self) -> torch.dtype:
        """Forward only: keep the weights in the compute dtype (no master copy needed)."""
        return DTYPES[self.fsdp_config["param_dtype"]]

    def _align_forwards(self, micros: list[DataProto], batch: DataProto):
        return align_forward_counts(micros, batch)

    def forward_logits(self, micro: DataProto) -> torch.Tensor:
        return self._logits(micro).float().cpu()

    # --- weights --------------------------------------------------------------------------------------
    def named_full_parameters(self, only=None):
        """Full (gathered) parameters (or those whose name passes `only`) under the module's own names (with
        LoRA: peft's names, adapters included), one tensor at a time: a collective per parameter, so every
        rank must consume the whole iterator, in the same order."""
        for name, param in self.model.named_parameters():
            if only is not None and not only(name):
                continue
            param = param.detach()
            if param.device != self.device:  # cpu_offload on GPU: NCCL gathers device tensors
                param = param.to(self.device)
            yield name, full_tensor(param)

    def named_hf_parameters(self):
        """Full weights with HF names (with LoRA: the base model's names, adapters merged in); collective as
        named_full_parameters."""
        if getattr(self, "_lora_on", False):
            return merged_hf_parameters(self.named_full_parameters(), lora_scalings(self.model))
        return self.named_full_parameters()

    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        """Full HF-named tensors (every rank gets all of them); each rank keeps its own shards."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        state = {name: tensor for name, tensor in named_tensors}
        known = {name for name, _ in self.model.named_parameters()}
        unknown, missing = sorted(set(state) - known), sorted(known - set(state))
        if unknown or missing:
            raise KeyError(
                f"{self.config.name}: weights do not match the model: unknown {unknown[:3]}, missing {missing[:3]}"
            )
        set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True, strict=False))

    def state_checksum(self) -> float:
        """Collective: every rank must call it."""
        return checksum(self.named_hf_parameters())

    # --- memory ---------------------------------------------------------------------------------------
    def offload_frees_memory(self) -> bool:
        """strategy_config.keep_resident: the pipeline never offloads this role (see the module docstring)."""
        keep = resolve_fsdp2_config(self.config.strategy_args.strategy_config, self.config.model_args.dtype)
        return not keep["keep_resident"] and super().offload_frees_memory()

    def offload(self) -> None:
        """Frees any gathered (unsharded) weights, then parks this rank's shards (and, training, their
        gradients and AdamW moments) in host memory (roll/strategies/offload.py). With cpu_offload they
        live on the host already and nothing is moved."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
        super().offload()

    def _offload_groups(self) -> dict:
        return {"parameters": list(self.model.parameters())}


class FSDP2TrainStrategy(EvalModeScoring, LoraExport, FSDP2InferStrategy, TrainStrategy):
    roles = frozenset({"train", "critic"})
    lora = True  # actor_train with model_args.lora_* (roll/strategies/lora.py)
    freeze_module_prefix = True
    dynamic_batching_train = True

    def initialize(self, total_steps: int = 0) -> None:
        init_process_group()
        self.device = _device()
        args = self.config.training_args
        self.fsdp_config = resolve_fsdp2_config(
            self.config.strategy_args.strategy_config, self.config.model_args.dtype, self.world_size
        )
        model = self._with_tiled_mlp(
            self._with_ulysses(self._with_experts_kernel(self.load_model(dtype=self._stored_dtype())))
        )
        if not self.config.model_args.disable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        freeze_by_prefix(model, self.config.model_args.frozen_prefixes, self.logger)
        self._lora_on = self.config.model_args.lora
        if self._lora_on:  # only the adapters require gradients: the optimizer below holds only them
            model = apply_lora(model, self.config.model_args, self.logger)
        self.model = shard_model(model, self.world_size, self.fsdp_config, self.device, self.logger)
        self.optimizer = build_adamw([p for p in self.model.parameters() if p.requires_grad], args)
        self.scheduler = build_lr_scheduler(self.optimizer, args, total_steps)
        self.model.train()

    def _stored_dtype(self) -> torch.dtype:
        """float32 master weights and optimizer state; param_dtype (if lower) is FSDP2 mixed precision."""
        return torch.float32

    # --- training -------------------------------------------------------------------------------------
    def train_step(self, batch: DataProto, loss_fn) -> dict:
        micros = split_train_batch(self.config, batch)
        history: dict[str, list] = {}
        self.optimizer.zero_grad(set_to_none=True)
        for micro in micros:
            loss, metrics = loss_fn(micro.to(self.device), self._logits(micro))
            # FSDP2 averages the gradients over ranks in its reduce-scatter (with Ulysses: see ulysses.py)
            (loss / len(micros)).backward()
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), gradient_clip_value(self.config.training_args.max_grad_norm)
        )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        out = mean_metrics(history)
        out["grad_norm"] = float(full_tensor(grad_norm))  # before clipping, as DeepSpeed reports it
        out["lr"] = self.scheduler.get_last_lr()[0]
        return out

    # --- checkpoints ----------------------------------------------------------------------------------
    def save_checkpoint(self, path: str) -> None:
        """Collective. Sharded model + optimizer state (torch.distributed.checkpoint), the LR schedule, and a
        full HF copy in `path/hf` (gathered to rank 0)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict

        engine_dir = Path(path) / CHECKPOINT_DIR
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer, options=self._state_options())
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(engine_dir))
        if self._lora_on:  # adapters only in the engine state; adapter/ (peft format) and the merged hf/ copy
            full = dict(self.named_full_parameters())
            merged = dict(merged_hf_parameters(full.items(), lora_scalings(self.model)))
            if self.rank == 0:
                torch.save(
                    {"scheduler": self.scheduler.state_dict(), "world_size": self.world_size},
                    engine_dir / SCHEDULER_FILE,
                )
                save_adapter(self.module, adapter_state(full.items()), Path(path) / ADAPTER_DIR)
                save_merged_hf(self.module, merged, Path(path) / "hf")
                save_tokenizer(self.config.model_args.model_name_or_path, Path(path) / "hf", self.logger)
            dist.barrier()
            return
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank == 0:
            torch.save(
                {"scheduler": self.scheduler.state_dict(), "world_size": self.world_size}, engine_dir / SCHEDULER_FILE
            )
            self.module.save_pretrained(str(Path(path) / "hf"), state_dict=full)
            save_tokenizer(self.config.model_args.model_name_or_path, Path(path) / "hf", self.logger)
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Collective. Restores weights, AdamW state and the LR schedule exactly (any world size: the
        sharded checkpoint is resharded on load)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        engine_dir = Path(path) / CHECKPOINT_DIR
        if not (engine_dir / SCHEDULER_FILE).is_file():
            raise FileNotFoundError(
                f"{self.config.name}: {path} has no complete fsdp2 checkpoint "
                f"({CHECKPOINT_DIR}/{SCHEDULER_FILE} missing)"
            )
        options = self._state_options()
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer, options=options)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(engine_dir))
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=options,
        )
        extra = load_state(engine_dir / SCHEDULER_FILE)
        self.scheduler.load_state_dict(extra["scheduler"])

    def _state_options(self):
        """With LoRA the engine checkpoint holds the adapters only: the frozen base is model_name_or_path."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(ignore_frozen_params=self._lora_on, strict=not self._lora_on)

    def compute_reference_log_probs(self, batch: DataProto) -> torch.Tensor:
        """Log-probs of the frozen base model: the LoRA actor with its adapters disabled (no reference role)."""
        with adapters_disabled(self.model):
            return self.compute_log_probs(batch)

    # --- memory ---------------------------------------------------------------------------------------
    def _offload_groups(self) -> dict:
        params = list(self.model.parameters())
        return {
            "parameters": params,
            "gradients": [p.grad for p in params],
            "optimizer": [value for state in self.optimizer.state.values() for value in state.values()],
        }
