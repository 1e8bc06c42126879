#!/bin/bash
# device-families.sh: on a machine with an NVIDIA GPU, in one go: build the CUDA configuration, run
# the families' GPU tests ([gpu][model]: every fixture's loss and gradients on the GPU, FlashAttention's
# sliding window against the masked attention), then time a 1-2B shape of each family at 8 x 512
# tokens in bf16 with gpu_adam beside Qwen2-1.5B's, ZenFlow beside no offload on the Qwen3-1.7B shape,
# and packed alpaca-like documents beside the tokens type at 8 x 2048 on that shape. Prints one table:
# step time, tokens/s, MFU at 6 x parameters x tokens (989 TFLOPS, the dense bf16 peak of an H100 /
# H200 SXM), GPU peak, the last step's timers; then the torch peers of the same shapes
# (tools/torch_eager_bench.py: transformers' model of each family under torch.compile, autocast bf16,
# fused AdamW) in the same call. The mixture of experts: the MoE layer's micro-benchmark (grouped
# GEMMs against a dense MLP of the same FLOPs), then the OLMoE-1B-7B shape with no offload,
# cpu_optimizer and ZenFlow; its MFU counts the active parameters (the top 8 of 64 experts). Qwen3.5's
# gated delta rule: its micro-benchmark (forward and forward + backward beside causal SDPA).
# usage: tools/device-families.sh [--no-tests]
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_SKIP_BUILD (set: use the build there as it is),
#              ZF_BENCH_STEPS (timed steps, default 10),
#              ZF_FAMILY_PRESETS (default "qwen2-1.5b llama3.2-1b qwen3-1.7b gemma3-1b"),
#              ZF_TORCH_PEERS (torch.compile peers, default "qwen2-1.5b llama3.2-1b qwen3-1.7b gemma3-1b"; "" for none)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
steps=${ZF_BENCH_STEPS:-10}
presets=${ZF_FAMILY_PRESETS:-qwen2-1.5b llama3.2-1b qwen3-1.7b gemma3-1b}
status=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
if [ -z "${ZF_SKIP_BUILD:-}" ]; then  # ZF_SKIP_BUILD=1: $build holds a build already
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log"; exit 1; }
  targets="zfcore-with-plugins"
  [ "${1:-}" = --no-tests ] || targets+=" test_gpu"
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$(nproc)" --target $targets 2>&1 | grep -E "error|FAILED" | head -30
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build failed" >&2; exit 1; }
fi
if [ "${1:-}" != --no-tests ]; then
  echo "== [gpu][model] tests"
  timeout 300 "$build/bin/test_gpu" "[model]" || status=1
  echo "== the MoE layer's forward + backward: grouped GEMMs against a dense MLP of the same FLOPs"
  timeout 300 "$build/bin/test_gpu" "[.moe-bench]" -s | grep '^moe-bench' || status=1
  echo "== Qwen3.5's gated delta rule: forward and forward + backward beside causal SDPA"
  timeout 300 "$build/bin/test_gpu" "[.gdn-bench]" -s | grep '^gdn-bench' || status=1
fi

row() {  # name config warm-up extra-sets...: one zfcore run; prints a table row
  local name=$1 config=$root/$2 warmup=$3 out="$build/families-${1// /-}"
  shift 3
  rm -rf "$out"
  local params estimate active
  estimate=$("$build/bin/zfcore" estimate "$config" "$@" 2>/dev/null)
  params=$(sed -n 's/^model: [^,]*, \([0-9]*\) parameters.*/\1/p' <<<"$estimate")
  # A mixture of experts: the MFU counts the parameters a token computes with.
  active=$(sed -n 's/^model: .*, \([0-9]*\) active per token.*/\1/p' <<<"$estimate")
  timeout 400 "$build/bin/zfcore" run "$config" --set run.output_dir="$out" --set run.timing_warmup="$warmup" \
    --set train.steps=$((steps + warmup)) "$@" >"$out.log" 2>&1 || { echo "$name failed:"; tail -15 "$out.log"; status=1; return; }
  python3 - "$out/summary.json" "$name" "$params" "${active:-$params}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
params, tokens_per_s = int(sys.argv[3] or 0), s["tokens_per_s"]
mfu = 6 * int(sys.argv[4] or 0) * tokens_per_s / 989e12
peak = s.get("gpu_memory_bytes", {}).get("allocated_peak", 0) / 2**30
timers = {k: round(v, 1) for k, v in s.get("mean_timers_ms", {}).items() if not k.endswith("_microstep")}
print(f"| {sys.argv[2]:<24} | {params / 1e9:5.2f}B | {s['mean_step_ms']:8.1f} | {tokens_per_s:9.0f} | {100 * mfu:5.1f}% | {peak:5.1f} GiB | {s['final_loss']:.3f} | {timers} |")
PY
}

echo "== families at 8 x 512, bf16, gpu_adam, no offload (then ZenFlow on qwen3-1.7b); $steps timed steps"
echo "| run | params | step ms | tokens/s | MFU 6ND (N active) | GPU peak | loss | mean timers (ms) |"
echo "|---|---|---|---|---|---|---|---|"
bench=examples/gpu/qwen2-1.5b-bench.toml
for preset in $presets; do
  row "$preset" $bench 3 --set model.preset="$preset" --set data.vocab=32000
done
# ZenFlow (examples/gpu/qwen2-1.5b-zenflow.toml: topk 0.1, every 4 steps, staggered, overlapped) on Qwen3-1.7B,
# between two runs of its no-offload twin.
row "qwen3-1.7b" $bench 5 --set model.preset=qwen3-1.7b --set data.vocab=32000 --set train.steps=$((2 * steps + 5))
row "qwen3-1.7b zenflow" examples/gpu/qwen2-1.5b-zenflow.toml 5 --set model.preset=qwen3-1.7b --set data.vocab=32000 \
  --set train.steps=$((2 * steps + 5))
# Packing (data.packing): alpaca-like documents packed into 8 x 2048 (FlashAttention's variable-length
# kernel, positions restarting per document) beside the `tokens` type at the same tokens per step; the
# packed row's step time should be within 5% of the tokens row's. Activation checkpointing keeps both
# inside one GPU's memory.
packing_data="$build/packing-data"
python3 "$root/tools/make_packing_bench_data.py" "$packing_data" $(((steps + 3) * 8 * 2049 + 1)) >/dev/null || status=1
echo "== qwen3-1.7b at 8 x 2048: the tokens type, then packed alpaca-like documents (the log's share of filled positions)"
packing_common=(--set model.preset=qwen3-1.7b --set data.vocab=32000 --set data.seq_len=2048 --set train.micro_batch=8
                --set model.activation_checkpointing=true)
row "qwen3-1.7b tokens 8x2048" $bench 3 "${packing_common[@]}" --set data.type=tokens --set data.path="$packing_data/tokens.bin"
row "qwen3-1.7b packed 8x2048" $bench 3 "${packing_common[@]}" --set data.type=alpaca --set data.tokenizer=byte \
  --set data.path="$packing_data/alpaca.json" --set data.packing=true
grep -h "packed into" "$build/families-qwen3-1.7b-packed-8x2048.log" 2>/dev/null | head -1
echo "== OLMoE-1B-7B shape (6.92B parameters, 1.28B active): no offload (if it fits), cpu_optimizer, ZenFlow"
olmoe=(--set model.preset=olmoe-1b-7b --set data.vocab=50304)
row "olmoe-1b-7b" $bench 3 "${olmoe[@]}"
row "olmoe-1b-7b cpu_optimizer" $bench 3 "${olmoe[@]}" --set optimizer.plugin=cpu_adam --set offload.plugin=cpu_optimizer
row "olmoe-1b-7b zenflow" examples/gpu/qwen2-1.5b-zenflow.toml 5 "${olmoe[@]}" --set train.steps=$((2 * steps + 5))
echo "== torch peers: transformers' model of each shape under torch.compile (qwen2-1.5b: this repository's own model)"
for shape in ${ZF_TORCH_PEERS-qwen2-1.5b llama3.2-1b qwen3-1.7b gemma3-1b}; do
  timeout 300 python3 "$root/tools/torch_eager_bench.py" "$shape" --batch 8 --seq 512 --warmup 3 --steps "$steps" \
    --compile 2>"$build/torch-$shape.log" | grep '^{' || { echo "torch $shape failed:"; tail -5 "$build/torch-$shape.log"; }
done
exit $status
