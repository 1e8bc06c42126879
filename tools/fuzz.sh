#!/usr/bin/env bash
# Coverage-guided fuzzing of the core's parsers of user input (the targets in tests/fuzz: the TOML
# config, the DeepSpeed JSON config, Hugging Face config.json and tokenizer.json, safetensors
# headers, checkpoint metadata).
#
#   tools/fuzz.sh                          # every target, 60 s each
#   tools/fuzz.sh 300 hf_tokenizer         # one target, 5 minutes
#   tools/fuzz.sh --merge 60               # the same, then add what grew coverage to the repo corpus
#
# Builds the targets with clang, libFuzzer, AddressSanitizer and UBSan into BUILD_DIR (CMake with
# -DZF_FUZZ=ON). That build holds only the torch-free parser library (zfcore_parsers: no libtorch,
# MPI or plugins), so everything in it is instrumented and nothing needs ASan-built dependencies.
# Each target fuzzes for SECONDS a copy of its corpus, BUILD_DIR/corpus/TARGET (kept between runs;
# tests/fuzz/corpus/TARGET is only read, unless --merge is given). A failing input (crash,
# sanitizer report, leak, hang over 5 s, more than 2 GB of memory) is saved as
# BUILD_DIR/findings/TARGET/{crash,leak,timeout,oom}-*, and fuzzing goes on for the rest of the
# time. Prints per target the executions, the new corpus entries, the crashes and the timeouts;
# exits 1 when any target failed. To fix a finding: replay it with the normal build's
# build/bin/fuzz_TARGET FILE (or BUILD_DIR/bin/fuzz_TARGET FILE), fix the parser, and add the
# input to tests/fuzz/corpus/TARGET as reliability_WHAT.EXT: ctest replays that corpus
# (`ctest -L fuzz`) and expects reliability_* files to be rejected with a clear error.
#
# Needs clang with its libFuzzer runtime (Debian/Ubuntu: apt-get install clang, plus
# libclang-rt-dev on newer releases; or clang-14), CMake, Ninja, TOML++ and nlohmann-json
# (tools/setup.sh installs those). Environment: CXX and CC (default clang++-14/clang-14 when
# installed, else clang++/clang), BUILD_DIR (default build-libfuzzer), JOBS (build jobs,
# default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(config_toml deepspeed_json hf_config safetensors_header checkpoint_metadata hf_tokenizer)
usage="usage: tools/fuzz.sh [--merge] [SECONDS] [TARGET...]  (targets: ${all_targets[*]})"
merge=0
if [ "${1:-}" = "--merge" ]; then merge=1; shift; fi
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "$usage" >&2; exit 2; }
[ "$#" -eq 0 ] || shift
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=("${all_targets[@]}")
build=${BUILD_DIR:-build-libfuzzer}

# The largest input the fuzzer makes, per target: above the largest real file of the kind that
# matters (configs are a few KB; the tokenizer fixtures 35 KB; safetensors headers and a few
# tensors), small enough to keep thousands of executions a second.
declare -A max_len=([config_toml]=8192 [deepspeed_json]=4096 [hf_config]=4096 [safetensors_header]=16384
                    [checkpoint_metadata]=4096 [hf_tokenizer]=65536)
for target in "${targets[@]}"; do
  [ -n "${max_len[$target]:-}" ] || { echo "fuzz.sh: no target $target"$'\n'"$usage" >&2; exit 2; }
done

default_cxx=clang++ default_cc=clang
command -v clang++-14 >/dev/null 2>&1 && default_cxx=clang++-14 default_cc=clang-14
cxx=${CXX:-$default_cxx} cc=${CC:-$default_cc}
if ! command -v "$cxx" >/dev/null 2>&1 ||
   ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char *, unsigned long) { return 0; }' |
     "$cxx" -fsanitize=fuzzer,address,undefined -x c++ - -o /dev/null >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx cannot build a libFuzzer target. Install clang with its runtime:" >&2
  echo "  apt-get install clang libclang-rt-dev    (or: apt-get install clang-14)" >&2
  echo "or name another clang with CXX=... CC=..." >&2
  exit 2
fi

cmake -S . -B "$build" -G Ninja -DZF_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"

# The number after "NAME:" in libFuzzer's final stats in file $2, summed over its runs.
stat_sum() { grep -o "stat::$1: *[0-9]*" "$2" | grep -o '[0-9]*$' | awk '{ n += $1 } END { print n + 0 }'; }

summary=()
failed=0
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target" findings="$build/findings/$target" log="$build/fuzz-$target.log"
  mkdir -p "$corpus" "$findings"
  cp -n tests/fuzz/corpus/"$target"/* "$corpus"/
  before=$(ls "$corpus" | wc -l)
  : >"$log"
  echo "fuzz.sh: $target for ${seconds}s (log: $log)"
  # libFuzzer stops at the first failing input: start it again for the time left, up to 10 times.
  crashes=0 timeouts=0 end=$((SECONDS + seconds))
  for ((attempt = 0; attempt < 10 && SECONDS < end; attempt++)); do
    status=0
    # -timeout: one input parsing for 5 s is a hang; -rss_limit_mb: 2 GB of memory is a finding too.
    "$build/bin/fuzz_$target" -max_total_time=$((end - SECONDS)) -max_len="${max_len[$target]}" -timeout=5 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" >>"$log" 2>&1 || status=$?
    [ "$status" -ne 0 ] || break
    failed=1
    artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //' || true)
    case "$(basename "${artifact:-none}")" in
      timeout-*) timeouts=$((timeouts + 1)) ;;
      *) crashes=$((crashes + 1)) ;;
    esac
    echo "  FAILED (exit $status): ${artifact:-no input saved, see $log}"
    grep -a -E "fuzz target: FAILED|ERROR: (AddressSanitizer|LeakSanitizer)|ERROR: libFuzzer: [^d]|runtime error" \
      "$log" | tail -1 | cut -c1-300 || true
    [ -n "$artifact" ] || break
  done
  added=$(($(ls "$corpus" | wc -l) - before))
  if ((merge)); then
    "$build/bin/fuzz_$target" -merge=1 -max_len="${max_len[$target]}" -timeout=5 -rss_limit_mb=2048 \
      "tests/fuzz/corpus/$target" "$corpus" >>"$log" 2>&1
  fi
  summary+=("$(printf '%-20s %12s execs %6s new corpus entries %4s crashes %4s timeouts' "$target" \
    "$(stat_sum number_of_executed_units "$log")" "$added" "$crashes" "$timeouts")")
done

echo
echo "fuzz.sh: ${seconds}s per target; findings in $build/findings"
printf '%s\n' "${summary[@]}"
exit "$failed"
