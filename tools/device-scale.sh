#!/bin/bash
# device-scale.sh: on a GPU machine, the scale tiers in one go, each part optional:
#   disk  zfcore bench disk on the state directory (the NVMe tier's ceiling), always first
#   tests the [gpu] tests of nvme, cpu_full and ZenFlow
#   full  the Qwen2-1.5B shape: no offload, cpu_optimizer and cpu_full (tools/offload_bench.py)
#   nvme  Qwen2.5-0.5B (8 x 512, bf16): cpu_optimizer, nvme with all state on disk, nvme with a
#         host budget of half the state: param_digest of each (must match), step time, and the
#         swap throughput against the disk's (bytes moved / time, each direction at its own rate)
#   7b    the Llama-2-7B shape (4 x 512, bf16, activation checkpointing): no offload, cpu_optimizer,
#         cpu_optimizer with ratio auto (auto), cpu_full and ZenFlow (topk 0.1, U 4, overlap): mean,
#         median and slowest step, practicality
#         (no-offload step / step), GPU peak and pinned memory (ZF_7B_MICRO_BATCH: default 4)
#   13b   the Llama-2-13B shape with bf16 moments on disk (nvme, host budget 16 GB): step time
# usage: tools/device-scale.sh [tests] [full] [nvme] [7b] [13b]
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_STATE_DIR (default /tmp/zfcore-state),
#   ZF_TARGETS (what to build beside zfcore and its plugins; default all), ZF_7B_RUNS (default "none cpu auto full zenflow")
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/scale-bench}
state=${ZF_STATE_DIR:-/tmp/zfcore-state}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
if [ ! -x "$build/bin/zfcore" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins ${ZF_TARGETS:-all} 2>&1 | grep -E "error|FAILED" | head -40
zfcore="$build/bin/zfcore"
mkdir -p "$out" "$state"
free -g | head -2
df -h "$state" | tail -1

"$zfcore" bench disk "$state" --size-gb 4 --json "$out/disk.json" || exit 1

run() {  # name, config, extra args...
  local name=$1 config=$2; shift 2
  /usr/bin/time -f "$name: %e s wall, %M KiB max RSS" "$zfcore" run "$root/$config" --set run.output_dir="$out/$name" \
    --set run.progress=off "$@" >"$out/$name.log" 2>&1 || { echo "$name failed:"; tail -15 "$out/$name.log"; return 1; }
  tail -1 "$out/$name.log"
}
report() {  # name, skipped steps, reference name (optional)
  python3 - "$out" "$1" "$2" "${3:-}" <<'PY'
import json, os, statistics, sys
out, name, skip, ref = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def steps(n): return [json.loads(l) for l in open(f"{out}/{n}/steps.jsonl")]
rows = steps(name)
ms = [r["step_ms"] for r in rows[skip:]]
s = json.load(open(f"{out}/{name}/summary.json"))
line = (f"{name}: mean {statistics.mean(ms):.1f} ms, median {statistics.median(ms):.1f}, max {max(ms):.1f} "
        f"(steps {skip+1}-{len(rows)}), loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}, "
        f"digest {s.get('param_digest')}, gpu peak {s.get('gpu_memory_bytes', {}).get('allocated_peak', 0)/2**30:.1f} GiB, "
        f"pinned {s.get('planned_pinned_bytes', 0)/2**30:.1f} GiB")
if ref and os.path.exists(f"{out}/{ref}/steps.jsonl"):
    r = [x["step_ms"] for x in steps(ref)[skip:]]
    line += f", practicality {100*statistics.mean(r)/statistics.mean(ms):.1f}% of {ref}"
print(line)
if "nvme_bytes_written" in s:
    disk = json.load(open(f"{out}/disk.json"))
    n = len(rows)
    rd, wr = s["nvme_bytes_read"] / n, s["nvme_bytes_written"] / n
    ideal = rd / (disk["read_gbps"] * 1e9) + wr / (disk["write_gbps"] * 1e9)
    t = statistics.mean(ms) / 1e3
    print(f"{name}: per step {rd/1e9:.2f} GB read, {wr/1e9:.2f} GB written; at the disk's rates "
          f"{ideal:.2f} s, the step {t:.2f} s: swap throughput {100*ideal/t:.0f}% of zfcore bench disk")
    last = rows[-1]["timers_ms"]
    print(f"{name}: timers of the last step", {k: round(v, 1) for k, v in last.items()})
PY
}

for part in "$@"; do
  case $part in
  tests)
    cmake --build "$build" -j "$(nproc)" --target test_gpu 2>&1 | grep -E "error|FAILED" | head -20
    (cd "$build/tests/gpu" && timeout 400 ctest --output-on-failure --timeout 300 -R "nvme|cpu_full|ZenFlow") | tail -30
    ;;
  full)
    python3 "$root/tools/offload_bench.py" "$build" --steps 6 --only none cpu_optimizer cpu_full
    ;;
  nvme)
    small="--set model.preset=qwen2.5-0.5b --set train.steps=4 --set run.deterministic=true"
    run nvme-cpu examples/gpu/qwen2-1.5b-bench.toml $small --set offload.plugin=cpu_optimizer \
      --set optimizer.plugin=cpu_adam && report nvme-cpu 1
    run nvme-disk examples/gpu/qwen2-1.5b-bench.toml $small --set offload.plugin=nvme \
      --set offload.path="$state" --set optimizer.plugin=cpu_adam && report nvme-disk 1
    run nvme-budget examples/gpu/qwen2-1.5b-bench.toml $small --set offload.plugin=nvme \
      --set offload.path="$state" --set offload.host_budget_gb=2 --set optimizer.plugin=cpu_adam \
      && report nvme-budget 1
    ls -A "$state" | head -3
    ;;
  7b)
    big="--set model.preset=llama2-7b --set data.vocab=32000 --set train.micro_batch=${ZF_7B_MICRO_BATCH:-4}"
    big="$big --set model.activation_checkpointing=true"
    wants() { [[ " ${ZF_7B_RUNS:-none cpu auto full zenflow} " == *" $1 "* ]]; }
    wants none && run 7b-none examples/gpu/qwen2-1.5b-bench.toml $big --set train.steps=5 && report 7b-none 2
    wants cpu && run 7b-cpu examples/gpu/qwen2-1.5b-bench.toml $big --set train.steps=5 \
      --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam && report 7b-cpu 2 7b-none
    wants auto && run 7b-auto examples/gpu/qwen2-1.5b-bench.toml $big --set train.steps=6 \
      --set offload.plugin=cpu_optimizer --set offload.ratio=auto --set optimizer.plugin=cpu_adam \
      && report 7b-auto 3 7b-none && grep "offload.ratio = auto" "$out/7b-auto.log"
    wants full && run 7b-full examples/gpu/qwen2-1.5b-bench.toml $big --set train.steps=5 --set offload.plugin=cpu_full \
      --set optimizer.plugin=cpu_adam && report 7b-full 2 7b-none
    wants zenflow && run 7b-zenflow examples/gpu/qwen2-1.5b-zenflow.toml $big --set train.steps=13 \
      && report 7b-zenflow 4 7b-none && grep -E "^step" "$out/7b-zenflow.log" | tail -6
    ;;
  13b)
    run 13b-nvme examples/gpu/qwen2-1.5b-bench.toml --set model.preset=llama2-13b --set data.vocab=32000 \
      --set train.micro_batch=4 --set model.activation_checkpointing=true --set train.steps=3 \
      --set offload.plugin=nvme --set offload.path="$state" --set offload.host_budget_gb=16 \
      --set optimizer.plugin=cpu_adam --set optimizer.moment_dtype=bf16 && report 13b-nvme 1
    ;;
  esac
done
