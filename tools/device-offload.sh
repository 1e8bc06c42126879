#!/bin/bash
# device-offload.sh: on a GPU machine, in one go: build the CUDA configuration, run the GPU tests
# of offload (and optionally all GPU tests), then tools/offload_bench.py on the Qwen2-1.5B shape
# (and the configs given in ZF_OFFLOAD_CONFIGS) beside zfcore's own no-offload step.
# usage: tools/device-offload.sh [--all-tests] [--no-tests]
# environment: ZF_BUILD_DIR (default /tmp/zfcore-build-cuda), ZF_BENCH_STEPS (default 10),
#              ZF_OFFLOAD_CONFIGS (default examples/gpu/qwen2-1.5b-bench.toml)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZF_BUILD_DIR:-/tmp/zfcore-build-cuda}
tests="offload"
for arg in "$@"; do
  case $arg in
    --all-tests) tests="all" ;;
    --no-tests) tests="" ;;
    *) echo "usage: $0 [--all-tests] [--no-tests]" >&2; exit 2 ;;
  esac
done
status=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU here" >&2; exit 1; }
echo "== build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA=ON >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
targets="zfcore"
[ -n "$tests" ] && targets="$targets test_gpu"
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets 2>&1 | grep -E "error|FAILED" | head -40
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build failed" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -E "error|FAILED" | head -20  # every plugin
if [ "$tests" = offload ]; then
  (cd "$build/tests/gpu" && timeout 300 ctest --output-on-failure --timeout 240 -R "cpu_optimizer") || status=1
elif [ "$tests" = all ]; then
  (cd "$build/tests/gpu" && timeout 400 ctest --output-on-failure --timeout 240) || status=1
fi
for config in ${ZF_OFFLOAD_CONFIGS:-examples/gpu/qwen2-1.5b-bench.toml}; do
  echo "== offload beside no offload: $config"
  python3 "$root/tools/offload_bench.py" "$build" --config "$root/$config" --steps "${ZF_BENCH_STEPS:-10}" || status=1
done
exit $status
