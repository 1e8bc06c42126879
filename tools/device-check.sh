#!/bin/bash
# device-check.sh: on a machine with an NVIDIA GPU, in one go: configure and build the CUDA
# configuration, run the GPU-tagged tests, then the GPU benchmarks (zfcore and torch eager on the
# same shapes, in this call) and print one table. Anyone can repeat the figures of docs/gpu.md.
#
# usage: tools/device-check.sh [--no-tests] [--no-bench]
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_JOBS (default: all cores),
#              ZF_BENCH_STEPS (timed steps, default 10)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
jobs=${ZF_JOBS:-$(nproc)}
steps=${ZF_BENCH_STEPS:-10}
run_tests=1 run_bench=1
for arg in "$@"; do
  case $arg in
    --no-tests) run_tests=0 ;;
    --no-bench) run_bench=0 ;;
    *) echo "usage: $0 [--no-tests] [--no-bench]" >&2; exit 2 ;;
  esac
done
status=0

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }

echo "== build ($build, -j$jobs)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
# zfcore and the plugins the benchmarks use first, so that the figures come even if a test fails
# to build; test_gpu then depends on every plugin.
cmake --build "$build" -j "$jobs" --target zfcore zf-optimizer-gpu_adam zf-stage-zero0 zf-offload-none \
  zf-selector-all 2>&1 | grep -E "error|FAILED|warning: unused" | head -40
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build failed" >&2; exit 1; }
if [ "$run_tests" = 1 ]; then
  cmake --build "$build" -j "$jobs" --target test_gpu 2>&1 | grep -E "error|FAILED" | head -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test build failed" >&2; status=1; run_tests=0; }
fi

if [ "$run_tests" = 1 ]; then
  echo "== GPU tests ([gpu]; cases needing more GPUs than present are reported as skipped)"
  (cd "$build/tests/gpu" && timeout 240 ctest --output-on-failure --timeout 120) || status=1
fi

if [ "$run_bench" = 1 ]; then
  echo "== benchmarks (warm-up 3 steps, then $steps timed steps each)"
  results=()
  bench() {  # name config batch seq torch-shape [launcher...]
    local name=$1 config=$2 batch=$3 seq=$4 shape=$5 out="$build/bench-$1"
    shift 5
    rm -rf "$out"
    timeout 300 "$@" "$build/bin/zfcore" run "$root/$config" --set run.output_dir="$out" \
      --set train.steps=$((steps + 3)) --set run.timing_warmup=3 >"$out.log" 2>&1 \
      || { echo "zfcore $name failed:"; tail -20 "$out.log"; status=1; }
    tail -3 "$out.log"
    local zf torch
    zf=$(python3 - "$out/summary.json" "$batch" "$seq" "$out/steps.jsonl" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
    last = json.loads(open(sys.argv[4]).read().splitlines()[-1])  # the last step's timer breakdown
except Exception:
    print("{}"); sys.exit()
tokens = int(sys.argv[2]) * int(sys.argv[3]) * s["world_size"]
ms = s["mean_step_ms"]
print(json.dumps({"step_ms": round(ms, 2), "tokens_per_s": round(tokens / (ms / 1000)),
                  "peak_gib": round(s["gpu_memory_bytes"]["allocated_peak"] / 2**30, 2),
                  "reserved_gib": round(s["gpu_memory_bytes"]["reserved_peak"] / 2**30, 2),
                  "loss": round(s["final_loss"], 4), "last_step_timers_ms": {k: round(v, 2) for k, v in last["timers_ms"].items() if not k.endswith("_microstep")}}))
PY
)
    torch=$(timeout 300 python3 "$root/tools/torch_eager_bench.py" "$shape" --batch "$batch" --seq "$seq" \
      --warmup 3 --steps "$steps" 2>"$out.torch.log" | tail -1)
    [ -n "$torch" ] || { echo "torch $name failed:"; tail -20 "$out.torch.log"; torch="{}"; status=1; }
    echo "zfcore $name: $zf"
    echo "torch  $name: $torch"
    results+=("$name|$zf|$torch")
  }
  bench qwen2-1.5b examples/gpu/qwen2-1.5b-bench.toml 8 512 qwen2-1.5b
  bench gpt2-124m examples/gpu/gpt2-124m-bench.toml 4 512 gpt2
  gpus=$(nvidia-smi --list-gpus | wc -l)
  if [ "$gpus" -ge 2 ]; then  # zero0 data parallel over NCCL, batch 8 x 512 per GPU (torch: 1 GPU)
    bench qwen2-1.5b-zero0-x2 examples/gpu/qwen2-1.5b-bench.toml 8 512 qwen2-1.5b \
      mpirun --allow-run-as-root --bind-to none -np 2
  fi
  echo "== summary"
  printf '%s\n' "${results[@]}" | python3 -c '
import json, sys
print("%-12s %-8s %10s %12s %9s" % ("shape", "system", "step ms", "tokens/s", "peak GiB"))
for line in sys.stdin:
    name, zf, torch = line.rstrip("\n").split("|")
    for system, text in (("zfcore", zf), ("torch", torch)):
        r = json.loads(text or "{}")
        print("%-12s %-8s %10s %12s %9s" % (name, system, r.get("step_ms", "-"), r.get("tokens_per_s", "-"), r.get("peak_gib", "-")))
    z, t = json.loads(zf or "{}"), json.loads(torch or "{}")
    if z.get("step_ms") and t.get("step_ms"):
        print("%-12s zfcore/torch step time %.3f" % (name, z["step_ms"] / t["step_ms"]))
'
fi
exit $status
