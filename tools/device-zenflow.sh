#!/bin/bash
# device-zenflow.sh: on a GPU machine, in one go: build the CUDA configuration, then train the
# Qwen2-1.5B shape (8 x 512, bf16) without offload and with ZenFlow (topk 0.1, U 4, overlap; the
# staggered schedule, then the deepspeed one; then topk_ratio = auto, which fills the GPU memory the
# model leaves), and print each run's mean step after warm-up, its
# median and slowest step, the ratio to the no-offload step, and ZenFlow's step lines (update
# events and timers).
# usage: tools/device-zenflow.sh [--with-3b]     environment: ZF_BUILD_DIR (default
#   /tmp/zfcore-build-cuda), ZF_TARGETS (what to build besides zfcore and its plugins; default all)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/zenflow-bench}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target zfcore 2>&1 | grep -E "error|FAILED" | head -40
cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins ${ZF_TARGETS:-all} 2>&1 | grep -E "error|FAILED" | head -20
zfcore="$build/bin/zfcore"
summarize() {  # steps.jsonl, skipped steps, label, reference mean
  python3 - "$1" "$2" "$3" "${4:-0}" <<'PY'
import json, statistics, sys
path, skip, label, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
rows = [json.loads(l) for l in open(path)]
ms = [r["step_ms"] for r in rows[skip:]]
mean, median = statistics.mean(ms), statistics.median(ms)
line = f"{label}: mean {mean:.1f} ms, median {median:.1f}, max {max(ms):.1f} (max/median {max(ms)/median:.2f}) over steps {skip+1}-{len(rows)}"
if ref: line += f", practicality {100*ref/mean:.1f}%"
print(line)
print(f"{label}: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY
}
mean_of() { python3 -c "import json,statistics,sys; r=[json.loads(l)['step_ms'] for l in open(sys.argv[1])][int(sys.argv[2]):]; print(statistics.mean(r))" "$1" "$2"; }
bench() {  # name, config, skipped steps, extra args...
  local name=$1 config=$2 skip=$3; shift 3
  "$zfcore" run "$root/$config" --set run.output_dir="$out/$name" "$@" >"$out/$name.log" 2>&1 \
    || { echo "$name failed:"; tail -20 "$out/$name.log"; return 1; }
}
mkdir -p "$out"
status=0
run_pair() {  # label, preset args
  local label=$1; shift
  bench "$label-none" examples/gpu/qwen2-1.5b-bench.toml 3 --set train.steps=15 "$@" || status=1
  bench "$label-zenflow" examples/gpu/qwen2-1.5b-zenflow.toml 5 --set train.steps=29 "$@" || status=1
  bench "$label-zenflow-deepspeed" examples/gpu/qwen2-1.5b-zenflow.toml 5 --set train.steps=29 \
    --set zenflow.schedule=deepspeed "$@" || status=1
  [ -f "$out/$label-none/steps.jsonl" ] || return
  ref=$(mean_of "$out/$label-none/steps.jsonl" 3)
  summarize "$out/$label-none/steps.jsonl" 3 "$label no offload"
  [ -f "$out/$label-zenflow/steps.jsonl" ] || return
  summarize "$out/$label-zenflow/steps.jsonl" 5 "$label ZenFlow" "$ref"
  grep -E "^step|memory plan" "$out/$label-zenflow.log" | tail -8
  python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); t=r['timers_ms']
    print(r['step'], r.get('update',''), round(r['step_ms'],1), {k: round(v,1) for k,v in t.items() if k.startswith('selective') or k in ('fwd','bwd','cpu_update','update_wait')})
" "$out/$label-zenflow/steps.jsonl" | tail -9
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k:s[k] for k in ('mean_step_ms','zenflow_cpu_updates','offload_bytes_down','gpu_memory_bytes','planned_pinned_bytes') if k in s})" "$out/$label-zenflow/summary.json"
  bench "$label-zenflow-auto" examples/gpu/qwen2-1.5b-zenflow.toml 5 --set train.steps=29 \
    --set zenflow.topk_ratio=auto "$@" || status=1
  [ -f "$out/$label-zenflow-deepspeed/steps.jsonl" ] || return
  summarize "$out/$label-zenflow-deepspeed/steps.jsonl" 5 "$label ZenFlow, deepspeed schedule" "$ref"
  [ -f "$out/$label-zenflow-auto/steps.jsonl" ] || return
  summarize "$out/$label-zenflow-auto/steps.jsonl" 5 "$label ZenFlow, topk_ratio auto" "$ref"
  grep -E "auto chose" "$out/$label-zenflow-auto.log"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k:s[k] for k in ('zenflow_topk_ratio','gpu_memory_bytes') if k in s})" "$out/$label-zenflow-auto/summary.json"
}
run_pair qwen2-1.5b
if [ "${1:-}" = --with-3b ]; then run_pair qwen2.5-3b --set model.preset=qwen2.5-3b; fi
exit $status
