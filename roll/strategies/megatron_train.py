"""`megatron_train` / `megatron_infer`: megatron-core GPTModel (local, non-TransformerEngine spec) with
tensor, pipeline, expert and data parallelism for Qwen2, Llama, Qwen3 and Qwen3-MoE, loaded from an HF checkpoint
by roll's own converter (roll/strategies/megatron/convert.py) and exported back to HF names for weight sync.

On a machine without CUDA, roll.platforms.megatron_cpu (pinned to megatron-core 0.16.1) redirects
megatron-core's hard-coded CUDA calls to the CPU and the process groups use gloo.

`strategy_config` keys (all optional; an unknown key is an error naming the valid ones):
    tensor_model_parallel_size       1   Megatron TP (attention heads / MLP / vocab split over ranks)
    pipeline_model_parallel_size     1   PP: layers split evenly over stages (1F1B schedule)
    virtual_pipeline_model_parallel_size  null  interleaved PP — not supported here (error if set)
    context_parallel_size            1   CP — needs TransformerEngine attention: error if > 1
    expert_model_parallel_size       1   EP: experts split over ranks (MoE models; dense ones: error if > 1)
    sequence_parallel                false  megatron's sequence parallelism at TP > 1 (roll's RMSNorm tagged for the TP
                                     gradient sum; inputs padded to a multiple of TP); at TP 1 turned off with a
                                     warning, as in ROLL
    recompute_granularity            null | "full" | "selective" (activation recomputation)
    use_distributed_optimizer        false  ZeRO-1-like sharding of optimizer state over data-parallel ranks
    overlap_grad_reduce              false  overlap DP gradient reduce with backward (bucketed; async collectives,
                                     run on CPU/gloo too)
    overlap_param_gather             false  with the distributed optimizer; refused on a CPU-only machine
    moe_router_topk                  null  must equal the model's num_experts_per_tok (null: take it)
    moe_aux_loss_coeff               null  load-balancing loss weight (null: the model's router_aux_loss_coef)
    moe_token_dispatcher_type        "allgather" | "alltoall"
    moe_router_load_balancing_type   "aux_loss" (also seq_aux_loss, global_aux_loss, sinkhorn, none)
    moe_grouped_gemm                 false  true needs megatron-core's grouped GEMM kernels (error without them)
    moe_layer_recompute              false  ROLL's: recompute the MoE layers (megatron's selective "moe")
                                     The MoE keys need an MoE model (qwen3_moe); with a dense one a non-default
                                     value is an error when the model is built (roll/strategies/megatron/moe.py)
    seed                             1234  the model-parallel RNG seed (dropout is 0 in the converted model)
    bf16, fp16                       null  ROLL's precision flags: must agree with model_args.dtype
    bias_activation_fusion, bias_dropout_fusion  false  megatron-core's plain-torch fusions (SwiGLU,
                                     bias-dropout-add); run and tested on CPU
    apply_rope_fusion                false  TransformerEngine >= 1.4's fused RoPE } accepted; building the model
    gradient_accumulation_fusion     false  Apex's fused_weight_gradient_mlp_cuda } without it is an error
    persist_layer_norm, masked_softmax_fusion, cross_entropy_loss_fusion (ROLL's)  refused (megatron/fusions.py,
                                     megatron/roll_keys.py say why)

Data: the Cluster's dispatch (Dispatch.DP_MP_COMPUTE, by `data_parallel_info`) gives every rank of one
model-parallel group (TP × PP, same data-parallel rank) the same shard, so a train_step sees its
data-parallel rank's per_device_train_batch_size × gradient_accumulation_steps rows on each of them; the
Cluster keeps the result of tensor rank 0 of the last pipeline stage.
With model_args.lora_* (actor_train): LoRA adapters on the fused linears (roll/strategies/megatron/lora.py).
With use_sequence_packing (PP 1): each micro-batch is one packed row under a block-diagonal causal mask.
Optimizer: megatron-core's (torch AdamW without apex/TE) with weight decay on every parameter, as
train_common.build_adamw; the LR follows train_common.lr_lambda, set on the param groups before each
step; clipping at training_args.max_grad_norm by megatron's clip_grad (total norm over all TP/PP/DP
shards), reported grad_norm is the pre-clip norm.
"""

from pathlib import Path

import torch
import torch.distributed as dist

from roll.distributed.data_proto import DataProto
from roll.strategies.base import DTYPES, InferenceStrategy, TrainStrategy
from roll.strategies.batching import max_over_ranks, pack, restore_order, scoring_micro_batches
from roll.strategies.megatron import convert
from roll.strategies.megatron import lora as megatron_lora
from roll.strategies.megatron.config import MODEL_PARALLEL_KEYS, resolve_megatron_config
from roll.strategies.megatron.model import init_megatron
from roll.strategies.megatron.moe import check_moe_training
from roll.strategies.offload import ParkedOffload
from roll.strategies.train_common import (
    checksum,
    gradient_clip_value,
    lr_lambda,
    mean_metrics,
    save_tokenizer,
    split_train_batch,
    warmup_steps,
)
from roll.utils.checkpoint import load_state
from roll.utils.functional import response_log_probs, slice_response_logits

CHECKPOINT_DIR = "megatron"


def check_micro_batching(config, parallel: dict) -> None:
    """Dynamic batching and sequence packing vary micro-batch shapes, which the pipeline schedules' fixed p2p
    shapes do not allow (PP 1 only)."""
    reason = MegatronInferStrategy.dynamic_batching_limit(parallel)
    for enabled in ("use_dynamic_batching_in_train", "use_dynamic_batching_in_infer", "use_sequence_packing"):
        if getattr(config, enabled) and reason:
            raise ValueError(f"{config.name}.{enabled} with megatron: {reason}")


class MegatronInferStrategy(ParkedOffload, InferenceStrategy):
    """Forward only (reference log-probs): the converted GPTModel, TP/PP-sharded."""

    roles = frozenset({"score"})
    vision_language_limit = (
        "roll's Megatron conversion builds causal-LM families only (megatron/convert.py SUPPORTED_MODEL_TYPES): a "
        "Qwen-VL vision tower and its M-RoPE have no converter or GPTModel layer spec here; train VL models with "
        "deepspeed_train or fsdp2_train"
    )
    sum_pi_squared = True
    dynamic_batching_infer = True  # pipeline_model_parallel_size 1 only (dynamic_batching_limit)
    sequence_packing = True  # the same; one packed row with a block-diagonal causal mask (model.packed_forward)
    training = False

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        resolve_megatron_config(strategy_config, world_size, dtype)

    @classmethod
    def data_parallel_size(cls, world_size: int, strategy_config: dict | None) -> int:
        """world_size / (TP × PP × CP): the ranks of one model-parallel group share a shard."""
        settings = strategy_config or {}
        model_parallel = 1
        for key in MODEL_PARALLEL_KEYS:
            model_parallel *= int(settings.get(key, 1))
        if world_size % model_parallel:
            raise ValueError(
                f"world_size {world_size} is not divisible by tensor × pipeline × context parallel size = "
                f"{model_parallel}; change device_mapping or the parallel sizes"
            )
        return world_size // model_parallel

    @classmethod
    def dynamic_batching_limit(cls, strategy_config: dict | None) -> str | None:
        if int((strategy_config or {}).get("pipeline_model_parallel_size", 1)) > 1:
            return "needs pipeline_model_parallel_size 1 (pipeline stages exchange fixed shapes)"
        return None

    def initialize(self, total_steps: int = 0) -> None:
        from megatron.core import parallel_state as ps
        from transformers import AutoConfig

        from roll.strategies.megatron import model as mm

        self.parallel = resolve_megatron_config(
            self.config.strategy_args.strategy_config, self.world_size, self.config.model_args.dtype
        )
        check_micro_batching(self.config, self.parallel)
        init_megatron(self.parallel)
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        if getattr(self.worker, "model_kind", "causal_lm") != "causal_lm":
            raise ValueError("megatron strategies serve causal LMs only (actor_train / reference), not the critic")
        self.tp_size, self.tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
        self.pp_size, self.pp_rank = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
        self.hf_config = AutoConfig.from_pretrained(self.config.model_args.model_name_or_path)
        convert.check_supported(self.hf_config)
        if self.training:
            check_moe_training(self.hf_config, self.parallel, lora=self.config.model_args.lora)
        # model_args.dtype is the dtype of the model's parameters; training in bf16/fp16 keeps fp32 main
        # (master) weights in megatron's optimizer (_wrap_for_training)
        self.tf_config = mm.transformer_config(
            self.hf_config,
            self.parallel,
            params_dtype=DTYPES[self.config.model_args.dtype],
            where=f"{self.config.name}.strategy_args.strategy_config",
        )
        self.model = mm.build_gpt_model(
            self.hf_config,
            self.tf_config,
            self.tp_size,
            pre_process=self.pp_rank == 0,
            post_process=self.pp_rank == self.pp_size - 1,
        )
        self.model.to(self.device)
        self.load_weights(self._hf_state_from_disk())
        self.adapters = {}
        if self.training and self.config.model_args.lora:  # adapters before DDP: its buffers hold only them
            self.check_lora(self.config.model_args, self.parallel)
            self.adapters = megatron_lora.attach(
                self.module, self.config.model_args, self.tp_size, self.tp_rank, self.parallel["sequence_parallel"]
            )
        self._wrap_for_training(total_steps)
        self.model.train(self.training)

    def _wrap_for_training(self, total_steps: int) -> None:
        pass

    def _hf_state_from_disk(self):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.config.model_args.model_name_or_path, dtype=torch.float32)
        return list(model.named_parameters())  # tied lm_head is not a separate parameter

    @property
    def module(self):
        """The bare GPTModel (unwrapped from megatron's DDP)."""
        model = self.model
        while hasattr(model, "module"):
            model = model.module
        return model

    # --- data ---------------------------------------------------------------------------------------------
    def data_parallel_info(self) -> dict:
        """The ranks of one model-parallel group (TP × PP) share a data-parallel rank and get the same rows
        from the dispatch; tensor rank 0 of the last pipeline stage holds the group's result."""
        from megatron.core import parallel_state as ps

        return {
            "dp_rank": ps.get_data_parallel_rank(),
            "dp_size": ps.get_data_parallel_world_size(),
            "collect": self.tp_rank == 0 and self.pp_rank == self.pp_size - 1,
        }

    def _schedule(self, micros: list[DataProto], step_fn, forward_only: bool) -> None:
        """megatron's forward(/backward) schedule over `micros` (all of one size when PP > 1)."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        from roll.strategies.megatron import model as mm

        iterator = iter(micros)
        device = self.device
        packing = self.config.use_sequence_packing
        moe = convert.is_moe(self.hf_config)
        # sequence parallelism splits the sequence over the TP ranks: inputs padded to a multiple of TP, the
        # logits (gathered whole on every TP rank by the output layer) cut back to the real columns
        multiple = self.tp_size if self.parallel["sequence_parallel"] else 1

        def forward_step(data_iterator, model):
            micro = next(data_iterator)
            mask = micro.batch["attention_mask"].to(device)
            if packing:  # PP 1 only (check_micro_batching): the output is the last stage's, unpacked here
                ids, positions = (mm.pad_sequence(t.to(device), multiple) for t in pack(micro))
                tokens = int(mask.sum())
                # MoE: the tokens added for sequence parallelism stay out of the load-balancing loss
                extra = {"padding_mask": (torch.arange(ids.shape[1], device=device) >= tokens)[None]} if moe else {}
                output = model(ids, positions, mm.packed_attention_mask(positions), **extra)
                return output, lambda out, *args, **kwargs: step_fn(micro, mm.unpack(out[:, :tokens], mask))
            length = mask.shape[1]
            ids, positions, padded = (
                mm.pad_sequence(t, multiple)
                for t in (micro.batch["input_ids"].to(device), micro.batch["position_ids"].to(device), mask)
            )
            # MoE: padding tokens stay out of the load-balancing loss (HF's aux loss masks them too)
            extra = {"padding_mask": ~padded.bool()} if moe else {}
            output = model(ids, positions, mm.attention_mask(padded), **extra)
            return output, lambda out, *args, **kwargs: step_fn(micro, out[:, :length])

        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iterator,
            model=[self.model],
            num_microbatches=len(micros),
            seq_length=mm.pad_sequence(micros[0].batch["input_ids"][:1], multiple).shape[1],
            micro_batch_size=len(micros[0]),
            forward_only=forward_only,
        )

    def _vocab_logits(self, output: torch.Tensor) -> torch.Tensor:
        return output[..., : self.hf_config.vocab_size]

    def _broadcast_from_last_stage(self, obj):
        from megatron.core import parallel_state as ps

        if self.pp_size == 1:
            return obj
        holder = [obj]
        dist.broadcast_object_list(
            holder, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group()
        )
        return holder[0]

    @torch.no_grad()
    def _score(self, batch: DataProto, fn) -> torch.Tensor:
        """fn(micro, response-position logits over the real vocabulary) → (rows, R) for every row of this
        rank's data-parallel shard (the same rows on every rank of its model-parallel group), on every rank
        (eval mode, infer_batch_size chunks)."""
        size = self.config.infer_batch_size
        micros, order = scoring_micro_batches(self.config, batch)  # token-budget groups: PP 1 only
        keep_rows = len(micros[-1])
        if self.pp_size > 1 and keep_rows != size:  # the pipeline's p2p shapes are fixed per schedule
            last = micros[-1]
            micros[-1] = DataProto.concat([last] + [last[slice(keep_rows - 1, keep_rows)]] * (size - keep_rows))
        real = len(micros)
        micros += [micros[-1]] * (self._micro_count_of_ep_group(real) - real)  # scored, then dropped
        parts = []

        def step_fn(micro, output):
            responses = micro.batch["responses"]
            logits = slice_response_logits(self._vocab_logits(output), responses.shape[1])
            parts.append(fn(micro, logits).cpu())
            return output.new_zeros(()), {}

        was_training = self.model.training
        self.model.eval()
        try:
            self._schedule(micros, step_fn, forward_only=True)
        finally:
            self.model.train(was_training)
        parts = parts[:real]
        if parts:
            parts[-1] = parts[-1][:keep_rows]
        # the last stage's scores (small: rows × response length), so every rank returns its group's result
        return self._broadcast_from_last_stage(restore_order(torch.cat(parts), order) if parts else None)

    def _micro_count_of_ep_group(self, count: int) -> int:
        """With expert parallelism every forward exchanges tokens between the data-parallel ranks of an expert
        group, so they must run the same number of micro-batches: the largest count of any rank (shards may be
        uneven: the Cluster's dispatch, token-budget micro-batches). Training's count is already equal
        (split_train_batch)."""
        return max_over_ranks(count) if self._ep_size() > 1 else count

    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        temperature = batch.meta_info.get("temperature", 1.0)

        def fn(micro, logits):
            mask = micro.batch["response_mask"].to(logits.device)
            return response_log_probs(logits, micro.batch["responses"].to(logits.device), temperature) * mask

        return self._score(batch, fn)

    def compute_sum_pi_squared(self, batch: DataProto) -> torch.Tensor:
        temperature = batch.meta_info.get("temperature", 1.0)

        def fn(micro, logits):
            probs = (logits.float() / temperature).softmax(dim=-1)
            return probs.square().sum(dim=-1) * micro.batch["response_mask"].to(logits.device)

        return self._score(batch, fn)

    def compute_values(self, batch: DataProto) -> torch.Tensor:
        raise NotImplementedError(
            "megatron strategies serve causal LMs only; use deepspeed_train or fsdp2_train for the critic"
        )

    def forward_logits(self, micro: DataProto) -> torch.Tensor:
        raise NotImplementedError("megatron strategies score through megatron's schedules (_score), not forward_logits")

    # --- weights ------------------------------------------------------------------------------------------
    def _local_state(self) -> dict:
        return {k: v for k, v in self.module.state_dict().items() if not k.endswith("_extra_state")}

    @torch.no_grad()
    def load_weights(self, named_tensors) -> None:
        """Full HF-named tensors (every rank gets all of them); each rank keeps its TP/PP part."""
        from roll.strategies.megatron import model as mm

        hf_state = {name: tensor.detach().to("cpu", torch.float32) for name, tensor in named_tensors}
        expected = convert.hf_parameter_names(self.hf_config)
        unknown, missing = sorted(set(hf_state) - expected), sorted(expected - set(hf_state))
        if unknown or missing:
            raise KeyError(
                f"{self.config.name}: weights do not match the model: unknown {unknown[:3]}, missing {missing[:3]}"
            )
        full = convert.hf_to_mcore(hf_state, self.hf_config, self.tp_size)
        stage = convert.select_pp(
            full, self.hf_config.num_hidden_layers, self.pp_size, self.pp_rank, convert.tied(self.hf_config)
        )
        experts = convert.num_experts(self.hf_config)
        stage = convert.select_ep(stage, experts, self._ep_size(), self._ep_rank())
        base = convert.shard_tp(stage, self.tp_size, self.tp_rank)
        mm.load_into(self.module, base, only=lambda name: not megatron_lora.is_adapter_key(name))

    @torch.no_grad()
    def named_hf_parameters(self):
        """Full HF-named weights on every rank (TP shards all-gathered on the device, pipeline stages exchanged
        through host memory). Collective: every rank must call it."""
        from megatron.core import parallel_state as ps

        local = {k: v.detach() for k, v in self._local_state().items()}  # on the device: NCCL gathers there
        # base weights only; with LoRA each adapted weight + scaling · B·A (a local shard of the merged weight)
        local = megatron_lora.merged_state(local, getattr(self, "adapters", {}))
        if self.tp_size > 1:
            gathered = [{} for _ in range(self.tp_size)]
            for name in sorted(local):  # experts are split over the expert-TP group (of the same size as TP)
                expert = convert.is_expert_parameter(name)
                group = ps.get_expert_tensor_parallel_group() if expert else ps.get_tensor_model_parallel_group()
                parts = [torch.empty_like(local[name]) for _ in range(self.tp_size)]
                dist.all_gather(parts, local[name].contiguous(), group=group)
                for rank, part in enumerate(parts):
                    gathered[rank][name] = part
            local = convert.merge_tp(gathered)
        ep_size, experts = self._ep_size(), convert.num_experts(self.hf_config)
        local = convert.globalize_ep(local, experts, ep_size, self._ep_rank())
        if ep_size > 1:  # each expert-parallel rank holds its experts: exchanged through host memory
            mine = {k: v.cpu() for k, v in local.items() if convert.is_expert_parameter(k)}
            everyone = [None] * ep_size
            dist.all_gather_object(everyone, mine, group=ps.get_expert_model_parallel_group())
            for part in everyone:
                local.update(part)
        stage = convert.globalize_pp(local, self.hf_config.num_hidden_layers, self.pp_size, self.pp_rank)
        if self.pp_size > 1:
            stage = {k: v.cpu() for k, v in stage.items()}  # all_gather_object pickles: through host memory
            stages = [None] * self.pp_size
            dist.all_gather_object(stages, stage, group=ps.get_pipeline_model_parallel_group())
            stage = {}
            for part in stages:
                stage.update(part)
            if convert.tied(self.hf_config):
                stage.pop("output_layer.weight", None)
        yield from convert.mcore_to_hf(stage, self.hf_config).items()

    def _ep_rank(self) -> int:
        from megatron.core import parallel_state as ps

        return ps.get_expert_model_parallel_rank()

    def _ep_size(self) -> int:
        from megatron.core import parallel_state as ps

        return ps.get_expert_model_parallel_world_size()

    def state_checksum(self) -> float:
        """Collective: every rank must call it."""
        return checksum(self.named_hf_parameters())

    # --- memory -------------------------------------------------------------------------------------------
    def _offload_groups(self) -> dict:
        """offload() parks these in host memory by storage (roll/strategies/offload.py), so the views
        megatron keeps into its contiguous buffers stay valid; training adds gradients and optimizer."""
        return {"parameters": list(self.model.parameters())}


class MegatronTrainStrategy(MegatronInferStrategy, TrainStrategy):
    roles = frozenset({"train"})  # causal LMs only: no value head for the critic
    # megatron-core 0.16.1 has no LoRA adapter layers: roll's own (roll/strategies/megatron/lora.py); the weight
    # sync sends merged weights (no adapter-only export: megatron's fused q/k/v adapter is not peft's layout)
    lora = True
    dynamic_batching_train = True
    training = True

    def _wrap_for_training(self, total_steps: int) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        args = self.config.training_args
        dtype = self.tf_config.params_dtype
        if (
            dtype != torch.float32
        ):  # casts the first stage's float inputs to bf16/fp16 and the last one's output to fp32
            from megatron.core.transformer.module import Float16Module

            self.model = Float16Module(self.tf_config, self.model)
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True,
            overlap_grad_reduce=self.parallel["overlap_grad_reduce"],
            use_distributed_optimizer=self.parallel["use_distributed_optimizer"],
            overlap_param_gather=self.parallel["overlap_param_gather"],
        )
        self.model = DistributedDataParallel(self.tf_config, ddp_config, self.model)
        from megatron.core.distributed import finalize_model_grads

        # the schedules call this after the last backward: DP gradient all-reduce (or reduce-scatter with the
        # distributed optimizer), embedding-group and sequence-parallel norm gradient sync
        self.tf_config.finalize_model_grads_func = finalize_model_grads
        self.tf_config.no_sync_func = self.model.no_sync
        clip = gradient_clip_value(args.max_grad_norm)
        optimizer_config = OptimizerConfig(
            optimizer="adam",
            lr=args.learning_rate,
            min_lr=0.0,
            weight_decay=args.weight_decay,
            adam_beta1=args.adam_beta1,
            adam_beta2=args.adam_beta2,
            adam_eps=args.adam_epsilon,
            clip_grad=0.0 if clip == float("inf") else clip,
            decoupled_weight_decay=True,
            use_distributed_optimizer=self.parallel["use_distributed_optimizer"],
            bf16=dtype == torch.bfloat16,  # fp32 main params in the optimizer, bf16 model params
            fp16=dtype == torch.float16,  # the same with megatron's dynamic loss scaling (not verified here)
            params_dtype=dtype,
        )
        # config_overrides={}: weight decay on every parameter, as build_adamw (megatron's default exempts
        # biases and norms)
        self.optimizer = get_megatron_optimizer(optimizer_config, [self.model], config_overrides={})
        self.lr_factor = lr_lambda(args.lr_scheduler_type, warmup_steps(args, max(total_steps, 1)), max(total_steps, 1))
        self.steps_done = 0

    def _set_lr(self, step: int) -> float:
        lr = self.config.training_args.learning_rate * self.lr_factor(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def train_step(self, batch: DataProto, loss_fn) -> dict:
        micros = split_train_batch(self.config, batch)
        history: dict[str, list] = {}

        def step_fn(micro, output):
            loss, metrics = loss_fn(micro.to(output.device), self._vocab_logits(output))
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
            return loss, {}  # megatron divides by the number of micro-batches

        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        self._schedule(micros, step_fn, forward_only=False)
        self._set_lr(self.steps_done)
        _, grad_norm, _ = self.optimizer.step()
        self.steps_done += 1
        out = self._broadcast_from_last_stage(mean_metrics(history) if history else None)
        out["grad_norm"] = float(grad_norm) if grad_norm is not None else 0.0
        out["lr"] = self.config.training_args.learning_rate * self.lr_factor(self.steps_done)
        return out

    def _offload_groups(self) -> dict:
        """Parameters (with the distributed optimizer: views of the DDP param buffers), gradient buffers
        (`main_grad` views), and each chained optimizer's torch-optimizer state and fp32 main params.
        The ChainedOptimizer's own `state` is a ProxyDict (no .values()): its parts are read instead."""
        params = list(self.model.parameters())
        buffers = self.model.buffers + self.model.expert_parallel_buffers  # megatron DDP's, not Module.buffers()
        optimizers = [part.optimizer for part in self._optimizers() if getattr(part, "optimizer", None) is not None]
        return {
            "parameters": params + [b.param_data for b in buffers],
            "gradients": [getattr(p, "main_grad", None) for p in params]
            + [p.grad for p in params]
            + [b.grad_data for b in buffers],
            "optimizer": [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
            + [value for opt in optimizers for state in opt.state.values() for value in state.values()],
        }

    @classmethod
    def check_lora(cls, model_args, strategy_config) -> None:
        if model_args.adapter_name_or_path:
            raise ValueError(
                "adapter_name_or_path: megatron_train cannot load a peft adapter (its adapters sit on megatron's "
                "fused linears); resume from a megatron_train checkpoint instead"
            )
        megatron_lora.megatron_targets(model_args.lora_target)
        settings = strategy_config or {}
        if int(settings.get("pipeline_model_parallel_size", 1)) > 1:  # per-stage adapters: not verified by a test
            raise ValueError(
                "LoRA with megatron_train is verified at pipeline_model_parallel_size 1 only; set it to 1 "
                "(tensor parallelism is supported)"
            )

    def compute_reference_log_probs(self, batch: DataProto) -> torch.Tensor:
        """Log-probs of the frozen base model: the LoRA actor with its adapters switched off."""
        with megatron_lora.adapters_off(self.adapters):
            return self.compute_log_probs(batch)

    # --- checkpoints --------------------------------------------------------------------------------------
    def _rank_file(self, path: str) -> Path:
        from megatron.core import parallel_state as ps

        return Path(path) / CHECKPOINT_DIR / (f"tp{self.tp_rank}_pp{self.pp_rank}_dp{ps.get_data_parallel_rank()}.pt")

    def save_checkpoint(self, path: str) -> None:
        """Collective. Per rank: its model shard, its optimizer state (its shard with the distributed
        optimizer) and the step count; plus a full HF
        copy in `path/hf` (rank 0). Reload needs the same TP/PP/DP layout."""
        target = self._rank_file(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # each rank's torch optimizer (AdamW over its parameters, or its shard of them with the distributed
        # optimizer): exact on reload into the same TP/PP/DP layout
        optimizer_state = [part.optimizer.state_dict() for part in self._optimizers()]
        torch.save(
            {
                "model": self._saved_model_state(),
                "optimizer": optimizer_state,
                "main_params": self._main_params(),
                "steps_done": self.steps_done,
                "layout": (self.tp_size, self.pp_size, self.world_size),
                "expert_parallel": self._ep_size(),
            },
            target,
        )
        hf_state = dict(self.named_hf_parameters())
        if self.rank == 0:
            from transformers import AutoModelForCausalLM

            hf_dir = Path(path) / "hf"
            model = AutoModelForCausalLM.from_config(self.hf_config, dtype=torch.float32)
            model.load_state_dict(hf_state, strict=not convert.tied(self.hf_config))
            model.save_pretrained(str(hf_dir))
            save_tokenizer(self.config.model_args.model_name_or_path, hf_dir, self.logger)
        dist.barrier()

    def _saved_model_state(self) -> dict:
        """The rank's model shard; with LoRA its adapters only (the frozen base is model_name_or_path)."""
        state = self._local_state()
        if self.adapters:
            state = {name: tensor for name, tensor in state.items() if megatron_lora.is_adapter_key(name)}
        return state

    def _optimizers(self) -> list:
        """The optimizers under megatron's ChainedOptimizer (one per parameter group kind)."""
        return list(getattr(self.optimizer, "chained_optimizers", [self.optimizer]))

    def _main_params(self) -> list[list[torch.Tensor]]:
        """Per optimizer, the tensors its torch optimizer steps: with bf16 the fp32 main (master) weights (or this
        rank's shard of them), which the bf16 model parameters alone cannot restore; with fp32 the parameters."""
        return [
            [p.detach().cpu() for g in part.optimizer.param_groups for p in g["params"]] for part in self._optimizers()
        ]

    @torch.no_grad()  # the fp32 distributed optimizer's "main params" are views of the model's leaf params
    def load_checkpoint(self, path: str) -> None:
        from roll.strategies.megatron import model as mm

        source = self._rank_file(path)
        if not source.is_file():
            raise FileNotFoundError(f"{self.config.name}: {path} has no megatron checkpoint for this rank ({source})")
        saved = load_state(source)
        layout = (*saved["layout"], saved.get("expert_parallel", 1))  # EP: each rank holds its experts only
        if layout != (self.tp_size, self.pp_size, self.world_size, self._ep_size()):
            raise ValueError(
                f"{self.config.name}: checkpoint layout TP/PP/world/EP {layout} ≠ "
                f"{(self.tp_size, self.pp_size, self.world_size, self._ep_size())}; load its HF copy instead"
            )
        only = megatron_lora.is_adapter_key if self.adapters else None
        mm.load_into(self.module, saved["model"], only=only)
        for part, state in zip(self._optimizers(), saved["optimizer"]):
            part.optimizer.load_state_dict(state)
        # older checkpoints (fp32 training only) have no main params: there the parameters are the main params
        for part, main in zip(self._optimizers(), saved.get("main_params", [])):
            params = [p for g in part.optimizer.param_groups for p in g["params"]]
            if [tuple(p.shape) for p in params] != [tuple(t.shape) for t in main]:
                raise ValueError(
                    f"{self.config.name}: {source} holds main params of other shapes than this optimizer's"
                )
            for param, value in zip(params, main):
                param.copy_(value)
        self.steps_done = saved["steps_done"]
