"""megatron-core on a CPU-only machine: a compatibility layer pinned to megatron-core 0.16.1.

megatron-core hard-codes CUDA in places that have nothing to do with the maths: `device='cuda'` literals
(clip-grad norms, grad scaler, pipeline-schedule token counters, gradient buffers),
`torch.cuda.current_device()` as an allocation device (layers, p2p shape exchange, gradient buffers),
the CUDA RNG tracker (`tensor_parallel.random`: get/set of the CUDA generator state), the MoE all-to-all token
dispatcher's side stream for its device-to-host copies (`torch.cuda.Stream`, `stream`, `current_stream`) and its
split sizes, which only the CUDA path turns into numpy arrays (`maybe_move_tensor_to_cpu`), and
`param.type() == 'torch.cuda.FloatTensor'` assertions (clip-grad, distributed optimizer).

`apply()` — a no-op when CUDA is available — redirects exactly those to the CPU:
  * every loaded `megatron.core.*` module that did `import torch` sees a proxy of torch whose tensor
    factories turn a `device="cuda"` into the CPU and whose `torch.cuda` answers `current_device()` with
    "cpu" and get/set_rng_state with the CPU generator's state (so the model-parallel RNG tracker forks
    the CPU generator, as it forks the CUDA one on a GPU), and whose streams and events are no-ops (CPU work is
    synchronous);
  * `random._set_cuda_rng_state` sets the CPU generator's state;
  * the three functions that sort parameters by `torch.cuda.<Float|BFloat16|Half>Tensor` (clip-grad, the
    distributed optimizer's and the bf16/fp16 optimizer's main-param set-up) run with CPU tensors reporting
    those type names, for the duration of the call only.
Independently of CUDA (so also on a GPU machine without TransformerEngine): megatron-core 0.16.1's MoE router
gating (`moe_utils.RouterGatingLinearFunction`) reads `te_general_gemm`, which that module defines only when
TransformerEngine imports; `apply()` defines it as None there, the value meaning "no TE GEMM" (torch.mm).
Nothing outside megatron.core is touched. Any other megatron-core version is refused: the list of call
sites above was read from 0.16.1's source and must be re-checked for another release.
TransformerEngine, Apex's and TransformerEngine's fused kernels and CUDA graphs are not made to work; use
the local (non-TE) spec (megatron-core's plain-torch fusions run: roll/strategies/megatron/fusions.py).
"""

import contextlib
import functools
import sys
import types

import torch

PINNED_VERSION = "0.16.1"
_FACTORIES = (
    "tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "randn",
    "rand",
    "zeros_like",
    "ones_like",
    "empty_like",
)
_applied = False


def _cpu_device(device):
    if device is None:
        return None
    if (
        isinstance(device, int)
        or (isinstance(device, str) and device.startswith("cuda"))
        or (isinstance(device, torch.device) and device.type == "cuda")
    ):
        return torch.device("cpu")
    return device


class _CpuStream:
    """A CUDA stream (or event) on the CPU, where work is synchronous: waiting and recording are no-ops."""

    def wait_stream(self, stream):
        return None

    def record_event(self, event=None):
        return _CpuStream()

    def synchronize(self):
        return None


_DEFAULT_STREAM = _CpuStream()


class _CpuCuda(types.ModuleType):
    """torch.cuda as megatron-core sees it on CPU."""

    def __init__(self):
        super().__init__("torch.cuda")
        self.random = self

    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def current_device():
        return "cpu"

    @staticmethod
    def get_rng_state(device=None):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=None):
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed):
        torch.manual_seed(seed)

    @staticmethod
    def synchronize(device=None):
        return None

    @staticmethod
    def is_available():
        return False

    # the MoE all-to-all dispatcher copies its token counts to the host on a side stream
    @staticmethod
    def Stream(*args, **kwargs):  # noqa: N802 - torch.cuda's name
        return _CpuStream()

    @staticmethod
    def current_stream(device=None):
        return _DEFAULT_STREAM

    @staticmethod
    def stream(stream):
        return contextlib.nullcontext()


class _CpuTorch(types.ModuleType):
    """torch as megatron-core sees it on CPU: factories never allocate on 'cuda'."""

    def __init__(self):
        super().__init__("torch")
        self.cuda = _CpuCuda()
        for name in _FACTORIES:
            setattr(self, name, self._wrap(getattr(torch, name)))

    @staticmethod
    def _wrap(factory):
        @functools.wraps(factory)
        def wrapper(*args, **kwargs):
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"])
            return factory(*args, **kwargs)

        return wrapper

    def __getattr__(self, name):
        return getattr(torch, name)


_CUDA_TYPE_NAMES = {
    name: name.replace("torch.", "torch.cuda.")
    for name in ("torch.FloatTensor", "torch.BFloat16Tensor", "torch.HalfTensor")
}


def _reports_cuda_float_type(fn):
    """Run `fn` with float32/bf16/fp16 CPU tensors answering `.type()` as 'torch.cuda.<Float|BFloat16|Half>Tensor'."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        original = torch.Tensor.type

        def type_(self, *a, **k):
            name = original(self, *a, **k)
            return _CUDA_TYPE_NAMES.get(name, name) if not a and not k else name

        torch.Tensor.type = type_
        try:
            return fn(*args, **kwargs)
        finally:
            torch.Tensor.type = original

    return wrapper


def _host_copy(tensor, as_numpy: bool = False, record_stream: bool = False):
    """moe_utils.maybe_move_tensor_to_cpu for tensors already on the CPU: the all-to-all dispatcher's split sizes
    must end up as numpy arrays (what the CUDA path returns; all_to_all_single refuses a tensor there)."""
    return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor


def apply() -> bool:
    """Install the layer (idempotent). Returns True if it is active (no CUDA), False on a CUDA machine."""
    global _applied
    import megatron.core
    from megatron.core import package_info
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):  # unbound without TransformerEngine (see the module docstring)
        moe_utils.te_general_gemm = None
    if torch.cuda.is_available():
        return False
    if package_info.__version__ != PINNED_VERSION:
        raise RuntimeError(
            f"roll.platforms.megatron_cpu is pinned to megatron-core {PINNED_VERSION} (its CUDA call "
            f"sites were read from that release); found {package_info.__version__}. Install "
            f"megatron-core=={PINNED_VERSION} (the `megatron` extra) or re-check the shim."
        )
    if _applied:
        return True
    # import every module with a redirected call site before swapping their `torch`
    import megatron.core.distributed  # noqa: F401
    import megatron.core.models.gpt  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    import megatron.core.pipeline_parallel.p2p_communication  # noqa: F401
    import megatron.core.pipeline_parallel.schedules  # noqa: F401
    import megatron.core.transformer.moe.experts  # noqa: F401
    import megatron.core.transformer.moe.moe_layer  # noqa: F401
    import megatron.core.transformer.moe.router  # noqa: F401
    import megatron.core.transformer.moe.token_dispatcher  # noqa: F401
    from megatron.core.optimizer import clip_grads, distrib_optimizer, optimizer
    from megatron.core.tensor_parallel import random

    proxy = _CpuTorch()
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron.core") and getattr(module, "torch", None) is torch:
            module.torch = proxy
    from megatron.core.transformer.moe import token_dispatcher

    token_dispatcher.maybe_move_tensor_to_cpu = _host_copy
    random._set_cuda_rng_state = lambda new_state, device=-1, graph_safe=False: torch.set_rng_state(new_state)
    random._get_cuda_rng_state = lambda device="cuda", clone=False, graph_safe=False: torch.get_rng_state()
    wrapped = _reports_cuda_float_type(clip_grads.clip_grad_by_total_norm_fp32)
    clip_grads.clip_grad_by_total_norm_fp32 = wrapped
    optimizer.clip_grad_by_total_norm_fp32 = wrapped
    mixed = optimizer.Float16OptimizerWithFloat16Params  # sorts bf16 model params from fp32 ones by type name
    mixed.__init__ = _reports_cuda_float_type(mixed.__init__)
    builder = distrib_optimizer.DistributedOptimizer.__dict__["_build_model_and_main_param_groups"].__func__
    distrib_optimizer.DistributedOptimizer._build_model_and_main_param_groups = classmethod(
        _reports_cuda_float_type(builder)
    )
    _applied = True
    return True
