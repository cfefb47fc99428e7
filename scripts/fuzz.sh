#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a while and prints what each did.
#   scripts/fuzz.sh [seconds] [target ...]    default: 60 seconds each, every target
# Builds the sanitized fuzz build (build-san/, clang, ASan + UBSan + libFuzzer) first if
# needed; the clang packages come from `scripts/setup.sh --fuzz --deps-only`, which this
# script runs when clang or libFuzzer is missing.
#
# Each target starts from its committed seeds (fuzz/corpus/<target>/, never written to)
# plus what earlier runs found (build-san/fuzz-runs/<target>/corpus/), with the JSON
# dictionary and its own one (fuzz/dict/). Limits, the same for every target:
#   -timeout=10        one input running 10 s is a hang (the parsers take microseconds to
#                      milliseconds; the slowest, tokenizer.json, ~10 ms at 16 KB)
#   -rss_limit_mb=2048 a process above 2 GB is a finding (an input that makes a parser
#                      allocate without bound); malloc_limit_mb is the same
#   -max_len           per target, below: a few times the largest real-shaped seed
# A finding is any crash (ASan, UBSan, LT_ASSERT, an exception other than lt::Error), leak,
# timeout or out-of-memory: its input is saved as build-san/fuzz-runs/<target>/artifacts/
# {crash,leak,timeout,oom}-<sha1>. Replay one with build-san/fuzz/<target> <file>.
# Exit status: 0 when no target found anything, 1 otherwise (2: bad usage or build).
#
# Environment: LT_FUZZ_BUILD (default build-san), LT_FUZZ_JOBS (build parallelism,
# default nproc), LT_FUZZ_NICE (nice level of the fuzzers, default 0), LT_FUZZ_NO_BUILD=1
# (run the targets as built, e.g. two instances side by side on disjoint targets).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: seconds must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
build=${LT_FUZZ_BUILD:-build-san}
jobs=${LT_FUZZ_JOBS:-$(nproc)}

declare -A max_len=(
  [safetensors_header_fuzz]=8192
  [safetensors_index_fuzz]=4096
  [model_config_fuzz]=4096
  [tokenizer_fuzz]=16384
  [jsonl_dataset_fuzz]=4096
  [plan_json_fuzz]=16384
  [train_config_yaml_fuzz]=4096
  [adamw_state_fuzz]=2048
  [trainer_state_fuzz]=1024
)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

# Toolchain: clang with libFuzzer (libclang-rt) and the OpenMP runtime clang links.
have_fuzz_toolchain() {
  command -v clang++ >/dev/null 2>&1 || return 1
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1
}
if ! have_fuzz_toolchain; then
  echo "fuzz.sh: clang or libFuzzer missing; installing them (scripts/setup.sh --fuzz --deps-only)"
  bash scripts/setup.sh --fuzz --deps-only
  have_fuzz_toolchain || { echo "fuzz.sh: clang++ cannot link -fsanitize=fuzzer" >&2; exit 2; }
fi

if ! grep -q '^LT_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLT_SANITIZE=ON -DLT_FUZZ=ON -DLT_CUDA=OFF >/dev/null
fi
t0=$(date +%s)
if [ "${LT_FUZZ_NO_BUILD:-0}" != 1 ]; then
  cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
    { tail -40 "$build/fuzz-build.log"; echo "fuzz.sh: build failed (log: $build/fuzz-build.log)" >&2; exit 2; }
fi
echo "fuzz.sh: built ${#targets[@]} targets in $(($(date +%s) - t0)) s; running each for $seconds s"

# The sanitizers' settings: leaks are findings (detect_leaks=1); the one
# suppression file (tests/sanitizers/lsan.supp) names what it excuses and why.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export OMP_NUM_THREADS=1

status=0
summary=()
for t in "${targets[@]}"; do
  bin="$build/fuzz/$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no target $t (fuzz/$t.cpp)" >&2; exit 2; }
  run="$build/fuzz-runs/$t"
  mkdir -p "$run/corpus" "$run/artifacts"
  cat fuzz/dict/json.dict > "$run/dict"
  [ -f "fuzz/dict/$t.dict" ] && cat "fuzz/dict/$t.dict" >> "$run/dict"
  seeds="fuzz/corpus/$t"
  [ -d "$seeds" ] || { echo "fuzz.sh: no seed corpus $seeds" >&2; exit 2; }
  ls "$run/artifacts" | sort > "$run/artifacts.before"
  rc=0
  nice -n "${LT_FUZZ_NICE:-0}" "$bin" "$run/corpus" "$seeds" -dict="$run/dict" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]:-4096}" \
    -artifact_prefix="$run/artifacts/" -print_final_stats=1 -close_fd_mask=1 \
    >"$run/log.txt" 2>&1 || rc=$?
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$run/log.txt" | tail -1 | awk '{print $2}')
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$run/log.txt" | tail -1 | awk '{print $2}')
  last=$(grep -E '^#[0-9]+' "$run/log.txt" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -1)
  corpus=$(ls "$run/corpus" | wc -l)
  found=$(ls "$run/artifacts" | sort | comm -13 "$run/artifacts.before" - | grep -E '^(crash|leak|timeout|oom)-' || true)
  verdict=ok
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    verdict="FINDING (exit $rc)"
    status=1
    echo "---- $t: last lines of $run/log.txt ----"
    grep -v '^#[0-9]' "$run/log.txt" | tail -40
  fi
  line=$(printf '%-24s %10s execs %7s/s  %-22s corpus %5s  %s' "$t" "${execs:-?}" "${rate:-?}" \
    "${last:-cov: ? ft: ?}" "$corpus" "$verdict")
  echo "$line"
  summary+=("$line")
  [ -n "$found" ] && summary+=("$(echo "$found" | sed "s|^|    finding: $run/artifacts/|")")
done

echo "=== fuzz summary ($seconds s each) ==="
printf '%s\n' "${summary[@]}"
exit $status
