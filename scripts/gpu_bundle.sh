#!/usr/bin/env bash
# Builds .gpu_bundle/roll-gpu-deps.tar.xz: roll's dependencies as a `pip --target` tree for a CUDA machine that
# has Python 3.12 with torch and transformers but nothing else of ours and no package index (docs/gpu.md).
# scripts/gpu_check.sh (the GPU tier, benchmarks/gpu_scale.py) and scripts/gpu_session.sh (roll against TRL, the
# 0.36 B learning run) unpack it there through scripts/gpu_env.sh and put it on PYTHONPATH.
#
#   bash scripts/gpu_bundle.sh            # leaves out what the lent GPU image already has (scripts/gpu_image_packages.txt)
#   ROLL_BUNDLE_FULL=1 bash scripts/gpu_bundle.sh   # everything but torch, transformers and their needs (larger)
#
# The list is the closure of roll's requirements (+ the megatron and trl extras) as installed here, at the versions
# installed here, for CPython 3.12 on manylinux x86_64; torch, transformers, what they need and the CUDA
# packages stay out (the GPU machine's own builds must win). Packages without a wheel on the index are built
# here as pure-Python wheels. Ray's large binaries lose their symbol tables (strip keeps the exec bits).
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu_bundle
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# 1. name==version of every package to carry
python - "$work/packages.txt" "${ROLL_BUNDLE_FULL:-0}" <<'EOF'
import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
          "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
          "platform_python_implementation": "CPython"}


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots):
    seen, stack = {}, list(roots)
    while stack:
        name, extras = stack.pop()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            sys.exit(f"gpu_bundle.sh: {name} is required but not installed here: run `bash scripts/install.sh test` first")
        seen[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({**TARGET, "extra": e}) for e in (extras or ("",))):
                continue
            stack.append((canon(req.name), tuple(req.extras)))
    return seen


wanted = closure([("roll", ("megatron", "trl"))])  # trl: benchmarks/gpu_vs_trl.py
kept_out = {"roll", "torch", "transformers", "triton"}
kept_out |= {name for name in wanted if name.startswith(("nvidia-", "cuda-"))}
if sys.argv[2] != "1":
    # the lent image's own packages (docs/gpu.md): carrying them would only shadow them. What torch and transformers
    # need here but the image lacks (pydantic: DeepSpeed imports it; the image's transformers does not need it) travels.
    kept_out |= {canon(n) for n in Path("scripts/gpu_image_packages.txt").read_text().split() if not n.startswith("#")}
else:
    kept_out |= set(closure([("torch", ()), ("transformers", ())]))
carried = sorted(f"{name}=={version}" for name, version in wanted.items() if name not in kept_out)
Path(sys.argv[1]).write_text("\n".join(carried) + "\n")
print(f"gpu_bundle.sh: carrying {len(carried)} packages, leaving out {len(set(wanted) & kept_out)} (torch, transformers, "
      f"{'the CUDA packages, what the image has' if sys.argv[2] != '1' else 'their needs, the CUDA packages'})")
EOF

# 2. wheels for CPython 3.12 manylinux x86_64; pure-Python sdists become wheels here
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
  manylinux1_x86_64 manylinux_2_5_x86_64; do platforms+=(--platform "$p"); done
target=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none "${platforms[@]}" --platform any)
mkdir -p "$work/wheels"
while read -r spec; do
  if ! python -m pip download -q --no-deps --only-binary=:all: "${target[@]}" -d "$work/wheels" "$spec" 2>/dev/null; then
    echo "gpu_bundle.sh: no wheel for $spec on the index: building a pure-Python one here"
    DS_BUILD_OPS=0 python -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheels" "$spec"
  fi
done <"$work/packages.txt"
if ls "$work"/wheels/*.whl | grep -v -E 'none-any|cp312|abi3' | grep -E 'cp3[0-9]+' >/dev/null; then
  echo "gpu_bundle.sh: a wheel built here is specific to this Python, not 3.12:"; ls "$work"/wheels | grep -v -E 'none-any|cp312|abi3'
  exit 1
fi

# 3. the --target tree, Ray's binaries stripped, packed
python -m pip install -q --no-deps --no-compile --no-index --only-binary=:all: "${target[@]}" \
  --target "$work/tree" "$work"/wheels/*.whl
for f in "$work"/tree/ray/_raylet.so "$work"/tree/ray/core/src/ray/raylet/raylet "$work"/tree/ray/core/src/ray/gcs/gcs_server; do
  [ -f "$f" ] || { echo "gpu_bundle.sh: $f is missing (Ray's layout changed?)"; exit 1; }
  strip --strip-unneeded "$f"
  [ -x "$f" ] || [[ "$f" == *.so ]] || { echo "gpu_bundle.sh: $f lost its exec bit"; exit 1; }
done
# Parts of the Ray wheel that `import ray` never loads and roll does not use: the Java workers' jar, the dashboard's
# web UI (roll starts Ray without it), RLlib, Ray Data, Serve, and py-spy (the dashboard's profiler). ~35 MB packed.
rm -rf "$work"/tree/ray/jars "$work"/tree/ray/dashboard/client/build "$work"/tree/ray/rllib "$work"/tree/ray/data \
  "$work"/tree/ray/serve "$work"/tree/bin/py-spy
find "$work/tree" -name __pycache__ -type d -prune -exec rm -rf {} +
cp "$work/packages.txt" "$work/tree/ROLL_GPU_DEPS.txt"
tar -C "$work/tree" -cf - . | xz -T0 -9 >"$out/roll-gpu-deps.tar.xz"
echo "gpu_bundle.sh: $out/roll-gpu-deps.tar.xz $(du -m "$out/roll-gpu-deps.tar.xz" | cut -f1) MB ($(wc -l <"$work/packages.txt") packages)"
