#!/usr/bin/env bash
# Does all set-up on a fresh Debian machine, then builds lazytrain into build/.
#   scripts/setup.sh          system packages + build
#   scripts/setup.sh --test   also the Python venv (.venv) the reference tests use
#   scripts/setup.sh --bench  also the benchmark peers (deepspeed, torchao) in .venv
#   scripts/setup.sh --fuzz   also clang, libFuzzer and clang's OpenMP runtime, for the
#                             sanitizer build and scripts/fuzz.sh (build-san/)
#   --deps-only               install only; skip the build of build/
# Safe to rerun: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

want_python=0
want_bench=0
want_fuzz=0
want_build=1
for arg in "$@"; do
  case "$arg" in
    --test) want_python=1 ;;
    --bench) want_python=1; want_bench=1 ;;
    --fuzz) want_fuzz=1 ;;
    --deps-only) want_build=0 ;;
    *) echo "setup.sh: unknown option $arg (use --test, --bench, --fuzz or --deps-only)" >&2; exit 2 ;;
  esac
done

apt_packages=(build-essential cmake pkg-config git
  libdnnl-dev coinor-libcbc-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  liburing-dev libpcre2-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev python3-venv)
# clang 14 (Debian 12), its sanitizer and libFuzzer runtimes, and libomp for -fopenmp.
if [ $want_fuzz -eq 1 ]; then apt_packages+=(clang libclang-rt-14-dev libomp-dev); fi
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ $want_python -eq 1 ]; then
  if ! .venv/bin/python -c "import torch, transformers, safetensors, tokenizers" 2>/dev/null; then
    echo "setup: creating .venv with torch, transformers, safetensors, tokenizers (PyPI)"
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q torch transformers safetensors tokenizers numpy
  fi
fi
if [ $want_bench -eq 1 ]; then
  .venv/bin/python -c "import deepspeed, torchao" 2>/dev/null ||
    .venv/bin/pip install -q deepspeed torchao psutil ninja ||
    echo "setup: warning: could not install the benchmark peers deepspeed/torchao" >&2
fi

if [ $want_build -eq 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
fi
