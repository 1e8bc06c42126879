#!/usr/bin/env bash
# Sets up and builds zfcore on Debian or Ubuntu: installs the missing Debian packages (chromium
# included: a test loads the benchmark report in it, headless), libtorch
# from PyPI (torch==2.11.0) and transformers (for the test that loads an export with it),
# configures with CMake and builds into build/.
#   tools/setup.sh            # then: build/bin/zfcore run examples/quickstart.toml
# Environment: ZF_CUDA=ON|OFF (default: ON when nvidia-smi sees a GPU), BUILD_DIR (default build),
# PYTHON (default python3), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config python3 python3-venv libboost-dev libtomlplusplus-dev
          libopenmpi-dev openmpi-bin liburing-dev catch2 nlohmann-json3-dev libsentencepiece-dev
          procps chromium iproute2)  # procps: pgrep in the tests; chromium: the bench report's test loads it
                                     # headless; iproute2: the two-host test's network namespaces
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

# libtorch: the torch wheel from PyPI, in the current Python if it can take it, else in .venv.
python=${PYTHON:-python3}
torch_version() { "$1" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true; }
if [ "$(torch_version "$python")" != "2.11.0" ] && [ "$(torch_version .venv/bin/python3)" = "2.11.0" ]; then
  python=.venv/bin/python3
fi
if [ "$(torch_version "$python")" != "2.11.0" ]; then
  echo "setup: installing torch==2.11.0 from PyPI (libtorch for the C++ build)"
  if ! "$python" -m pip install -q torch==2.11.0; then
    echo "setup: this Python does not take packages; using a virtual environment in .venv"
    "$python" -m venv .venv
    python=.venv/bin/python3
    "$python" -m pip install -q torch==2.11.0
  fi
fi
# transformers: the export test loads a fine-tuned model with it, as users do.
if [ "$("$python" -c 'import importlib.metadata as m; print(m.version("transformers"))' 2>/dev/null)" != "5.23.0" ]; then
  echo "setup: installing transformers==5.23.0 from PyPI (the export test loads exports with it)"
  "$python" -m pip install -q transformers==5.23.0
fi
torch_dir=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')

cuda=${ZF_CUDA:-}
if [ -z "$cuda" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then cuda=ON; else cuda=OFF; fi
fi
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZF_CUDA="$cuda" -DZF_TORCH_DIR="$torch_dir" \
  -DZF_PYTHON="$("$python" -c 'import sys; print(sys.executable)')"
cmake --build "$build" -j "${JOBS:-$(nproc)}"
echo "setup: built $build/bin/zfcore (CUDA path $cuda)"
