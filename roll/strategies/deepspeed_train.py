"""`deepspeed_train` / `deepspeed_infer`: DeepSpeed ZeRO 0-3 (gloo and fp32 on CPU, NCCL on GPU).

`strategy_config` is a DeepSpeed JSON config (see examples/config/deepspeed_zero*.yaml). Batch
keys left as "auto" (or absent) are taken from training_args; an explicit value that disagrees with
training_args is an error, never silently replaced.
"""
import copy
import math
import sys
from pathlib import Path

import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.base import InferenceStrategy


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
            raise ValueError(f"strategy_config.{section}: roll builds the optimizer and LR schedule from "
                             f"training_args (learning_rate, weight_decay, lr_scheduler_type, warmup_steps); "
                             f"remove the {section!r} section")
    pairs = {"train_micro_batch_size_per_gpu": ("per_device_train_batch_size", training_args.per_device_train_batch_size),
             "gradient_accumulation_steps": ("gradient_accumulation_steps", training_args.gradient_accumulation_steps),
             "gradient_clipping": ("max_grad_norm", training_args.max_grad_norm)}
    for ds_key, (arg_key, value) in pairs.items():
        given = config.get(ds_key, "auto")
        if given != "auto" and given != value:
            raise ValueError(f"strategy_config.{ds_key}={given!r} disagrees with training_args.{arg_key}={value!r}; "
                             f"set it to \"auto\" (or remove it) and keep training_args.{arg_key}")
        config[ds_key] = value
    global_batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world_size
    given = config.get("train_batch_size", "auto")
    if given != "auto" and given != global_batch:
        raise ValueError(f"strategy_config.train_batch_size={given!r} but per_device_train_batch_size × "
                         f"gradient_accumulation_steps × world_size = {global_batch}; set it to \"auto\"")
    config["train_batch_size"] = global_batch
    for precision, wanted in (("bf16", dtype == "bfloat16"), ("fp16", dtype == "float16")):
        section = dict(config.get(precision, {}))
        if section.get("enabled", "auto") == "auto":
            section["enabled"] = wanted
        elif section["enabled"] != wanted:
            raise ValueError(f"strategy_config.{precision}.enabled={section['enabled']} disagrees with "
                             f"model_args.dtype={dtype!r}; set it to \"auto\"")
        config[precision] = section
    config.setdefault("steps_per_print", 10**9)  # roll prints its own progress
    return config


def zero_stage(config: dict) -> int:
    return int(config.get("zero_optimization", {}).get("stage", 0))


def lr_lambda(kind: str, warmup_steps: int, total_steps: int):
    valid = ("constant", "linear", "cosine")
    if kind not in valid:
        raise ValueError(f"training_args.lr_scheduler_type={kind!r}; valid: {valid}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if kind == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min((step - warmup_steps) / (total_steps - warmup_steps), 1.0)
        return 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class DeepSpeedTrainStrategy(InferenceStrategy):
    def initialize(self, total_steps: int = 0) -> None:
        import deepspeed

        _init_deepspeed_distributed()
        args = self.config.training_args
        self.ds_config = resolve_ds_config(self.config.strategy_args.strategy_config, args, self.world_size,
                                           self.config.model_args.dtype)
        model = self.load_model()
        if not self.config.model_args.disable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        offload = self.ds_config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
        params = [p for p in model.parameters() if p.requires_grad]
        betas = (args.adam_beta1, args.adam_beta2)
        if offload not in (None, "none"):
            from deepspeed.ops.adam import DeepSpeedCPUAdam  # JIT-builds cpu_adam once (~2 min with gcc)

            optimizer = DeepSpeedCPUAdam(params, lr=args.learning_rate, betas=betas, eps=args.adam_epsilon,
                                         weight_decay=args.weight_decay)
        else:
            optimizer = torch.optim.AdamW(params, lr=args.learning_rate, betas=betas, eps=args.adam_epsilon,
                                          weight_decay=args.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(args.lr_scheduler_type, args.warmup_steps, max(total_steps, 1)))
        self.model, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config)
        self.model.train()

    @property
    def module(self) -> torch.nn.Module:
        return self.model.module

    def train_step(self, batch: DataProto, loss_fn) -> dict:
        args = self.config.training_args
        micro_size, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
        if len(batch) != micro_size * accumulation:
            raise ValueError(f"{self.config.name}: a train_step takes per_device_train_batch_size × "
                             f"gradient_accumulation_steps = {micro_size * accumulation} rows per rank, got {len(batch)}")
        history: dict[str, list] = {}
        for index in range(accumulation):
            micro = batch[slice(index * micro_size, (index + 1) * micro_size)]
            logits = self.model(**{k: micro.batch[k].to(self.device) for k in ("input_ids", "attention_mask",
                                                                                 "position_ids")},
                                use_cache=False).logits
            loss, metrics = loss_fn(micro.to(self.device), logits)
            self.model.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps itself
            self.model.step()          # steps the optimizer only at the accumulation boundary
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
        out = {key: sum(values) / len(values) for key, values in history.items()}
        grad_norm = self.model.get_global_grad_norm()
        out["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
        out["lr"] = self.scheduler.get_last_lr()[0]
        return out

    def forward_logits(self, micro: DataProto) -> torch.Tensor:
        inputs = {k: micro.batch[k].to(self.device) for k in ("input_ids", "attention_mask", "position_ids")}
        return self.model(**inputs, use_cache=False).logits.cpu()

    @torch.no_grad()
    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        was_training = self.model.training
        self.model.eval()
        try:
            return super().compute_log_probs(batch)
        finally:
            self.model.train(was_training)

    def named_hf_parameters(self):
        """Full weights with HF names. Under ZeRO-3 every rank must call this (it gathers shards)."""
        import deepspeed

        params = list(self.module.named_parameters())
        if zero_stage(self.ds_config) == 3:
            with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
                gathered = [(name, p.detach().cpu().clone()) for name, p in params]
            return iter(gathered)
        return ((name, p.detach()) for name, p in params)

    @torch.no_grad()
    def state_checksum(self) -> float:
        total = 0.0
        for _, p in self.named_hf_parameters():
            p = p.double()
            total += p.sum().item() + (p * p).sum().item()
        return total

    def save_checkpoint(self, path: str) -> None:
        """Engine state (weights, optimizer, LR schedule) plus an HF copy users can load directly."""
        self.model.save_checkpoint(path, tag="engine")
        weights = dict(self.named_hf_parameters())
        if self.rank == 0:
            self.module.save_pretrained(str(Path(path) / "hf"), state_dict=weights)

    def load_checkpoint(self, path: str) -> None:
        if not (Path(path) / "engine").is_dir():
            raise FileNotFoundError(f"{self.config.name}: {path} has no DeepSpeed 'engine' checkpoint")
        self.model.load_checkpoint(path, tag="engine", load_optimizer_states=True, load_lr_scheduler_states=True)


class DeepSpeedInferStrategy(InferenceStrategy):
    """Forward-only (reference / old log-probs). ZeRO-3 shards the weights across ranks; lower stages
    keep a full copy per rank, so a plain module is enough."""

    def initialize(self, total_steps: int = 0) -> None:
        config = dict(self.config.strategy_args.strategy_config)
        if zero_stage(config) != 3:
            super().initialize(total_steps)
            return
        import deepspeed

        _init_deepspeed_distributed()
        config.setdefault("train_micro_batch_size_per_gpu", 1)
        config["train_batch_size"] = config["train_micro_batch_size_per_gpu"] * self.world_size
        config.pop("gradient_accumulation_steps", None)
        self.model, *_ = deepspeed.initialize(model=self.load_model(), config=config)
        self.model.eval()

    @property
    def module(self) -> torch.nn.Module:
        return getattr(self.model, "module", self.model)

