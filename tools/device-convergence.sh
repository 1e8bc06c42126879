#!/bin/bash
# device-convergence.sh: on a GPU machine, judge ZenFlow's corrections of its delayed update
# (docs/zenflow.md, "Correcting the delay"): build zfcore with CUDA once, then run the convergence
# recipe's benchmarks with AdamW, ZenFlow (its default correction, age_gate), ZenFlow uncorrected and
# under lookahead, 3 trials a row, the rows after the first given 1.5x the steps (steps and time to
# AdamW's final held-out loss).
# usage: tools/device-convergence.sh [PAIR [PART]]   PAIR: python | heldout | docs (default: all
#   three), PART: finetune | scratch (default: both). One pair and part fits 10 minutes on an H100.
#   environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_OUT (default /tmp/convergence),
#   ZF_TRIALS (default 3), ZF_ROWS (the rows; default below)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/convergence}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
if [ ! -x "$build/bin/zfcore" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" 2>&1 | grep -E "error|FAILED" | head -40
fi
default_rows=(none zenflow
  'zf-none:zenflow,zenflow.correction=none'
  'zf-lookahead:zenflow,zenflow.correction=lookahead'
  'zf-lookahead-half:zenflow,zenflow.correction=lookahead,zenflow.correction_factor=0.5')
read -r -a rows <<<"${ZF_ROWS:-}"
[ ${#rows[@]} -gt 0 ] || rows=("${default_rows[@]}")
pairs=${1:-python heldout docs}
parts=${2:-both}
status=0
for pair in $pairs; do
  ZFCORE="$build/bin/zfcore" "$root/tools/convergence_recipe.sh" --device cuda --pair "$pair" --part "$parts" \
    --output-dir "$out/$pair" -- --trials "${ZF_TRIALS:-3}" --steps-factor 1.5 --rows "${rows[@]}" \
    > "$out-$pair-$parts.log" 2>&1 || status=1
  # the tables: each row's final loss over AdamW's, steps and time to AdamW's loss (with the ratios)
  grep -A22 "zfcore bench convergence:" "$out-$pair-$parts.log"
done
exit $status
