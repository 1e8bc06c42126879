#!/bin/bash
# device-reshard.sh: issue 46's target on a machine with 4 GPUs (and the [gpu] 2 <-> 1 GPU cases):
# the Qwen2-1.5B shape written on 4 GPUs under zero2 + ZenFlow (cpu_optimizer) resumes on 2 GPUs
# under zero3 + cpu_optimizer and trains on; its load's bandwidth (the bytes all ranks read over the
# time the slowest rank took, both from the run's "bytes of tensor data read ... in S s" line; and
# over the whole "resume" phase, which also checks that the weights are finite and copies them to
# the GPUs) beside zfcore bench disk's read bandwidth of the same directory, measured in the same
# call. The page cache is dropped before the resume and before the bench (root needed; without it
# the figure is the page cache's).
#   tests   the [gpu] checkpoint cases (test_gpu "[checkpoint]": 2 -> 1 and 1 -> 2 GPUs, and a ZenFlow
#           checkpoint of 2 GPUs that owes CPU updates continued on 1 GPU against its own-layout resume)
#   load    the 4 -> 2 GPU resume and the bandwidth figures
# usage: tools/device-reshard.sh PART...    environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda),
#        ZF_OUT (default /tmp/zfcore-reshard: the checkpoints, about 18 GB for 1.5B parameters)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
out=${ZF_OUT:-/tmp/zfcore-reshard}
[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
if [ ! -x "$build/bin/test_gpu" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >/dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" --target zfcore-with-plugins test_gpu 2>&1 | grep -E "error|FAILED" | head -20
fi
zfcore="$build/bin/zfcore"
model="$root/examples/gpu/qwen2-1.5b-bench.toml"
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped: not root)"; }
status=0
for part in "$@"; do
  case $part in
    tests)
      "$build/bin/test_gpu" "[checkpoint]" || status=1 ;;
    load)
      mkdir -p "$out"
      # 4 x 8 x 512 tokens a step on 4 GPUs; on 2 GPUs grad_accum 2 keeps the global batch.
      common=(--set train.micro_batch=8 --set checkpoint.resume_batch=keep --set checkpoint.final=true
              --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam --set offload.pin_memory=true)
      zenflow=(--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=4 --set zenflow.overlap_step=true)
      mpirun --allow-run-as-root --bind-to none -np 4 "$zfcore" run "$model" "${common[@]}" "${zenflow[@]}" \
        --set stage.plugin=zero2 --set train.steps=6 --set run.output_dir="$out/written" >"$out/written.log" 2>&1 ||
        { echo "the 4-GPU run failed:"; tail -20 "$out/written.log"; exit 1; }
      drop_caches
      "$zfcore" bench disk "$out" --size-gb 8 --json "$out/disk.json" | tee "$out/disk.log"
      drop_caches
      mpirun --allow-run-as-root --bind-to none -np 2 "$zfcore" run "$model" "${common[@]}" \
        --set stage.plugin=zero3 --set train.steps=10 --set checkpoint.resume="$out/written/checkpoints/step-00000006" \
        --set run.output_dir="$out/resumed" >"$out/resumed.log" 2>&1 ||
        { echo "the 2-GPU resume failed:"; tail -20 "$out/resumed.log"; status=1; }
      grep -E "continues it on|ready to train|trained" "$out/resumed.log"
      # The load itself (every rank's reads, until the slowest is done) from its own line, and the
      # whole resume phase (the load, the check that the weights are finite, the copy to the GPUs).
      line=$(grep -o '([0-9]* bytes of tensor data read[^)]*)' "$out/resumed.log" | head -1)
      bytes=$(echo "$line" | grep -o '^([0-9]*' | grep -o '[0-9]*')
      load_seconds=$(echo "$line" | grep -o 'in [0-9.]* s' | grep -o '[0-9.]*')
      seconds=$(grep -o 'resume [0-9.]* s' "$out/resumed.log" | grep -o '[0-9.]*' | head -1)
      read_gbs=$(grep -o '"read_gbps":[0-9.]*' "$out/disk.json" | grep -o '[0-9.]*$')
      python3 - "$bytes" "$load_seconds" "$seconds" "$read_gbs" <<'EOF'
import sys
b, load_s, phase_s, disk = (float(x) if x else 0.0 for x in sys.argv[1:5])
def rate(s): return b / s / 1e9 if s > 0 else float("nan")
if disk <= 0:
    print(f"load {rate(load_s):.2f} GB/s; no disk figure")
else:
    print(f"load: {b / 1e9:.2f} GB in {load_s:.2f} s = {rate(load_s):.2f} GB/s, {100 * rate(load_s) / disk:.0f}% of "
          f"bench disk's read {disk:.2f} GB/s (target >= 80%); the whole resume phase {phase_s:.2f} s = "
          f"{rate(phase_s):.2f} GB/s, {100 * rate(phase_s) / disk:.0f}%")
EOF
      ;;
    *) echo "device-reshard.sh: unknown part '$part' (tests, load)"; status=2 ;;
  esac
done
exit $status
