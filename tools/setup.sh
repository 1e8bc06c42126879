#!/usr/bin/env bash
# Sets up and builds zfcore on Debian or Ubuntu: installs the missing Debian packages, libtorch from
# PyPI (torch==2.11.0), configures with CMake into build/ and builds zfcore and its plugins, what a
# run needs.
#   tools/setup.sh            # then: build/bin/zfcore run examples/quickstart.toml
#   tools/setup.sh --tests    # also the tests' own dependencies (Chromium, transformers, TRL, tensorboard,
#                             # iproute2, procps) and every test; then: ctest --test-dir build -j 2
# Environment: ZF_CUDA=ON|OFF (default: ON when nvidia-smi sees a GPU), BUILD_DIR (default build),
# PYTHON (default python3), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: tools/setup.sh [--tests]" >&2; exit 2 ;;
esac

# catch2 is a few headers: installed for both, so that both configure the same build tree (the tests'
# CMake needs it) and --tests after a plain setup only adds targets.
packages=(cmake ninja-build g++ pkg-config python3 python3-venv libboost-dev libtomlplusplus-dev
          libopenmpi-dev openmpi-bin liburing-dev catch2 nlohmann-json3-dev libsentencepiece-dev
          libprotobuf-dev protobuf-compiler)  # protobuf: TensorBoard's event files
if ((tests)); then
  packages+=(procps chromium iproute2)  # procps: pgrep in the tests; chromium: the report tests load the
                                        # HTML reports in it, headless; iproute2: the two-host test's
                                        # network namespaces
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cuda=${ZF_CUDA:-}
if [ -z "$cuda" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then cuda=ON; else cuda=OFF; fi
fi

# libtorch: the torch wheel, in the current Python if it can take it, else in .venv. Without CUDA the
# CPU-only wheel of PyTorch's own index (about 0.2 GB instead of PyPI's 4 GB with the CUDA libraries)
# where that index answers, else PyPI's; both are torch 2.11.0 ("2.11.0+cpu" for the first).
python=${PYTHON:-python3}
torch_version() { "$1" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true; }
if [ "$(torch_version "$python")" != "2.11.0" ] && [ "$(torch_version .venv/bin/python3)" = "2.11.0" ]; then
  python=.venv/bin/python3
fi
cpu_index=https://download.pytorch.org/whl/cpu
install_torch() {
  if [ "$cuda" = OFF ] && "$1" -c "import urllib.request as u; u.urlopen('$cpu_index/torch/', timeout=5)" 2>/dev/null; then
    echo "setup: installing torch==2.11.0 (CPU only) from $cpu_index (libtorch for the C++ build)"
    "$1" -m pip install -q torch==2.11.0 --index-url "$cpu_index" && return 0
  fi
  echo "setup: installing torch==2.11.0 from PyPI (libtorch for the C++ build)"
  "$1" -m pip install -q torch==2.11.0
}
if [ "$(torch_version "$python")" != "2.11.0" ]; then
  if ! install_torch "$python"; then
    echo "setup: this Python does not take packages; using a virtual environment in .venv"
    "$python" -m venv .venv
    python=.venv/bin/python3
    install_torch "$python"
  fi
fi
# The tests' Python packages, in the same Python: transformers (the export tests load zfcore's exports
# with it, as users do; chat data is prepared with it), TRL (the chat data's ids and loss masks are
# checked against its SFTTrainer's, with Parquet read through its pyarrow) and tensorboard (a test
# reads a run's event files back with it).
if ((tests)); then
  python_needs=()
  for requirement in transformers==5.23.0 trl==1.16.0 tensorboard==2.21.0; do
    installed=$("$python" -c "import importlib.metadata as m; print(m.version('${requirement%%==*}'))" 2>/dev/null || true)
    [ "$installed" = "${requirement##*==}" ] || python_needs+=("$requirement")
  done
  if ((${#python_needs[@]})); then
    echo "setup: installing ${python_needs[*]} from PyPI (for the tests)"
    "$python" -m pip install -q "${python_needs[@]}"
  fi
fi
torch_dir=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')

build=${BUILD_DIR:-build}
# Optimized as RelWithDebInfo (-O2) but without debug information: -g makes every core source about
# a quarter slower to compile. A debug build: cmake -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo (or Debug)
# and cmake --build build (README.md, "Building").
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DZF_CUDA="$cuda" -DZF_TORCH_DIR="$torch_dir" \
  -DZF_PYTHON="$("$python" -c 'import sys; print(sys.executable)')"
if ((tests)); then
  cmake --build "$build" -j "${JOBS:-$(nproc)}"
  echo "setup: built $build/bin/zfcore, its plugins and the tests (CUDA path $cuda)"
else
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target zfcore-with-plugins
  echo "setup: built $build/bin/zfcore and its plugins (CUDA path $cuda); tools/setup.sh --tests adds the tests"
fi
