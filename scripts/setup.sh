#!/usr/bin/env bash
# Does all set-up on a fresh Debian machine, then builds lazytrain into build/.
#   scripts/setup.sh          system packages + build
#   scripts/setup.sh --test   also the Python venv (.venv) the reference tests use, exactly
#                             as pinned in scripts/requirements/test.txt
#   scripts/setup.sh --bench  also the benchmark peers (deepspeed, torchao) in .venv, as
#                             pinned in scripts/requirements/bench.txt
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
  liburing-dev libpcre2-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev python3-venv
  libopenmpi-dev openmpi-bin)
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

# The Python environment is exactly a lock of scripts/requirements/ (test.txt, or bench.txt
# with the benchmark peers): an existing .venv that differs (other versions, a package the
# locks do not pin) is brought to the lock, and made anew if that does not make it match.
if [ $want_python -eq 1 ]; then
  req=scripts/requirements
  lock=$req/test.txt
  [ $want_bench -eq 1 ] && lock=$req/bench.txt
  venv_matches() { .venv/bin/python scripts/venv_check.py "$lock" --allow $req/bench.txt "$@"; }
  install_lock() {
    .venv/bin/pip install -q --disable-pip-version-check -r $req/pip.txt &&
      .venv/bin/pip install -q --disable-pip-version-check -r "$lock" || return 1
    # Extras: what the locks do not pin at its installed version.
    local extras
    extras=$(venv_matches | sed -n 's/^venv_check: \([^:]*\): .* pinned nowhere$/\1/p' || true)
    if [ -n "$extras" ]; then
      echo "setup: removing from .venv what $lock does not pin: $(echo $extras)"
      # shellcheck disable=SC2086
      .venv/bin/pip uninstall -q -y $extras
    fi
  }
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "" 2>/dev/null; then
    echo "setup: creating .venv from $lock (PyPI)"
    rm -rf .venv
    python3 -m venv .venv
    install_lock
  elif ! venv_matches >/dev/null; then
    echo "setup: .venv does not match $lock:"
    venv_matches | sed 's/^/  /' || true
    install_lock || true
    if ! venv_matches >/dev/null; then
      echo "setup: still no match; making .venv anew"
      rm -rf .venv
      python3 -m venv .venv
      install_lock
    fi
  fi
  if ! report=$(venv_matches --print); then
    echo "$report"
    echo "setup: .venv does not match $lock after installing it" >&2
    exit 1
  fi
  echo "setup: .venv matches $lock: $(head -1 <<<"$report")"
fi

if [ $want_build -eq 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
fi
