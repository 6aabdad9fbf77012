"""LoRA for the training strategies, built with `peft` (imported inside the functions, like an engine).

The actor's HF model is wrapped in a `peft` LoRA model from `model_args` (`lora_target`, `lora_rank`,
`lora_alpha`, `lora_dropout`, or `adapter_name_or_path` to continue a saved adapter). Only the adapter
matrices require gradients, so the optimizer the strategies build from `requires_grad` parameters holds
only them. Everything outside the trainer keeps seeing a plain HF model:

- `merged_hf_parameters` turns the wrapped model's (gathered) parameters into the base model's HF names
  with every adapter merged in (W + scaling · B·A), which is what `load_weights` of every inference
  strategy takes (the weight sync) and what the `hf/` copy of a checkpoint holds;
- `adapters_disabled` runs forwards of the frozen base model (the reference log-probs without a second
  model).
"""

import contextlib
import re
from pathlib import Path

import torch

from roll.utils.patterns import is_regex

ADAPTER = "default"  # peft's name of the one adapter
PEFT_PREFIX = "base_model.model."  # PeftModelForCausalLM → LoraModel → the HF model
ADAPTER_DIR = "adapter"  # a checkpoint's adapter in peft format (loadable as adapter_name_or_path)


def peft_targets(lora_target: str):
    """ROLL's `lora_target` → peft's `target_modules`: "all-linear" as is, a comma-separated list of module
    names as a list, anything with regex characters as a regex (peft matches it against full module names)."""
    target = lora_target.strip()
    if target == "all-linear":
        return target
    if is_regex(target):
        return target
    return [name.strip() for name in target.split(",") if name.strip()]


def apply_lora(model: torch.nn.Module, model_args, logger=None) -> torch.nn.Module:
    """The HF causal LM wrapped in a peft LoRA model; only adapter parameters require gradients."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if model_args.adapter_name_or_path:
        model = PeftModel.from_pretrained(model, model_args.adapter_name_or_path, is_trainable=True)
    else:
        config = LoraConfig(
            r=model_args.lora_rank,
            lora_alpha=model_args.resolved_lora_alpha,
            lora_dropout=model_args.lora_dropout,
            target_modules=peft_targets(model_args.lora_target),
            # a VL model's vision tower keeps its weights: adapters go on the language model only
            exclude_modules=vision_tower_pattern(model),
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            model = get_peft_model(model, config)
        except ValueError as error:  # e.g. a target that matches no module
            raise ValueError(f"model_args.lora_target={model_args.lora_target!r}: {error}") from None
    if logger is not None:
        trainable, total = trainable_parameter_count(model)
        logger.info("LoRA: %d trainable parameters of %d (%.2f %%)", trainable, total, 100 * trainable / total)
    return model


def vision_tower_pattern(model: torch.nn.Module) -> str | None:
    """peft's exclude_modules for a VL model: every module under its vision tower (None for a text model)."""
    from roll.models.vl import VISION_TOWER, is_vl_config

    if not is_vl_config(getattr(model, "config", None)):
        return None
    return rf"(.*\.)?{re.escape(VISION_TOWER)}(\..*)?"


def trainable_parameter_count(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, all) parameter counts; ds_numel under ZeRO-3, where a parameter's own numel is 0."""
    trainable = total = 0
    for param in model.parameters():
        numel = getattr(param, "ds_numel", param.numel())
        total += numel
        trainable += numel if param.requires_grad else 0
    return trainable, total


def is_lora_model(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def lora_scalings(model: torch.nn.Module) -> dict[str, float]:
    """HF module name (no peft prefix) → the adapter's scaling (lora_alpha / r), for every LoRA layer."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.scaling:
            out[hf_name(name)] = float(module.scaling[ADAPTER])
    return out


def hf_name(peft_name: str) -> str:
    """A peft parameter or module name → the base model's HF name."""
    name = peft_name[len(PEFT_PREFIX) :] if peft_name.startswith(PEFT_PREFIX) else peft_name
    return name.replace(".base_layer.", ".").removesuffix(".base_layer")


def merged_hf_parameters(named_full_tensors, scalings: dict[str, float]):
    """(peft name, full tensor) in the model's parameter order → (HF name, merged tensor), base-model order.

    A LoRA layer's base weight is held until its lora_A and lora_B have arrived (peft registers them right
    after the base layer), then W + scaling · B @ A is yielded under the base name; the adapter matrices
    themselves are not yielded. Merged in float32 and returned in the base weight's dtype."""
    pending: dict[str, dict] = {}  # LoRA module → {"weight": W, "A": A, "B": B}
    for name, tensor in named_full_tensors:
        lora = re.match(r"(.*)\.lora_([AB])\." + ADAPTER + r"\.weight$", name)
        if lora:
            module = hf_name(lora.group(1))
            parts = pending.setdefault(module, {})
            parts[lora.group(2)] = tensor
        else:
            base = hf_name(name)
            module = base.removesuffix(".weight")
            if base.endswith(".weight") and module in scalings:
                pending.setdefault(module, {})["weight"] = tensor
            else:
                yield base, tensor
                continue
        parts = pending[module]
        if len(parts) == 3:
            del pending[module]
            weight = parts["weight"]
            delta = scalings[module] * (parts["B"].float() @ parts["A"].float())
            yield f"{module}.weight", (weight.float() + delta).to(weight.dtype)
    if pending:
        raise RuntimeError(f"LoRA merge: incomplete layers {sorted(pending)[:3]} (base weight or adapter missing)")


def is_adapter_parameter(name: str) -> bool:
    return bool(re.search(r"\.lora_[AB]\." + ADAPTER + r"\.weight$", name))


def adapter_state(named_full_tensors) -> dict[str, torch.Tensor]:
    """The adapter matrices only, under peft's saved names (what PeftModel.from_pretrained loads)."""
    out = {}
    for name, tensor in named_full_tensors:
        if is_adapter_parameter(name):
            out[name.replace(f".{ADAPTER}.", ".")] = tensor.detach().cpu().contiguous()
    return out


def adapter_config_dict(model: torch.nn.Module) -> dict:
    """The adapter's peft config as adapter_config.json holds it (JSON types only)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        model.peft_config[ADAPTER].save_pretrained(directory)
        return json.loads((Path(directory) / "adapter_config.json").read_text())


class LoraExport:
    """Adapter-only export of a LoRA training strategy (the strategy brings `named_full_parameters(only)`,
    gathered full tensors of the parameters whose name passes `only`, collective like named_hf_parameters)."""

    def named_adapter_parameters(self):
        """(peft saved name, full tensor) of every adapter matrix: what an engine with LoRA support loads
        (adapter-only weight sync). Collective: every rank must consume it."""
        if not getattr(self, "_lora_on", False):
            raise RuntimeError(f"{self.config.name}: no LoRA adapters to export (model_args.lora_target is not set)")
        for name, tensor in self.named_full_parameters(only=is_adapter_parameter):
            yield name.replace(f".{ADAPTER}.", "."), tensor

    def adapter_config(self) -> dict:
        return adapter_config_dict(self.module)

    def adapter_checksum(self) -> float:
        from roll.strategies.train_common import checksum

        return checksum(self.named_adapter_parameters())


def save_adapter(model: torch.nn.Module, state: dict[str, torch.Tensor], directory: Path) -> None:
    """The adapter in peft's format: adapter_config.json + adapter_model.safetensors."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    model.peft_config[ADAPTER].save_pretrained(str(directory))
    save_file(state, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})


def save_merged_hf(model: torch.nn.Module, merged: dict[str, torch.Tensor], directory: Path) -> None:
    """A plain HF model (config + merged weights) that AutoModelForCausalLM loads without peft."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    base = model.get_base_model()
    base.config.save_pretrained(str(directory))
    if getattr(base, "generation_config", None) is not None:
        base.generation_config.save_pretrained(str(directory))
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in merged.items()}
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """Forwards inside run the frozen base model (peft's disable_adapter), e.g. for reference log-probs."""
    from peft import PeftModel

    peft_model = next((m for m in model.modules() if isinstance(m, PeftModel)), None)
    if peft_model is None:
        raise RuntimeError("adapters_disabled: the model has no LoRA adapters")
    with peft_model.disable_adapter():
        yield
