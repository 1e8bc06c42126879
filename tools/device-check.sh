#!/bin/bash
# device-check.sh: on a machine with an NVIDIA GPU, in one go: configure and build the CUDA
# configuration, run the GPU-tagged tests, then the GPU benchmarks (zfcore and torch eager on the
# same shapes, in this call) and print one table. Anyone can repeat the figures of docs/gpu.md.
# With 2 or more GPUs it also runs the ZeRO stages on 2 GPUs (Qwen2-1.5B, batch 8 x 512 per GPU,
# under mpirun) beside their torch peers under torchrun (tools/torch_eager_bench.py --parallel):
# DDP beside zero0 and zero1, FSDP2 (reshard_after_forward=False) beside zero2, FSDP2 with
# reshard_after_forward=True beside zero3; each peer runs once. ZF_STAGE_GPUS=1 runs the same
# comparison on one GPU (each stage's shard is then the whole model: the buffers each system keeps
# beside the activations, and how long it keeps them, show in the peaks). Every run inherits this
# shell's environment (set up the toolchain variables first where the machine needs them).
#
# usage: tools/device-check.sh [--no-tests] [--no-bench] [--no-single] [--stages-only]
#   --no-tests     build no tests and run none
#   --no-bench     run no benchmarks
#   --no-single    no single-GPU benchmarks
#   --stages-only  only the 2-GPU ZeRO stage benchmarks: no tests, no single-GPU benchmarks
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_JOBS (default: all cores),
#              ZF_BENCH_STEPS (timed steps, default 10),
#              ZF_STAGES (the stages of the 2-GPU benchmarks, default "zero0 zero1 zero2 zero3"),
#              ZF_SINGLE (the single-GPU benchmarks, default "qwen2-1.5b gpt2-124m"),
#              ZF_STAGE_GPUS (GPUs of the ZeRO stage benchmarks, 1, 2 or 4, default 2)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
jobs=${ZF_JOBS:-$(nproc)}
steps=${ZF_BENCH_STEPS:-10}
stages=${ZF_STAGES:-zero0 zero1 zero2 zero3}
singles=${ZF_SINGLE:-qwen2-1.5b gpt2-124m}
stage_gpus=${ZF_STAGE_GPUS:-2}
case $stage_gpus in 1|2|4) ;; *) echo "ZF_STAGE_GPUS: 1, 2 or 4, not '$stage_gpus'" >&2; exit 2 ;; esac
run_tests=1 run_bench=1 run_single=1
for arg in "$@"; do
  case $arg in
    --no-tests) run_tests=0 ;;
    --no-bench) run_bench=0 ;;
    --no-single) run_single=0 ;;
    --stages-only) run_tests=0 run_single=0 ;;
    *) echo "usage: $0 [--no-tests] [--no-bench] [--no-single] [--stages-only]" >&2; exit 2 ;;
  esac
done
for stage in $stages; do
  case $stage in
    zero0|zero1|zero2|zero3) ;;
    *) echo "ZF_STAGES: unknown stage '$stage' (zero0 zero1 zero2 zero3)" >&2; exit 2 ;;
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
stage_targets=$(for stage in $stages; do [ "$stage" = zero0 ] || printf 'zf-stage-%s ' "$stage"; done)
# shellcheck disable=SC2086  # one target per stage
cmake --build "$build" -j "$jobs" --target zfcore zf-optimizer-gpu_adam zf-stage-zero0 $stage_targets zf-offload-none \
  zf-selector-all zf-selector-topk_l1 2>&1 | grep -E "error|FAILED|warning: unused" | head -40
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
  if command -v torchrun >/dev/null; then torchrun=(torchrun); else torchrun=(python3 -m torch.distributed.run); fi
  zf_result="{}" torch_result="{}"
  zfcore_bench() {  # name config batch seq [launcher...]: runs zfcore, sets zf_result (JSON)
    local name=$1 config=$2 batch=$3 seq=$4 out="$build/bench-$1"
    shift 4
    rm -rf "$out"
    timeout 300 "$@" "$build/bin/zfcore" run "$root/$config" --set run.output_dir="$out" \
      --set train.steps=$((steps + 3)) --set run.timing_warmup=3 "${zf_sets[@]}" >"$out.log" 2>&1 \
      || { echo "zfcore $name failed:"; tail -20 "$out.log"; status=1; }
    tail -3 "$out.log"
    zf_result=$(python3 - "$out/summary.json" "$batch" "$seq" "$out/steps.jsonl" <<'PY'
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
                  "allocated_at_gib": {k: round(v / 2**30, 2) for k, v in s["gpu_memory_bytes"].get("allocated_at", {}).items()},
                  "device_buffers_gib": {k[len("device."):]: round(v / 2**30, 2) for k, v in s["memory_bytes"].items()
                                         if k.startswith("device.") and v >= 2**26},
                  "device_buffer_peaks_gib": {k[len("device."):]: round(v / 2**30, 2)
                                              for k, v in s.get("memory_peak_bytes", {}).items()
                                              if k.startswith("device.") and v >= 2**26},
                  "loss": round(s["final_loss"], 4), "last_step_timers_ms": {k: round(v, 2) for k, v in last["timers_ms"].items() if not k.endswith("_microstep")}}))
PY
)
    echo "zfcore $name: $zf_result"
  }
  torch_bench() {  # name shape batch seq [launcher... --]: tools/torch_eager_bench.py, sets torch_result
    local name=$1 shape=$2 batch=$3 seq=$4 log="$build/bench-$1.torch.log" launcher=() extra=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do launcher+=("$1"); shift; done
    [ $# -gt 0 ] && shift && extra=("$@")
    [ ${#launcher[@]} -gt 0 ] || launcher=(python3)
    torch_result=$(timeout 300 "${launcher[@]}" "$root/tools/torch_eager_bench.py" "$shape" --batch "$batch" \
      --seq "$seq" --warmup 3 --steps "$steps" "${extra[@]}" 2>"$log" | grep '^{' | tail -1)
    [ -n "$torch_result" ] || { echo "torch $name failed:"; tail -20 "$log"; torch_result="{}"; status=1; }
    echo "torch  $name: $torch_result"
  }
  zf_sets=()
  results=()
  bench() {  # name config batch seq torch-shape: zfcore and torch eager on one GPU
    zfcore_bench "$1" "$2" "$3" "$4"
    torch_bench "$1" "$5" "$3" "$4"
    results+=("$1|$zf_result|$torch_result")
  }
  if [ "$run_single" = 1 ]; then
    for single in $singles; do
      case $single in
        qwen2-1.5b) bench qwen2-1.5b examples/gpu/qwen2-1.5b-bench.toml 8 512 qwen2-1.5b ;;
        gpt2-124m) bench gpt2-124m examples/gpu/gpt2-124m-bench.toml 4 512 gpt2 ;;
        *) echo "ZF_SINGLE: unknown benchmark '$single' (qwen2-1.5b gpt2-124m)" >&2; status=1 ;;
      esac
    done
  fi
  gpus=$(nvidia-smi --list-gpus | wc -l)
  stage_results=()
  declare -A peer_result=()
  if [ "$gpus" -ge "$stage_gpus" ]; then  # the ZeRO stages over NCCL, batch 8 x 512 per GPU
    echo "== ZeRO stages on $stage_gpus GPU(s) (${stages// /, }) beside torch DDP / FSDP2 on $stage_gpus GPU(s)"
    for stage in $stages; do
      case $stage in
        zero0|zero1) peer=ddp ;;
        zero2) peer=fsdp2 ;;
        zero3) peer=fsdp2-reshard ;;
      esac
      zf_sets=(--set stage.plugin="$stage")
      zfcore_bench "qwen2-1.5b-$stage-x$stage_gpus" examples/gpu/qwen2-1.5b-bench.toml 8 512 \
        mpirun --allow-run-as-root --bind-to none -np "$stage_gpus"
      zf_sets=()
      if [ -z "${peer_result[$peer]:-}" ]; then
        torch_bench "qwen2-1.5b-$peer-x$stage_gpus" qwen2-1.5b 8 512 "${torchrun[@]}" --standalone \
          --nproc_per_node "$stage_gpus" \
          -- --parallel "$peer"
        peer_result[$peer]=$torch_result
      fi
      stage_results+=("$stage|$zf_result|$peer|${peer_result[$peer]}")
    done
    if [ "$stage_gpus" = 2 ]; then
      # The same global batch (16 x 512) on one GPU (two micro-batches) and on two (one each), with
      # deterministic kernels: the parameters after 3 steps must be bit-identical.
      echo "== param_digest, Qwen2-1.5B, 3 steps of 16 x 512, run.deterministic: 1 GPU vs 2 GPUs"
      digests=()
      for world in 1 2; do
        out="$build/digest-x$world"
        rm -rf "$out"
        timeout 300 mpirun --allow-run-as-root --bind-to none -np $world "$build/bin/zfcore" run \
          "$root/examples/gpu/qwen2-1.5b-bench.toml" --set run.output_dir="$out" --set train.steps=3 \
          --set run.deterministic=true --set train.grad_accum=$((3 - world)) >"$out.log" 2>&1 \
          || { echo "digest run on $world GPU(s) failed:"; tail -20 "$out.log"; status=1; }
        digests+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["param_digest"])' "$out/summary.json" 2>/dev/null)")
        echo "$world GPU(s): param_digest ${digests[-1]:-missing}"
      done
      if [ -n "${digests[0]}" ] && [ "${digests[0]}" = "${digests[1]}" ]; then echo "param_digest equal"
      else echo "param_digest DIFFERS"; status=1; fi
    fi
  else
    echo "== ZeRO stages: $gpus GPU here, they need $stage_gpus: skipped"
  fi
  echo "== summary"
  if [ ${#results[@]} -gt 0 ]; then
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
  if [ ${#stage_results[@]} -gt 0 ]; then
    echo "Qwen2-1.5B on $stage_gpus GPU(s), batch 8 x 512 per GPU; tokens/s over all GPUs; peak GiB per GPU"
    printf '%s\n' "${stage_results[@]}" | python3 -c '
import json, sys
row = "%-6s %10s %10s %8s | %-14s %10s %10s %8s | %8s"
print(row % ("stage", "zf ms", "zf tok/s", "zf GiB", "torch peer", "torch ms", "tok/s", "GiB", "zf/torch"))
ms = {}
for line in sys.stdin:
    stage, zf, peer, torch = line.rstrip("\n").split("|")
    z, t = json.loads(zf or "{}"), json.loads(torch or "{}")
    ms[stage] = z.get("step_ms")
    ratio = "%.3f" % (z["step_ms"] / t["step_ms"]) if z.get("step_ms") and t.get("step_ms") else "-"
    print(row % (stage, z.get("step_ms", "-"), z.get("tokens_per_s", "-"), z.get("peak_gib", "-"), peer,
                 t.get("step_ms", "-"), t.get("tokens_per_s", "-"), t.get("peak_gib", "-"), ratio))
if ms.get("zero2") and ms.get("zero3"):
    print("zero3/zero2 throughput = %.3f" % (ms["zero2"] / ms["zero3"]))
'
  fi
fi
exit $status
