"""Tiled MLP (ROLL's fsdp2 `apply_tiled_mlp` / `tiled_num_shards`): each decoder layer's dense SwiGLU MLP runs
over its input in `tiled_num_shards` chunks along the sequence dimension. Forward keeps none of the chunks'
intermediate activations (gate/up projections, their product: `intermediate_size` wide, the largest tensors of
a layer); backward recomputes one chunk at a time. Peak activation memory of the MLP drops ~shards-fold, for
one extra MLP forward per backward.

The patch is per module instance (never transformers' classes): `enable_tiled_mlp(model, shards)` after the
model is loaded. Under FSDP2 the decoder layer's parameters are unsharded during its forward and its
backward, so the recomputation in backward sees the full weights; gradients reach the parameters through
autograd as inputs of the Function, so FSDP2's reduce-scatter, activation checkpointing (which reruns the
forward) and LoRA (adapter parameters inside the projections) work unchanged.
"""

import types

import torch

# the dense SwiGLU MLP classes ROLL tiles (Llama, Qwen2/2.5, Qwen3, and Qwen3-MoE's dense layers)
TILED_MLP_CLASSES = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "Qwen3MoeMLP")


def _chunks(x: torch.Tensor, shards: int) -> list[torch.Tensor]:
    """Chunks along the sequence dimension (-2): (B, T, H) padded or (1, N, H) packed alike."""
    return list(torch.chunk(x, shards, dim=-2))


class _TiledMLP(torch.autograd.Function):
    """forward(x) = cat(mlp(chunk) for chunk in x), saving only x; backward recomputes chunk by chunk."""

    @staticmethod
    def forward(ctx, x, forward, shards, *params):
        # the parameters on ctx, not saved tensors: FSDP2 frees and refills their storage between forward and
        # backward (the same Parameter objects), which saved-tensor version checks need not see
        ctx.forward, ctx.shards, ctx.params = forward, shards, params
        ctx.save_for_backward(x)
        with torch.no_grad():
            return torch.cat([forward(chunk) for chunk in _chunks(x, shards)], dim=-2)

    @staticmethod
    def backward(ctx, grad_out):
        (x,), params = ctx.saved_tensors, ctx.params
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        # float32 sums of the per-chunk weight gradients (a bf16 running sum would lose the small chunks)
        grad_params = [torch.zeros_like(p, dtype=torch.float32) for p in params]
        offset = 0
        for chunk, grad_chunk in zip(_chunks(x, ctx.shards), _chunks(grad_out, ctx.shards), strict=True):
            chunk = chunk.detach().requires_grad_(grad_x is not None)
            with torch.enable_grad():
                out = ctx.forward(chunk)
            inputs = ([chunk] if grad_x is not None else []) + list(params)
            grads = torch.autograd.grad(out, inputs, grad_chunk)  # every input is used: None would be a bug
            if grad_x is not None:
                grad_x.narrow(-2, offset, chunk.shape[-2]).copy_(grads[0])
                grads = grads[1:]
            for total, grad in zip(grad_params, grads, strict=True):
                total.add_(grad)
            offset += chunk.shape[-2]
        return (grad_x, None, None, *(g.to(p.dtype) for g, p in zip(grad_params, params, strict=True)))


def _tiled_forward(self, x: torch.Tensor) -> torch.Tensor:
    forward = types.MethodType(type(self).forward, self)  # the class's own (untiled) forward
    if not torch.is_grad_enabled():  # scoring: chunked, nothing to save
        return torch.cat([forward(chunk) for chunk in _chunks(x, self.tiled_num_shards)], dim=-2)
    # looked up per call: LoRA adapters or FSDP2's unsharded parameters are the ones in use now
    params = [p for p in self.parameters() if p.requires_grad]
    return _TiledMLP.apply(x, forward, self.tiled_num_shards, *params)


def enable_tiled_mlp(model: torch.nn.Module, shards: int) -> list[str]:
    """Tile every TILED_MLP_CLASSES instance of `model` in `shards` chunks; the names of those tiled. None can
    be found (as in ROLL, which patches these classes only: e.g. Qwen3-MoE whose layers are all sparse — fused
    experts in transformers 5); the caller says so."""
    tiled = []
    for name, mlp in model.named_modules():
        if type(mlp).__name__ in TILED_MLP_CLASSES:
            mlp.tiled_num_shards = shards
            mlp.forward = types.MethodType(_tiled_forward, mlp)
            tiled.append(name)
    return tiled
