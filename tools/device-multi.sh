#!/bin/bash
# device-multi.sh: on a machine with 2 or 4 GPUs, the multi-GPU figures of docs/gpu.md in one go,
# each part optional, in the order given (Qwen2-1.5B, bf16, 8 x 512 per GPU):
#   tests      the [gpu] tests, 2-GPU cases included (tools/device-check.sh --no-bench)
#   scaling    one GPU (zero0, on ZF_ONE_CORES, default 0-15) against 2 GPUs (ZeRO stages 0-3), two
#              trials of each 2-GPU row in turns: zero0/zero1 against one GPU, zero3 against zero2
#   multi      ZeRO-2 on 2 GPUs: none, cpu_optimizer, ZenFlow (topk 0.1, U 4, overlap) under both
#              schedules (tools/device-suite.sh multi)
#   binding    zfcore bench binding on 2 GPUs: bound inside zfcore, at launch, unbound
#   stages     ZeRO-2 and ZeRO-3 on 2 GPUs beside FSDP2 (tools/device-check.sh --stages-only)
#   reference  on 4 GPUs: DeepSpeed's ZenFlow benchmark sweep (tools/device-suite.sh reference)
#   stages4    on 4 GPUs: ZeRO stages 0-3 (the suite: peaks beside zfcore estimate) and beside DDP/FSDP2
#   turns4     on 4 GPUs under ZeRO-2: no offload and ZenFlow (topk 0.1, U 4, overlap) in turns, ZF_TRIALS
#              times (default 3), every rank's timers logged (run.rank_timers) and summarised by
#              tools/rank_timers.py: which rank each slow step waited for, and on what; ZF_ZENFLOW_SETS
#              adds --set overrides to the ZenFlow rows; then zero3's peak beside zfcore estimate --world 4
# The 2-GPU parts run on ZF_PAIR_CORES (default 0-31: the 32 cores a 2-GPU machine has, 16 per GPU),
# so that their figures compare with a 2-GPU machine's. Outputs under ZF_OUT (default /tmp/zfcore-multi).
# usage: tools/device-multi.sh PART...     environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ZF_BUILD_DIR=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
export ZF_TARGETS=${ZF_TARGETS:-test_gpu}  # what tools/device-suite.sh builds beside zfcore and every plugin
out=${ZF_OUT:-/tmp/zfcore-multi}
pair=${ZF_PAIR_CORES:-0-31}
one=${ZF_ONE_CORES:-0-15}
[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
[ "$gpus" -ge 2 ] || { echo "device-multi.sh: $gpus GPU here, it needs 2 or more" >&2; exit 1; }
nvidia-smi topo -m 2>/dev/null | head -8
lscpu | grep -E "^(Model name|Socket|NUMA node)" || true
status=0
timed() {  # part command...: runs it, prints its duration
  local part=$1 started=$SECONDS
  shift
  echo "=== $part"
  "$@" || { echo "=== $part: failed"; status=1; }
  echo "=== $part: $((SECONDS - started)) s"
}
turns4() {  # no offload and ZenFlow under zero2 on 4 GPUs, in turns, with every rank's timers
  local zfcore="$ZF_BUILD_DIR/bin/zfcore" model="$root/examples/gpu/qwen2-1.5b-bench.toml"
  if [ ! -x "$zfcore" ]; then
    cmake -S "$root" -B "$ZF_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >/dev/null || return 1
    cmake --build "$ZF_BUILD_DIR" -j "$(nproc)" --target zfcore 2>&1 | grep -E "error|FAILED" | head -20
  fi
  mkdir -p "$out/turns4"
  local common=(--set stage.plugin=zero2 --set train.steps=28 --set run.timing_warmup=3 --set run.rank_timers=true)
  local zenflow=(--set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam --set zenflow.topk_ratio=0.1
                 --set zenflow.update_interval=4 --set zenflow.overlap_step=true --set offload.pin_memory=true)
  local runs=() trial row
  for trial in $(seq "${ZF_TRIALS:-3}"); do
    for row in none zenflow zero3; do
      [ "$row" = zero3 ] && [ "$trial" -gt 1 ] && continue
      local dir="$out/turns4/$row-$trial" extra=()
      [ "$row" = zenflow ] && extra=("${zenflow[@]}" ${ZF_ZENFLOW_SETS:-})
      [ "$row" = zero3 ] && extra=(--set stage.plugin=zero3)
      mpirun --allow-run-as-root --bind-to none -np 4 "$zfcore" run "$model" --set run.output_dir="$dir" \
        "${common[@]}" "${extra[@]}" >"$dir.log" 2>&1 || { echo "$row-$trial failed:"; tail -5 "$dir.log"; }
      runs+=("$dir")
    done
  done
  python3 "$root/tools/rank_timers.py" "${runs[@]}"
  python3 - "$out/turns4" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(path))
    print(path.split("/")[-2], "gpu peak allocated %.2f GiB" % (s.get("gpu_memory_bytes", {}).get("allocated_peak", 0) / 2**30))
PY
  for stage in zero2 zero3; do
    "$zfcore" estimate "$model" --world 4 --set stage.plugin=$stage 2>&1 | grep -iE "total|device|$stage" | head -8
  done
}
for part in "$@"; do
  case $part in
    tests) timed tests "$root/tools/device-check.sh" --no-bench ;;
    scaling)
      timed scaling-one env ZF_GPUS=1 ZF_SUITE_STAGES=0 ZF_OUT="$out/one" CUDA_VISIBLE_DEVICES=0 taskset -c "$one" \
        "$root/tools/device-suite.sh" stages
      timed scaling-two env ZF_GPUS=2 ZF_TRIALS=2 ZF_OUT="$out/two" taskset -c "$pair" "$root/tools/device-suite.sh" stages ;;
    multi) timed multi env ZF_GPUS=2 ZF_OUT="$out" taskset -c "$pair" "$root/tools/device-suite.sh" multi ;;
    binding) timed binding env ZF_GPUS=2 ZF_OUT="$out" taskset -c "$pair" "$root/tools/device-suite.sh" binding ;;
    stages) timed stages env ZF_STAGE_GPUS=2 ZF_STAGES="zero2 zero3" "$root/tools/device-check.sh" --stages-only ;;
    reference)
      [ "$gpus" -ge 4 ] || { echo "=== reference: $gpus GPUs here, it needs 4: skipped"; continue; }
      timed reference env ZF_GPUS=4 ZF_OUT="$out" "$root/tools/device-suite.sh" reference ;;
    stages4)
      [ "$gpus" -ge 4 ] || { echo "=== stages4: $gpus GPUs here, it needs 4: skipped"; continue; }
      timed stages4-suite env ZF_GPUS=4 ZF_OUT="$out/x4" "$root/tools/device-suite.sh" stages
      timed stages4-torch env ZF_STAGE_GPUS=4 "$root/tools/device-check.sh" --stages-only ;;
    turns4)
      [ "$gpus" -ge 4 ] || { echo "=== turns4: $gpus GPUs here, it needs 4: skipped"; continue; }
      timed turns4 turns4 ;;
    *) echo "unknown part '$part' (tests scaling multi binding stages reference stages4 turns4)" >&2; exit 2 ;;
  esac
done
exit $status
