#!/bin/bash
# device-fused.sh: the fused step's figures on one GPU, in one call or in parts (each part is short
# enough for a command of a few minutes; the build directory is reused while the machine lives):
#   build    configure and build the CUDA configuration (zfcore, its plugins, test_gpu)
#   tests    the [gpu] cases of the fused step ([fused]: kernels against libtorch's ops, the fused loss
#            against the whole logits' in bf16, a bf16 model with model.fused on and off, the head's
#            memory), then the families' ([model]) and the memory estimate's ([memory])
#   alltests every [gpu] case this machine can run (ctest in tests/gpu; cases needing more GPUs skip)
#   bench    Qwen2-1.5B 8 x 512 bf16 gpu_adam without offload, and ZenFlow (examples/gpu/qwen2-1.5b-zenflow.toml)
#            on the same shape, each with model.fused = true and false, in turns; the no-offload step with
#            model.attention = flash beside auto's measured choice; then
#            tools/torch_eager_bench.py qwen2-1.5b --compile and eager (the peers) in the same call
#   7b       the Llama-2-7B shape with ZenFlow and activation checkpointing at 4 x 512 and 8 x 512
#            (fused; 4 x 512 also unfused); ZF_7B_CHECKPOINT_LAYERS adds an 8 x 512 row recomputing only
#            that many layers
#   profile  a per-op profile: ZF_PROFILE traces of two steps of zfcore (fused and unfused) and
#            torch.profiler's of the torch.compile peer, summed by kind by tools/profile_ops.py
#   summary  one table of every row written so far (summary.md), also printed
# Every result is a file under ZF_OUT (default /tmp/fused-bench): a directory per zfcore run
# (summary.json, steps.jsonl) beside its log, torch-*.json and its log, profile-*.json, rows.jsonl,
# profile.md, summary.md. No result passes through a pipe.
# usage: tools/device-fused.sh [build] [tests] [alltests] [bench] [7b] [profile] [summary]
#   (none: build tests bench 7b profile summary, in that order)
# environment: ZF_OUT, ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_BENCH_STEPS (timed steps, default 10)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/fused-bench}
steps=${ZF_BENCH_STEPS:-10}
zfcore="$build/bin/zfcore"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(build tests bench 7b profile summary)
status=0
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1 \
  || { echo "no GPU here" >&2; exit 1; }
cat "$out/gpu.txt"

qwen=examples/gpu/qwen2-1.5b-bench.toml
zenflow=examples/gpu/qwen2-1.5b-zenflow.toml
big=(--set model.preset=llama2-7b --set data.vocab=32000 --set model.activation_checkpointing=true)

# One zfcore run into $out/NAME (warm-up steps, then $steps timed), and its row in rows.jsonl.
row() {  # name config warmup extra-sets...
  local name=$1 config=$root/$2 warmup=$3
  shift 3
  rm -rf "${out:?}/$name"
  local params
  params=$("$zfcore" estimate "$config" "$@" 2>/dev/null | sed -n 's/^model: [^,]*, \([0-9]*\) parameters.*/\1/p')
  timeout 600 "$zfcore" run "$config" --set run.output_dir="$out/$name" --set run.timing_warmup="$warmup" \
    --set train.steps=$((steps + warmup)) --set run.progress=off "$@" >"$out/$name.log" 2>&1 \
    || { echo "$name failed:"; tail -15 "$out/$name.log"; status=1; return 1; }
  python3 - "$out" "$name" "$warmup" "${params:-0}" "$*" >>"$out/rows.jsonl" <<'PY'
import json, statistics, sys
out, name, warmup, params, sets = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
s = json.load(open(f"{out}/{name}/summary.json"))
gpu = s.get("gpu_memory_bytes", {})
rows = [json.loads(line) for line in open(f"{out}/{name}/steps.jsonl")][warmup:]
ms = [r["step_ms"] for r in rows]
timers = {k: round(statistics.mean(r["timers_ms"].get(k, 0) for r in rows), 2) for k in rows[-1]["timers_ms"]
          if not k.endswith("_microstep")}
print(json.dumps({"name": name, "sets": sets, "params": params, "step_ms": round(statistics.mean(ms), 2),
                  "median_ms": round(statistics.median(ms), 2), "slowest_ms": round(max(ms), 2),
                  "tokens_per_s": round(s["tokens_per_s"]), "mfu": round(6 * params * s["tokens_per_s"] / 989e12, 4),
                  "peak_gib": round(gpu.get("allocated_peak", 0) / 2**30, 2),
                  "reserved_gib": round(gpu.get("reserved_peak", 0) / 2**30, 2),
                  "allocated_at_gib": {k: round(v / 2**30, 2) for k, v in gpu.get("allocated_at", {}).items()},
                  "loss": [round(rows[0]["loss"], 4), round(rows[-1]["loss"], 4)], "mean_timers_ms": timers}))
PY
  tail -1 "$out/rows.jsonl"
}

# tools/torch_eager_bench.py into $out/torch-NAME.json (its JSON line) and its log.
peer() {  # name shape extra-args...
  local name=$1 shape=$2
  shift 2
  timeout 600 python3 "$root/tools/torch_eager_bench.py" "$shape" --batch 8 --seq 512 --warmup 3 --steps "$steps" "$@" \
    >"$out/torch-$name.json" 2>"$out/torch-$name.log" || { echo "torch $name failed:"; tail -5 "$out/torch-$name.log"; status=1; }
  cat "$out/torch-$name.json"
}

for part in "${parts[@]}"; do
  echo "== $part"
  case $part in
  build)
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$out/configure.log" 2>&1 \
      || { tail -30 "$out/configure.log"; exit 1; }
    cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins test_gpu >"$out/build.log" 2>&1 \
      || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
    echo "built"
    ;;
  tests)
    timeout 900 "$build/bin/test_gpu" "[fused]" >"$out/tests-fused.log" 2>&1 || status=1
    tail -4 "$out/tests-fused.log"
    timeout 900 "$build/bin/test_gpu" "[model]~[fused]" >"$out/tests-model.log" 2>&1 || status=1
    tail -4 "$out/tests-model.log"
    timeout 900 "$build/bin/test_gpu" "[memory]~[fused]" >"$out/tests-memory.log" 2>&1 || status=1
    tail -4 "$out/tests-memory.log"
    ;;
  alltests)
    (cd "$build/tests/gpu" && timeout 1500 ctest --output-on-failure --timeout 600) >"$out/tests-all.log" 2>&1 || status=1
    tail -15 "$out/tests-all.log"
    ;;
  bench)
    for turn in 1 2; do  # fused and unfused in turns, twice: the spread between runs shows
      row "qwen-fused-$turn" $qwen 3
      row "qwen-unfused-$turn" $qwen 3 --set model.fused=false
    done
    row qwen-attention-flash $qwen 3 --set model.attention=flash  # libtorch's first kernel, against auto's choice
    row qwen-zenflow-fused $zenflow 5
    row qwen-zenflow-unfused $zenflow 5 --set model.fused=false
    peer compile qwen2-1.5b --compile
    peer eager qwen2-1.5b
    ;;
  7b)
    row 7b-zenflow-4x512-fused $zenflow 5 "${big[@]}" --set train.micro_batch=4
    row 7b-zenflow-4x512-unfused $zenflow 5 "${big[@]}" --set train.micro_batch=4 --set model.fused=false
    row 7b-zenflow-8x512-fused $zenflow 5 "${big[@]}" --set train.micro_batch=8
    if [ -n "${ZF_7B_CHECKPOINT_LAYERS:-}" ]; then
      row "7b-zenflow-8x512-ckpt${ZF_7B_CHECKPOINT_LAYERS}" $zenflow 5 "${big[@]}" --set train.micro_batch=8 \
        --set model.checkpoint_layers="$ZF_7B_CHECKPOINT_LAYERS"
    fi
    ;;
  profile)
    for mode in fused unfused; do
      flag=true
      [ $mode = fused ] || flag=false
      rm -rf "${out:?}/profile-run-$mode"
      ZF_PROFILE="$out/profile-$mode.json:6:2" timeout 600 "$zfcore" run "$root/$qwen" \
        --set run.output_dir="$out/profile-run-$mode" --set train.steps=8 --set run.progress=off \
        --set model.fused=$flag >"$out/profile-run-$mode.log" 2>&1 \
        || { echo "profile $mode failed:"; tail -10 "$out/profile-run-$mode.log"; status=1; }
    done
    peer profile-compile qwen2-1.5b --compile --profile "$out/profile-torch-compile.json"
    python3 "$root/tools/profile_ops.py" "$out/profile-fused.json:2" "$out/profile-unfused.json:2" \
      "$out/profile-torch-compile.json:2" --markdown >"$out/profile.md" 2>"$out/profile.log" || status=1
    cat "$out/profile.md"
    ;;
  summary)
    python3 - "$out" >"$out/summary.md" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = {}
if os.path.exists(f"{out}/rows.jsonl"):
    for line in open(f"{out}/rows.jsonl"):
        r = json.loads(line)
        rows[r["name"]] = r  # the last run of a name
peers = {}
for path in glob.glob(f"{out}/torch-*.json"):
    text = open(path).read().strip().splitlines()
    if text and text[-1].startswith("{"):
        peers[os.path.basename(path)[6:-5]] = json.loads(text[-1])
print(open(f"{out}/gpu.txt").read().strip())
print()
print("| run | step ms (mean / median, slowest) | tokens/s | MFU 6ND | GPU peak | fwd / bwd / step ms |")
print("|---|---|---|---|---|---|")
for name, r in rows.items():
    t = r["mean_timers_ms"]
    print(f"| {name} | {r['step_ms']} / {r['median_ms']}, {r['slowest_ms']} | {r['tokens_per_s']} | "
          f"{100 * r['mfu']:.1f}% | {r['peak_gib']} GiB | {t.get('fwd', '-')} / {t.get('bwd', '-')} / {t.get('step', '-')} |")
for name, p in peers.items():
    print(f"| torch {name} ({p.get('system', '')}) | {p.get('step_ms')} | {p.get('tokens_per_s')} | | {p.get('peak_gib')} GiB | |")
print()
def mean(prefix):
    ms = [r["step_ms"] for n, r in rows.items() if n.startswith(prefix)]
    return sum(ms) / len(ms) if ms else None
fused, unfused, compiled = mean("qwen-fused-"), mean("qwen-unfused-"), peers.get("compile", {}).get("step_ms")
if fused and unfused:
    print(f"- Qwen2-1.5B no offload: fused {fused:.1f} ms, unfused {unfused:.1f} ms ({fused / unfused:.3f}x)")
if fused and compiled:
    print(f"- against torch.compile ({compiled} ms): {fused / compiled:.3f}x its step (target at most 0.85x)")
    peak = [r["peak_gib"] for n, r in rows.items() if n.startswith("qwen-fused-")]
    print(f"- GPU peak {max(peak)} GiB against torch.compile's {peers['compile'].get('peak_gib')} GiB")
flash = rows.get("qwen-attention-flash")
if fused and flash:
    print(f"- model.attention: auto {fused:.1f} ms (mean of the fused rows), flash {flash['step_ms']} ms")
zen = rows.get("qwen-zenflow-fused")
if zen and fused:
    print(f"- ZenFlow {zen['step_ms']} ms: {100 * fused / zen['step_ms']:.1f}% of the no-offload step (target at least 95%)")
for n in ("7b-zenflow-4x512-fused", "7b-zenflow-4x512-unfused", "7b-zenflow-8x512-fused"):
    if n in rows:
        print(f"- {n}: {rows[n]['step_ms']} ms, MFU {100 * rows[n]['mfu']:.1f}%, peak {rows[n]['peak_gib']} GiB")
PY
    cat "$out/summary.md"
    ;;
  *)
    echo "unknown part '$part' (build tests alltests bench 7b profile summary)" >&2
    exit 2
    ;;
  esac
done
exit $status
