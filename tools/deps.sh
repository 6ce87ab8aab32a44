#!/usr/bin/env bash
# Installs what cldl needs from Debian's packages when something is missing. Idempotent; sourced by
# tools/quickstart and tools/test. Set CLDL_SKIP_INSTALL=1 to never call apt-get.
set -euo pipefail

CLDL_PACKAGES=(
  build-essential cmake pkg-config
  ocl-icd-opencl-dev opencl-clhpp-headers opencl-c-headers clinfo pocl-opencl-icd
  libclblast-dev libclfft-dev
  doctest-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-venv
  clang-14 libclang-rt-14-dev
)

# Only for retraining the model zoo (models/zoo/*/train.py); neither the build nor the tests need them.
CLDL_ZOO_TRAIN_PACKAGES=(python3-torch python3-sklearn python3-numpy bible-kjv bible-kjv-text)

cldl_missing_packages() {
  local missing=()
  for p in "${CLDL_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  echo "${missing[@]:-}"
}

cldl_install_deps() {
  [ "${CLDL_SKIP_INSTALL:-0}" = 1 ] && return 0
  local missing
  missing=$(cldl_missing_packages)
  [ -z "$missing" ] && return 0
  echo "cldl: installing missing packages: $missing"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  # shellcheck disable=SC2086
  $sudo apt-get install -y -q --no-install-recommends $missing
}

cldl_build() {
  local root build_dir jobs
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build_dir=${CLDL_BUILD_DIR:-$root/build}
  jobs=${CLDL_JOBS:-$(nproc)}
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=${CLDL_BUILD_TYPE:-Release} >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

# Installs CLDL_ZOO_TRAIN_PACKAGES when missing (for models/zoo/*/train.py; quickstart and test do not call it).
cldl_install_zoo_train_deps() {
  local CLDL_PACKAGES=("${CLDL_ZOO_TRAIN_PACKAGES[@]}")
  cldl_install_deps
}
