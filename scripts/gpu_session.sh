#!/usr/bin/env bash
# Issue 41's prepared device session, one `run` call on a lent CUDA machine (docs/gpu.md, "Prepared, not yet run"):
# unpacks the deps (scripts/gpu_bundle.sh; TRL included), then, each part under its own time limit and within
# one deadline (GPU_SESSION_SECONDS, default 570: the tool's 600-s command limit less a margin):
#   1. benchmarks/gpu_vs_trl.py: roll and TRL's GRPOTrainer, 0.36 B Qwen2, bf16, 3 steps each        (~2-3 min)
#   2. benchmarks/gpu_learn.py: the 0.36 B model warm-started, then RL in bf16 with the launcher;
#      held-out accuracy before -> after                                                             (~3-4 min)
#   3. benchmarks/gpu_vs_trl.py --sides roll --fast: roll's switches for a GPU with memory to spare (FAST_OVERRIDES
#      there: hf_infer's static KV cache, which lets transformers compile the decode step) and GPU_FAST_OVERRIDES:
#      the same work as 1 (the same model folder), roll only                                          (rest)
# A part that fails or runs out of time does not stop the next. What comes back (at most 8 files): $OUT/
# environment.txt, vs_trl.log/.json, learn.log/.json, fast.log/.json, summary.txt (each part's exit code and the
# lines that matter).
#
#   OUT=/some/dir bash scripts/gpu_session.sh
#
# Environment: GPU_SESSION_SECONDS (570), GPU_VS_TRL_ARGS ("--steps 3"), GPU_LEARN_ARGS ("--steps 20 --eval_steps
# 10"), GPU_FAST_OVERRIDES (more Hydra overrides for part 3), GPU_SESSION_PARTS ("vs_trl learn fast": which parts,
# in this order). Refuses to start without an NVIDIA GPU (the parts are sized for one).
set -uo pipefail
began=$SECONDS
command -v nvidia-smi >/dev/null 2>&1 || { echo "gpu_session.sh: no nvidia-smi: this needs the lent GPU machine"; exit 2; }
source "$(dirname "$0")/gpu_env.sh"
deadline=$((began + ${GPU_SESSION_SECONDS:-570}))
work=${GPU_SESSION_WORK:-/tmp/roll-gpu-session}  # the 0.36 B model of parts 1 and 3 (built once)
summary=$OUT/summary.txt
: >"$summary"

part() {  # part NAME CAP_SECONDS command...: runs it under min(CAP, time left), log to $OUT/NAME.log
  local name=$1 cap=$2 left
  shift 2
  left=$((deadline - SECONDS - 5))
  if [ "$left" -lt 30 ]; then
    echo "$name: not run, ${left} s left before the deadline" | tee -a "$summary"
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "=== $name (limit ${cap} s): $*" | tee -a "$summary"
  local started=$SECONDS
  timeout --kill-after=10 "$cap" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "$name: exit $rc after $((SECONDS - started)) s; GPU memory used now: $(nvidia-smi --query-gpu=memory.used \
    --format=csv,noheader)" | tee -a "$summary"
  # the lines worth reading first: tables, ratios, accuracies, errors
  grep -E '^\||held-out|warm start:|s/step|Error|error:|Traceback' "$OUT/$name.log" | tail -n 25 >>"$summary"
}

parts=${GPU_SESSION_PARTS:-vs_trl learn fast}
# shellcheck disable=SC2086 — the *_ARGS variables are lists of flags
for name in $parts; do
  case $name in
    vs_trl) part vs_trl 210 python3 benchmarks/gpu_vs_trl.py ${GPU_VS_TRL_ARGS:---steps 3} --label "roll vs TRL" \
      --work_dir "$work" --json "$OUT/vs_trl.json" ;;
    learn) part learn 240 python3 benchmarks/gpu_learn.py ${GPU_LEARN_ARGS:---steps 20 --eval_steps 10} \
      --json "$OUT/learn.json" ;;
    fast) part fast 200 python3 benchmarks/gpu_vs_trl.py ${GPU_VS_TRL_ARGS:---steps 3} --sides roll --fast \
      --label "roll --fast" --work_dir "$work" --json "$OUT/fast.json" --roll_overrides ${GPU_FAST_OVERRIDES:-} ;;
    *) echo "gpu_session.sh: unknown part $name (vs_trl, learn, fast)" | tee -a "$summary" ;;
  esac
done
echo "gpu_session.sh: done in $((SECONDS - began)) s; files in $OUT" | tee -a "$summary"
cat "$summary"
