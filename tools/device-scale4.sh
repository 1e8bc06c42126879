#!/bin/bash
# device-scale4.sh: on a 4-GPU machine, the models people offload for, each part optional:
#   14b  the Qwen2.5-14B shape: zfcore estimate --world 4, then zfcore bench scale on the 4 GPUs
#        (ZeRO-3 + cpu_optimizer, + offload.ratio = "auto", + ZenFlow with topk auto; bf16,
#        activation checkpointing, 8 x 512 tokens per GPU)
#   32b  the Qwen2.5-32B shape, the same
# Each bench prints its table (step time, tokens/s, MFU over the GPU's dense bf16 peak, compute =
# fwd + bwd with their collectives, practicality = compute / step, GPU peak and pinned host per rank
# beside the estimate's, time to the first step) and leaves its JSON, CSV and HTML report under
# $ZF_OUT/<part>/, with each row's floor (the CPU update's bytes over the host's measured memory
# bandwidth, PCIe over the link's, or the row's own compute) and its step over it. Rows are short
# (ZF_WARMUP + ZF_STEPS + 1 steps) so that a shape fits one call; the offload.ratio = "auto" row
# warms up at least 3 steps whatever ZF_WARMUP says (zfcore bench adds them: its choice after step 1
# and the two steps that move its part onto the GPU are left out of its step time).
# usage: tools/device-scale4.sh [14b] [32b]   (default both; one call each keeps a call under 10 minutes)
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_OUT (default /tmp/zfcore-scale4),
#   ZF_GPUS (default 4), ZF_STEPS (timed steps, default 3), ZF_WARMUP (default 1), ZF_MICRO_BATCH
#   (default 8), ZF_SEQ (default 512), ZF_SET_14B / ZF_SET_32B (extra --set items for one shape, e.g.
#   "optimizer.moment_dtype=bf16" where the estimate says fp32 moments do not fit the host), ZF_ROWS
#   (default "zero3_cpu_optimizer zero3_cpu_optimizer_auto zero3_zenflow"), ZF_TIMEOUT (per row, default 600)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/zfcore-scale4}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(14b 32b)
gpus=${ZF_GPUS:-4}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
started=$SECONDS
if [ ! -x "$build/bin/zfcore" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log"; exit 1; }
fi
# The binary and its plugins; the tests are not needed here.
cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins 2>&1 | grep -E "error|FAILED" | head -40
echo "== build: $((SECONDS - started)) s"
zfcore="$build/bin/zfcore"
mkdir -p "$out"
free -g | head -2
df -h "$out" | tail -1
status=0
for part in "${parts[@]}"; do
  case $part in
    14b) preset=qwen2.5-14b; extra=${ZF_SET_14B:-} ;;
    32b) preset=qwen2.5-32b; extra=${ZF_SET_32B:-} ;;
    *) echo "unknown part '$part' (14b 32b)" >&2; exit 2 ;;
  esac
  sets=(--set run.rank_timers=true)  # every rank's timers in steps.jsonl, summed up after the rows
  for item in $extra; do sets+=(--set "$item"); done
  config="$out/$part.toml"
  # The config the rows run, for the estimate (the bench writes its own base beside its results).
  cat >"$config" <<EOF
[run]
device = "cuda"
output_dir = "$out/$part-estimate"

[model]
preset = "$preset"
dtype = "bfloat16"
activation_checkpointing = true

[data]
type = "synthetic"
vocab = 152064
seq_len = ${ZF_SEQ:-512}

[train]
micro_batch = ${ZF_MICRO_BATCH:-8}

[stage]
plugin = "zero3"

[offload]
plugin = "cpu_optimizer"

[optimizer]
plugin = "cpu_adam"
EOF
  echo "== $part: zfcore estimate --world $gpus"
  "$zfcore" estimate "$config" --world "$gpus" "${sets[@]}" | sed -n '/^this config/,$p'
  "$zfcore" estimate "$config" --world "$gpus" "${sets[@]}" --set offload.ratio=auto | sed -n '/^offload/,/^formulas/p'
  # ZenFlow's row: its gradient sum, staging and selected columns (topk auto from this GPU's free memory).
  "$zfcore" estimate "$config" --world "$gpus" "${sets[@]}" --set zenflow.topk_ratio=auto \
    --set zenflow.update_interval=4 --set zenflow.overlap_step=true --set offload.pin_memory=true |
    sed -n '/^zenflow/,/^this config/p'
  echo "== $part: zfcore bench scale --model $preset --gpus $gpus"
  begun=$SECONDS
  # shellcheck disable=SC2086  # one argument per row
  "$zfcore" bench scale --model "$preset" --gpus "$gpus" --batch-size "${ZF_MICRO_BATCH:-8}" \
    --seq-length "${ZF_SEQ:-512}" --num-steps "${ZF_STEPS:-3}" --warmup-steps "${ZF_WARMUP:-1}" \
    --timeout "${ZF_TIMEOUT:-600}" --strategies ${ZF_ROWS:-zero3_cpu_optimizer zero3_cpu_optimizer_auto zero3_zenflow} \
    "${sets[@]}" --output-dir "$out/$part" || status=1
  echo "== $part: $((SECONDS - begun)) s"
  for log in "$out/$part"/scale_*/*.log; do  # what each row's rank 0 said before its first step
    [ -f "$log" ] || continue
    echo "-- $(basename "$log" .log):"
    grep -E "memory plan per rank|checkpoints:|ready to train|offload.ratio = auto|topk|error" "$log" | head -8
  done
  # Each row's per-rank timer medians over its steps after the first (where the step waited, on which rank).
  find "$out/$part" -path "*/scale_*" -name steps.jsonl -printf "%h\n" | sort |
    xargs -r python3 "$root/tools/rank_timers.py" --skip 1
done
echo "== total: $((SECONDS - started)) s"
exit $status
