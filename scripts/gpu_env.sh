# Sourced by scripts/gpu_check.sh and scripts/gpu_session.sh on a lent CUDA machine (Python 3.12 with torch and
# transformers, no package index): unpacks the deps scripts/gpu_bundle.sh packed, puts them on PYTHONPATH, sets
# the environment roll's runs need there, and writes what the machine has to $OUT/environment.txt
# (or the file given as $1).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
bundle=.gpu_bundle/roll-gpu-deps.tar.xz
[ -f "$bundle" ] || { echo "gpu_env.sh: $bundle is missing: build it with scripts/gpu_bundle.sh where pip works"; exit 2; }
deps=${ROLL_GPU_DEPS:-/tmp/roll-gpu-deps}
mkdir -p "$deps" && tar -xJf "$bundle" -C "$deps"
export PYTHONPATH="$PWD:$deps${PYTHONPATH:+:$PYTHONPATH}" PATH="$deps/bin:$PATH"
export RAY_AUTH_MODE=disabled OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 - <<'PY'
import importlib

import torch

print(f"python {'.'.join(map(str, __import__('sys').version_info[:3]))}, torch {torch.__version__} "
      f"(CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s))")
for name in ("transformers", "ray", "deepspeed", "hydra", "peft", "datasets", "math_verify", "megatron.core", "trl",
             "roll"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')} from {module.__file__}")
    except Exception as error:  # noqa: BLE001 — reported, the run that needs it then says so too
        print(f"{name}: NOT IMPORTABLE: {type(error).__name__}: {error}")
PY
  git log -1 --format='commit %h %s' 2>/dev/null || true
} 2>&1 | tee "${1:-$OUT/environment.txt}"
