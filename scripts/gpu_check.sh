#!/usr/bin/env bash
# On a CUDA machine with Python 3.12, torch and transformers (no package index needed): unpacks the deps that
# scripts/gpu_bundle.sh packed, then runs the GPU tier and the 0.36 B benchmark, logs under $OUT (docs/gpu.md).
#
#   bash scripts/gpu_check.sh [pytest args ...]     # e.g. -k "fsdp2 and float32" to run part of the tier
#
# Environment: OUT (logs; default ./gpu_out), GPU_TESTS_TIMEOUT / GPU_BENCH_TIMEOUT (seconds; 420 / 150),
# GPU_BENCH_ARGS (benchmarks/gpu_scale.py flags; default "--steps 3"), GPU_BENCH=0 to skip the benchmark.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # the carried deps on PYTHONPATH; $OUT/environment.txt

timeout "${GPU_TESTS_TIMEOUT:-420}" python3 -m pytest -m gpu tests/gpu -v -rs --durations=30 -p no:cacheprovider "$@" \
  2>&1 | tee "$OUT/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}
bench_rc=0
if [ "${GPU_BENCH:-1}" != "0" ]; then
  # shellcheck disable=SC2086 — GPU_BENCH_ARGS is a list of flags
  timeout "${GPU_BENCH_TIMEOUT:-150}" python3 benchmarks/gpu_scale.py ${GPU_BENCH_ARGS:---steps 3} \
    --json "$OUT/gpu_scale.json" 2>&1 | tee "$OUT/gpu_scale.log"
  bench_rc=${PIPESTATUS[0]}
fi
echo "gpu_check.sh: tests exit $tests_rc, benchmark exit $bench_rc; logs in $OUT" | tee -a "$OUT/environment.txt"
exit $((tests_rc || bench_rc))
