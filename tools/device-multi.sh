#!/bin/bash
# device-multi.sh: on a machine with 2 or 4 GPUs, the several-GPU figures in one go, each part
# optional (default: all), on the Qwen2-1.5B shape (bf16, 8 x 512 per GPU):
#   offload   zero2: none and cpu_optimizer (zfcore bench offload --gpus N)
#   zenflow   zero2: ZenFlow topk 0.1, U 4, overlap, under the staggered and the deepspeed schedule
#   binding   zfcore bench binding --gpus N: optimizer threads bound inside zfcore, at launch, unbound
#   stages    tools/device-check.sh --stages-only, twice in a row: zero0-3 beside DDP and FSDP2
#   tests     the [gpu] tests, the cases that need 2 GPUs included (ZF_TESTS: a ctest -R filter)
# Each suite writes its JSON, CSV, HTML report and recommended.toml under $ZF_OUT/<part>/.
# usage: tools/device-multi.sh [offload] [zenflow] [binding] [stages] [tests]
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_OUT (default /tmp/zfcore-multi),
#   ZF_STEPS (timed steps, default 20), ZF_WARMUP (default 5), ZF_GPUS (default all, at most 4),
#   ZF_BINDING_STRATEGIES (default "zero_offload zenflow"), ZF_STAGES (as tools/device-check.sh)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/zfcore-multi}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(offload zenflow binding stages tests)
gpus=${ZF_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c GPU)}
[ "$gpus" -ge 2 ] || { echo "device-multi.sh needs 2 or more GPUs, found $gpus" >&2; exit 1; }
[ "$gpus" -le 4 ] || gpus=4
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -E "error|FAILED" | head -40
zfcore="$build/bin/zfcore"
model="$root/examples/gpu/qwen2-1.5b-bench.toml"
common=(--model "$model" --num-steps "${ZF_STEPS:-20}" --warmup-steps "${ZF_WARMUP:-5}" --batch-size 8
        --seq-length 512 --gpus "$gpus" --set stage.plugin=zero2)
status=0
suite() {  # part, zfcore bench arguments...
  local part=$1 started=$SECONDS
  shift
  echo "== $part: zfcore bench $*"
  "$zfcore" bench "$@" --output-dir "$out/$part" || status=1
  echo "== $part: $((SECONDS - started)) s"
}
zenflow=(--topk-ratios 0.1 --update-intervals 4 --overlap-steps true --pin-memory-opts true)
for part in "${parts[@]}"; do
  case $part in
    offload) suite offload offload "${common[@]}" --strategies none cpu_optimizer ;;
    zenflow)
      suite zenflow-staggered zenflow "${common[@]}" "${zenflow[@]}"
      suite zenflow-deepspeed zenflow "${common[@]}" "${zenflow[@]}" --set zenflow.schedule=deepspeed ;;
    binding) suite binding binding "${common[@]}" --strategies ${ZF_BINDING_STRATEGIES:-zero_offload zenflow} ;;
    stages)
      for run in 1 2; do
        echo "== stages, run $run"
        ZF_BUILD_DIR="$build" "$root/tools/device-check.sh" --stages-only || status=1
      done ;;
    tests)
      echo "== GPU tests"
      (cd "$build/tests/gpu" && timeout 400 ctest --output-on-failure --timeout 200 -R "${ZF_TESTS:-.}") || status=1 ;;
    *) echo "unknown part '$part' (offload zenflow binding stages tests)" >&2; exit 2 ;;
  esac
done
exit $status
