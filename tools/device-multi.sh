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
# The 2-GPU parts run on ZF_PAIR_CORES (default 0-31: the 32 cores a 2-GPU machine has, 16 per GPU),
# so that their figures compare with a 2-GPU machine's. Outputs under ZF_OUT (default /tmp/zfcore-multi).
# usage: tools/device-multi.sh PART...     environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ZF_BUILD_DIR=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
export ZF_TARGETS=${ZF_TARGETS:-zfcore test_gpu}  # what tools/device-suite.sh builds: zfcore and every plugin
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
    *) echo "unknown part '$part' (tests scaling multi binding stages reference stages4)" >&2; exit 2 ;;
  esac
done
exit $status
