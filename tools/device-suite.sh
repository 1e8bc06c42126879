#!/bin/bash
# device-suite.sh: on a GPU machine, the benchmark suite (zfcore bench) on the Qwen2-1.5B shape
# (bf16, 8 x 512 per GPU), each part optional, each suite writing its JSON, CSV, HTML report and
# recommended-<suite>.toml under $ZF_OUT/<part>/ and printing its console table:
#   stages     ZeRO stages 0-3 on all GPUs of the machine (at most 4; 1 without MPI); ZF_SUITE_STAGES
#              picks stages (default "0 1 2 3"), ZF_TRIALS runs each that many times in turns (default 1)
#   offload    none, cpu_optimizer, cpu_optimizer with offload.ratio = auto and cpu_full on one GPU
#              (nvme too when ZF_NVME_PATH is set)
#   zenflow    a 3 x 3 ZenFlow sweep on one GPU: topk 0.05 0.1 0.2 x update interval 2 4 8, overlap
#   multi      on all GPUs under ZeRO stage 2: none, cpu_optimizer and its ratio auto, then ZenFlow (topk 0.1, U 4,
#              overlap) under the staggered and the deepspeed schedule
#   binding    zfcore bench binding on all GPUs (threads bound inside zfcore, at launch, unbound)
#   reference  DeepSpeed's ZenFlow benchmark sweep (zf_benchmark.py / run_benchmark.sh) on all GPUs
#              under ZeRO stage 2 (as its DeepSpeed config):
#              topk 0.1, update interval 2 and 4, overlap on and off, pin memory on and off, beside
#              no offload and cpu_optimizer, on Qwen2-1.5B and on its linear_stack workload (hidden
#              4096, 4 layers)
# usage: tools/device-suite.sh [stages] [offload] [zenflow] [multi] [binding] [reference]
#   (default: the first three; tools/device-check.sh --stages-only puts the stages beside torch's)
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_OUT (default /tmp/zfcore-suite),
#   ZF_STEPS (timed steps, default 20), ZF_WARMUP (default 5), ZF_NVME_PATH, ZF_GPUS (default all)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/zfcore-suite}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(stages offload zenflow)
gpus=${ZF_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c GPU)}
[ "$gpus" -gt 0 ] || { echo "no GPU here" >&2; exit 1; }
[ "$gpus" -le 4 ] || gpus=4
if [ ! -x "$build/bin/zfcore" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins ${ZF_TARGETS:-all} 2>&1 | grep -E "error|FAILED" | head -40
zfcore="$build/bin/zfcore"
model="$root/examples/gpu/qwen2-1.5b-bench.toml"
common=(--num-steps "${ZF_STEPS:-20}" --warmup-steps "${ZF_WARMUP:-5}" --batch-size 8 --seq-length 512)
status=0
suite() {  # part, zfcore bench arguments...
  local part=$1 started=$SECONDS
  shift
  echo "== $part: zfcore bench $*"
  "$zfcore" bench "$@" --output-dir "$out/$part" || status=1
  echo "== $part: $((SECONDS - started)) s"
}
sweep=(--topk-ratios 0.1 --update-intervals 2 4 --overlap-steps true false --pin-memory-opts true false)
for part in "${parts[@]}"; do
  case $part in
    stages)
      # shellcheck disable=SC2086  # one argument per stage
      suite stages stages --model "$model" "${common[@]}" --gpus "$gpus" --stages ${ZF_SUITE_STAGES:-0 1 2 3} \
        --trials "${ZF_TRIALS:-1}" ;;
    offload)
      strategies=(none cpu_optimizer cpu_optimizer_auto cpu_full)
      nvme=()
      [ -n "${ZF_NVME_PATH:-}" ] && nvme=(--nvme-path "$ZF_NVME_PATH") && strategies+=(nvme)
      suite offload offload --model "$model" "${common[@]}" --strategies "${strategies[@]}" "${nvme[@]}" ;;
    zenflow)
      suite zenflow zenflow --model "$model" "${common[@]}" --topk-ratios 0.05 0.1 0.2 --update-intervals 2 4 8 \
        --overlap-steps true --pin-memory-opts true ;;
    multi)
      several=("${common[@]}" --model "$model" --gpus "$gpus" --set stage.plugin=zero2)
      zenflow=(--topk-ratios 0.1 --update-intervals 4 --overlap-steps true --pin-memory-opts true)
      suite multi-offload offload "${several[@]}" --strategies none cpu_optimizer cpu_optimizer_auto
      suite multi-zenflow zenflow "${several[@]}" "${zenflow[@]}"
      suite multi-zenflow-deepspeed zenflow "${several[@]}" "${zenflow[@]}" --set zenflow.schedule=deepspeed ;;
    binding) suite binding binding --model "$model" "${common[@]}" --gpus "$gpus" --set stage.plugin=zero2 ;;
    reference)  # ZeRO stage 2 under the offload, as the reference's DeepSpeed config has it
      zero2=(--set stage.plugin=zero2)
      suite reference-baselines offload --model "$model" "${common[@]}" --gpus "$gpus" "${zero2[@]}" \
        --strategies none cpu_optimizer
      suite reference-zenflow zenflow --model "$model" "${common[@]}" --gpus "$gpus" "${zero2[@]}" "${sweep[@]}"
      linear=(--model "$root/examples/linear_stack.toml" --set model.hidden=4096 --set model.layers=4
              "${zero2[@]}" --num-steps "${ZF_STEPS:-20}" --warmup-steps "${ZF_WARMUP:-5}" --gpus "$gpus")
      suite reference-linear-baselines offload "${linear[@]}" --strategies none cpu_optimizer
      suite reference-linear-zenflow zenflow "${linear[@]}" "${sweep[@]}" ;;
    *) echo "unknown part '$part' (stages offload zenflow multi binding reference)" >&2; exit 2 ;;
  esac
done
exit $status
