"""LoRA adapters on megatron-core's ColumnParallelLinear / RowParallelLinear (megatron-core 0.16.1 has none).

Each targeted linear gets a `lora` submodule (parameters `lora.A` [r, in], `lora.B` [out, r], B zero at
start) and a forward hook that adds scaling · B(A(dropout(x))) to the linear's output, so the base module,
its parameter names and roll's converter stay untouched. Under tensor parallelism the adapter follows the
base layer's split: column-parallel (linear_qkv, linear_fc1): A whole on every TP rank, B split over output
rows; row-parallel (linear_proj, linear_fc2): A split over input columns, B whole. Then B_local · A_local is
exactly this rank's shard of the weight delta, so merging is local (merged_state). Under sequence parallelism
the adapter follows the base layer's communication: a column-parallel linear's input is this rank's part of the
sequence (A·x is gathered over TP, reduce-scattered in backward), a row-parallel one's output is (A·x is
reduce-scattered); the whole factor (column: A, row: B) then sees only this rank's tokens, so it carries
megatron's `sequence_parallel` tag and finalize_model_grads sums its gradient over TP, as for the norms.

megatron fuses q/k/v into linear_qkv and gate/up into linear_fc1: one adapter per fused linear (a shared A),
so ROLL's/HF `lora_target` names map onto whole fused groups only (q_proj,k_proj,v_proj together).
"""

import contextlib
import math
import re

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.utils.patterns import is_regex

FUSED = {  # megatron linear: (HF module names it fuses, the HF parent module, parallel kind)
    "linear_qkv": (("q_proj", "k_proj", "v_proj"), "self_attn", "column"),
    "linear_proj": (("o_proj",), "self_attn", "row"),
    "linear_fc1": (("gate_proj", "up_proj"), "mlp", "column"),
    "linear_fc2": (("down_proj",), "mlp", "row"),
}
ADAPTER_KEY = re.compile(r"\.lora\.[AB]$")


def is_adapter_key(name: str) -> bool:
    return bool(ADAPTER_KEY.search(name))


def megatron_targets(lora_target: str) -> list[str]:
    """ROLL's `lora_target` ("all-linear", HF or megatron module names, or a regex over HF module names such
    as model.layers.0.self_attn.q_proj) → the megatron linears to adapt. A fused linear is adapted only when
    every HF module it fuses is targeted (partial groups would change what the adapter means: an error)."""
    target = lora_target.strip()
    if target == "all-linear":
        return list(FUSED)
    if is_regex(target):
        pattern = re.compile(target)
        names = {
            leaf
            for module, (leaves, parent, _) in FUSED.items()
            for leaf in leaves + (module,)
            if pattern.fullmatch(f"model.layers.0.{parent}.{leaf}") or pattern.fullmatch(leaf)
        }
    else:
        names = {name.strip() for name in target.split(",") if name.strip()}
    known = {leaf for leaves, _, _ in FUSED.values() for leaf in leaves} | set(FUSED)
    unknown = sorted(names - known)
    if unknown:
        raise ValueError(
            f"model_args.lora_target={lora_target!r}: {unknown} are not linear layers of megatron_train's dense "
            f"models; valid: all-linear or names among {sorted(known)}"
        )
    chosen = []
    for module, (leaves, _, _) in FUSED.items():
        hit = set(leaves) & names
        if module in names or hit == set(leaves):
            chosen.append(module)
        elif hit:
            raise ValueError(
                f"model_args.lora_target={lora_target!r}: megatron fuses {list(leaves)} into one {module}, which "
                f"takes one adapter: target all of {list(leaves)} or none (got {sorted(hit)})"
            )
    if not chosen:
        raise ValueError(f"model_args.lora_target={lora_target!r} matches no linear layer; e.g. all-linear")
    return chosen


def _same_on_every_replica(tensor: torch.Tensor) -> None:
    """The first rank's draw on the TP ranks and data-parallel replicas of this pipeline stage (stages hold
    different layers, so never a world-wide broadcast)."""
    from megatron.core import parallel_state as ps

    if not dist.is_initialized():
        return
    for group in (ps.get_tensor_model_parallel_group(), ps.get_data_parallel_group()):
        if dist.get_world_size(group) > 1:
            dist.broadcast(tensor, src=dist.get_global_rank(group, 0), group=group)


class LoraAdapter(torch.nn.Module):
    def __init__(
        self,
        linear,
        kind: str,
        rank: int,
        alpha: float,
        dropout: float,
        tp_size: int,
        tp_rank: int,
        sequence_parallel: bool = False,
    ):
        super().__init__()
        out_local, in_local = linear.weight.shape
        dtype, device = linear.weight.dtype, linear.weight.device
        in_full = in_local * tp_size if kind == "row" else in_local
        # A drawn whole (as nn.Linear / peft: kaiming-uniform), the same on every rank (rank 0's), then split
        full = torch.empty(rank, in_full, dtype=torch.float32, device=device)
        torch.nn.init.kaiming_uniform_(full, a=math.sqrt(5))
        _same_on_every_replica(full)
        if kind == "row":
            full = full[:, tp_rank * in_local : (tp_rank + 1) * in_local]
        self.A = torch.nn.Parameter(full.to(dtype).contiguous())
        self.B = torch.nn.Parameter(torch.zeros(out_local, rank, dtype=dtype, device=device))
        split = (self.B, 0) if kind == "column" else (self.A, 1)  # the TP-split one (clip-grad counts it per rank)
        if tp_size > 1:
            from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

            set_tensor_model_parallel_attributes(split[0], True, split[1], 1)
        whole = self.A if kind == "column" else self.B
        whole.sequence_parallel = sequence_parallel  # its gradient from this rank's tokens only: summed over TP
        self.kind, self.scaling, self.enabled = kind, alpha / rank, True
        self.sequence_parallel = sequence_parallel
        self.dropout = torch.nn.Dropout(dropout) if dropout > 0 else torch.nn.Identity()

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        from megatron.core import tensor_parallel as tp

        h = F.linear(self.dropout(x), self.A)
        if self.kind == "column":  # B's output rows are split: the partial gradients of h are summed over TP
            if self.sequence_parallel:  # x is this rank's part of the sequence: h gathered whole
                h = tp.gather_from_sequence_parallel_region(h)
            else:
                h = tp.copy_to_tensor_model_parallel_region(h)
        elif self.sequence_parallel:  # A's input columns are split: partial products summed, sequence split
            h = tp.reduce_scatter_to_sequence_parallel_region(h)
        else:  # A's input columns are split: the partial products are summed over TP
            h = tp.reduce_from_tensor_model_parallel_region(h)
        return F.linear(h, self.B) * self.scaling

    def hook(self, module, args, output):
        if not self.enabled:
            return output
        out, bias = output
        return out + self.delta(args[0]).to(out.dtype), bias


def attach(model, model_args, tp_size: int, tp_rank: int, sequence_parallel: bool = False) -> dict[str, LoraAdapter]:
    """Adapters on the targeted linears of `model` (a GPTModel stage); the base is frozen."""
    targets = megatron_targets(model_args.lora_target)
    for param in model.parameters():
        param.requires_grad_(False)
    adapters = {}
    for name, module in list(model.named_modules()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in targets:
            continue
        adapter = LoraAdapter(
            module,
            FUSED[leaf][2],
            model_args.lora_rank,
            model_args.resolved_lora_alpha,
            model_args.lora_dropout,
            tp_size,
            tp_rank,
            sequence_parallel,
        )
        module.lora = adapter
        module.register_forward_hook(adapter.hook)
        adapters[name] = adapter
    if not adapters:
        raise ValueError(f"model_args.lora_target={model_args.lora_target!r}: no layer of this stage matched")
    return adapters


@torch.no_grad()
def merged_state(local: dict[str, torch.Tensor], adapters: dict[str, LoraAdapter]) -> dict[str, torch.Tensor]:
    """A (TP/PP-local) megatron state dict without adapter keys, each adapted weight + scaling · B·A (fp32 merge,
    the weight's dtype back)."""
    out = {name: tensor for name, tensor in local.items() if not is_adapter_key(name)}
    for name, adapter in adapters.items():
        weight = out[f"{name}.weight"]
        delta = adapter.scaling * (adapter.B.detach().float() @ adapter.A.detach().float())
        out[f"{name}.weight"] = (weight.float() + delta.to(weight.device)).to(weight.dtype)
    return out


@contextlib.contextmanager
def adapters_off(adapters: dict[str, LoraAdapter]):
    """Forwards inside run the frozen base model (the reference log-probs)."""
    for adapter in adapters.values():
        adapter.enabled = False
    try:
        yield
    finally:
        for adapter in adapters.values():
            adapter.enabled = True
