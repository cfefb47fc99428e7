#!/usr/bin/env bash
# The GPU check: runs the CUDA code on a machine with an NVIDIA GPU and says what ran.
#
#   scripts/gpu_check.sh --bundle   here (the build machine): builds lt_cuda_tests, lt_tests,
#                                   lazytrain and cuda_kernels_bench in build/, then packs into
#                                   .device/ what the GPU machine needs, which may have none of
#                                   the CPU engine's libraries (and cannot build it): the
#                                   binaries with the shared libraries they link (minus glibc
#                                   and libstdc++), and googletest's source for a rebuild of
#                                   lt_cuda_tests there. .device/ is ignored by git: the device
#                                   tool must carry it (run's carry: [".device"]).
#   scripts/gpu_check.sh            on the GPU machine, from the repository root, most
#                                   important first, each step under its own time limit and
#                                   all of them within GPU_CHECK_SECONDS (default 480):
#                                   lt_cuda_tests (the kernel library against float64);
#                                   lt_tests' AdamWCuda (the 8-bit AdamW kernel against the
#                                   CPU's bits), CudaBackend (memory, copies, events) and
#                                   DeviceCollectives; StreamingCuda (five streamed training
#                                   steps on cuda against the CPU's, within its own bf16
#                                   distance); `profile --backend cuda`; a 3-step training
#                                   trial on cpu and on cuda planned with that profile (the
#                                   losses side by side, TRIAL line); `bench gpu` (the MILP
#                                   vs the megatrain rule at the Qwen2.5-7B shape, RESULT
#                                   line); then what time is left for: the kernels'
#                                   benchmark, two ranks under mpirun sharing the GPU, and
#                                   lt_cuda_tests under compute-sanitizer's memcheck. A step
#                                   that fails or runs out of time does not stop the next.
# The log goes to stdout and, when OUT is set, to $OUT/gpu_check.log, with the profile, the
# trials' and the bench's logs beside it (each copied when its step ends); a summary of
# every step comes last. Exit status: 1 if any check failed, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--bundle" ]]; then
  set -e
  # Built now, so that nothing stale travels.
  targets=(lt_cuda_tests lt_tests lazytrain)
  if cmake --build build --target help | grep -qw cuda_kernels_bench; then targets+=(cuda_kernels_bench); fi
  cmake --build build -j"$(nproc)" --target "${targets[@]}"
  rm -rf .device && mkdir -p .device/lib
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
  cp build/lt_cuda_tests .device/
  # The kernels' benchmark, when built (run there: bench/cuda/cuda_kernels_bench.py).
  if [[ -x build/cuda_kernels_bench ]]; then cp build/cuda_kernels_bench .device/; fi
  cp build/tests/lt_tests build/lazytrain .device/
  # The libraries of the CPU engine, not the system's (the GPU machine has its own glibc,
  # libstdc++ and CUDA).
  ldd build/tests/lt_tests build/lazytrain | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" .device/lib/; done
  tar -C .device -cJf .device/lt_tests.tar.xz lt_tests lazytrain lib
  rm -rf .device/lt_tests .device/lazytrain .device/lib
  cp -r /usr/src/googletest .device/googletest
  du -sh .device
  exit 0
fi

if [[ ! -d .device ]]; then
  echo "gpu_check: no .device/ here: run scripts/gpu_check.sh --bundle on the build machine, and carry" \
    ".device with the working tree (the device tool's run: carry [\".device\"])" >&2
  exit 2
fi

log=/dev/null
[[ -n "${OUT:-}" ]] && log="$OUT/gpu_check.log"
exec > >(tee "$log") 2>&1
tee_pid=$!
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-480}))
work=/tmp/gpu_check
mkdir -p "$work"
status=0
summary=()
note() { echo "=== [gpu_check] $* ==="; }
fail() {
  note "FAILED: $*"
  summary+=("FAILED $*")
  status=1
}
passed() { summary+=("ok     $*"); }
# verdict NAME RC: a step's exit status in the summary (125: not run, out of time).
verdict() {
  case $2 in
    0) passed "$1" ;;
    124) fail "$1 did not finish in its time" ;;
    125) summary+=("-      $1 not run (out of time)") ;;
    *) fail "$1 exited $2" ;;
  esac
}
# limit SECONDS: the time a step may take, at most what is left before the deadline (0: none).
limit() {
  local left=$((deadline - SECONDS))
  ((left < $1)) && echo $((left > 0 ? left : 0)) || echo "$1"
}
# Runs "$@" under `timeout`, if at least 15 s are left (else says so and returns 125).
bounded() {
  local secs
  secs=$(limit "$1")
  shift
  if ((secs < 15)); then
    note "out of time (GPU_CHECK_SECONDS): not run: $*"
    return 125
  fi
  timeout "$secs" "$@"
}
# Copies a step's file into $OUT (at most 8 files come back: this log and five more).
keep() { [[ -n "${OUT:-}" && -f "$1" ]] && cp "$1" "$OUT"/; }
# run_gtest NAME SECONDS SKIPS CMD...: a googletest binary, its log in $work/NAME.log; a
# failure fails the check, and so does a skip unless SKIPS is "skips-allowed" (on a GPU
# machine every GPU test must run; a test that needs what the machine may lack, NCCL, may
# skip, saying why).
run_gtest() {
  local name=$1 secs=$2 skips=$3
  shift 3
  bounded "$secs" "$@" 2>&1 | tee "$work/$name.log"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    verdict "$name" "$rc"
  elif [[ $skips != skips-allowed ]] && grep -q '^\[  SKIPPED \]' "$work/$name.log"; then
    fail "$name skipped tests on a GPU machine"
  else
    passed "$name ($(grep -m1 -E '^\[  PASSED  \]' "$work/$name.log"))"
  fi
}

note "machine"
nvidia-smi -L || { note "no nvidia-smi: no GPU here"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1
echo "io_uring_disabled: $(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 'not said')," \
  "/tmp on $(stat -f -c %T /tmp), $(nproc) cores"

# cuBLASLt: the toolkit's, or the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so.13* >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
    note "cuBLASLt from $d"
    break
  fi
done
# NCCL (opened at run time, never carried): the system's, else the one PyTorch's wheels carry.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so'; then
  d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
  if [[ -n "$d" ]] && ls "$d"/libnccl.so* >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
    note "NCCL from $d"
  else
    note "no NCCL found: DeviceCollectives' NCCL tests will skip, saying so"
  fi
fi

tests=.device/lt_cuda_tests
if ! "$tests" --gtest_list_tests >/dev/null 2>&1; then
  note "the carried lt_cuda_tests does not start here ($("$tests" --gtest_list_tests 2>&1 | head -2));" \
    "building it with nvcc"
  g=.device/googletest/googletest
  if bounded 240 nvcc -std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -Isrc -Itests -I"$g/include" -I"$g" \
    src/kernels/cuda/*.cu tests/cuda/*_test.cpp "$g/src/gtest-all.cc" "$g/src/gtest_main.cc" \
    -ldl -o "$work/lt_cuda_tests"; then
    tests=$work/lt_cuda_tests
  else
    fail "nvcc build of lt_cuda_tests"
    tests=
  fi
fi

if [[ -n "$tests" ]]; then
  note "lt_cuda_tests"
  run_gtest lt_cuda_tests 150 no-skips "$tests"
fi

engine=$work/lazytrain
libs="$work/lib:${LD_LIBRARY_PATH:-}"  # the CPU engine's carried libraries, then CUDA's
if [[ -f .device/lt_tests.tar.xz ]] && tar -C "$work" -xJf .device/lt_tests.tar.xz; then
  note "lt_tests AdamWCuda and CudaBackend (with the CPU engine's carried libraries)"
  run_gtest lt_tests 90 no-skips env LD_LIBRARY_PATH="$libs" "$work/lt_tests" --gtest_filter='AdamWCuda.*:CudaBackend.*'
  note "lt_tests DeviceCollectives (NCCL where the machine has it; its tests say what they lack)"
  run_gtest lt_tests_collectives 60 skips-allowed env LD_LIBRARY_PATH="$libs" "$work/lt_tests" \
    --gtest_filter='DeviceCollectives.*'
  # The streamed training step on cuda against the CPU's (a process of its own: the first
  # steps ever run there may crash it, and that must not hide the tests above).
  note "lt_tests StreamingCuda: five training steps on cuda within the CPU's bf16 distance"
  run_gtest lt_tests_streaming 150 no-skips env LD_LIBRARY_PATH="$libs" "$work/lt_tests" \
    --gtest_filter='StreamingCuda.*'
else
  fail "no .device/lt_tests.tar.xz to unpack (run scripts/gpu_check.sh --bundle first)"
  engine=
fi

# The GPU's profile as the planner will read it: the cuda backend's matmul rates and pinned
# copies each way, the device's memory (exec/backend_rates.h), then the host's disk and
# optimizer as on the CPU. The trial and the bench plan with it; where it fails, the trial
# plans with the shipped H200 profile and the bench measures the GPU itself.
profile=
# The disk test and the NVMe tier need O_DIRECT, which some filesystems refuse (tmpfs, some
# overlays): the first directory that takes it, else $work (and the profile says why not).
disk=$work
for d in "$work" "$PWD/.device" /var/tmp "$HOME"; do
  if dd if=/dev/zero of="$d/o_direct_probe" bs=4096 count=1 oflag=direct 2>/dev/null; then
    disk=$d
    rm -f "$d/o_direct_probe"
    break
  fi
  rm -f "$d/o_direct_probe"
done
if [[ -n "$engine" ]]; then
  note "profile --backend cuda (disk test in $disk)"
  bounded 120 env LD_LIBRARY_PATH="$libs" stdbuf -oL -eL "$engine" profile --backend cuda \
    --out "$work/cuda_profile.json" --dir "$disk" --nvme-mb 512 --reps 5
  rc=$?
  verdict "profile --backend cuda" $rc
  if [[ $rc -eq 0 ]]; then
    profile=$work/cuda_profile.json
    keep "$profile"
  fi
fi

# A first training trial on the GPU: the embedded default for 3 steps under one compute
# budget, on the cpu backend and on cuda (LT_CUDA_TRIAL=1 lifts the refusal), one hardware
# profile for both (so one plan). Judged: both runs finish and every loss is finite; the
# losses' largest difference is reported (StreamingCuda above is the bounded comparison).
if [[ -n "$engine" ]]; then
  hardware=${profile:-profiles/h200.json}
  for backend in cpu cuda; do
    note "trial: train --backend $backend --compute-budget-gb 0.1 --steps 3 --hardware $hardware"
    trial_log="$work/trial-$backend.log"
    bounded 120 env LT_CUDA_TRIAL=1 LD_LIBRARY_PATH="$libs" stdbuf -oL -eL "$engine" train --backend "$backend" \
      --compute-budget-gb 0.1 --steps 3 --log-every 1 --eval-problems 0 --hardware "$hardware" \
      --output-dir "$work/trial-$backend" > "$trial_log" 2>&1
    rc=$?
    keep "$trial_log"
    grep -E '^(plan|step|done)|lazytrain: .*error' "$trial_log" || tail -20 "$trial_log"
    verdict "trial on $backend" $rc
  done
  # "step 2/3 | loss 5.8061 | ...": both runs' losses, step by step.
  losses() { sed -n 's:^step \([0-9]*\)/[0-9]* | loss \([^ ]*\) .*:\1 \2:p' "$work/trial-$1.log"; }
  trial=$(awk 'FNR == NR { cpu[$1] = $2; next }
    $1 in cpu { n++; d = cpu[$1] - $2; if (d < 0) d = -d; if (d > m) m = d; if (tolower($2) ~ /nan|inf/) bad++ }
    END { printf "TRIAL steps=%d max_abs_dloss=%g nonfinite_cuda=%d\n", n, m, bad }' <(losses cpu) <(losses cuda))
  echo "$trial"
  if [[ $trial == *"steps=0 "* ]]; then
    fail "trial: no step losses on both backends to compare"
  elif [[ $trial != *"nonfinite_cuda=0"* ]]; then
    fail "trial: cuda's losses are not finite"
  fi
fi

# The GPU bench: a Qwen2.5-7B-shaped model (8 layers, random weights) trained a few steps
# with the MILP's plan and the megatrain rule at the largest batch both fit; its RESULT
# line is the issue's figure (a run that fails fails the check). Batches up to 16 x 1024
# tokens. Its lines reach the log as they are printed (a crash in the second row keeps
# the first).
if [[ -n "$engine" ]]; then
  bench_args=(bench gpu --max-batch 16 --steps 3 --offload-dir "$disk")
  [[ -n "$profile" ]] && bench_args+=(--hardware "$profile")
  note "${bench_args[*]}"
  bounded 240 env LT_CUDA_TRIAL=1 LD_LIBRARY_PATH="$libs" stdbuf -oL -eL "$engine" "${bench_args[@]}" 2>&1 |
    tee "$work/bench-gpu.log"
  rc=${PIPESTATUS[0]}
  keep "$work/bench-gpu.log"
  verdict "bench gpu" $rc
fi

# What time is left for. The kernels' speed (attention fp32 and on tensor cores, RMSNorm,
# the conv, the delta rule): bench/cuda/cuda_kernels_bench.py beside PyTorch's where torch
# sees the GPU here, else our times alone. A benchmark: reported, not judged.
if [[ -x .device/cuda_kernels_bench ]]; then
  note "cuda_kernels_bench (5 rounds)"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    bounded 120 python3 bench/cuda/cuda_kernels_bench.py --binary .device/cuda_kernels_bench --rounds 5 \
      || note "cuda_kernels_bench.py exited $?"
  else
    bounded 90 .device/cuda_kernels_bench 5 || note "cuda_kernels_bench exited $?"
  fi
fi

# Two data-parallel ranks on the one GPU (reported): they share it, so they sum on the
# host (NCCL joins one rank per GPU; the startup line says so). Where the machine has no
# mpirun, said and skipped; a run that fails fails the check.
if [[ -n "$engine" ]] && ! command -v mpirun >/dev/null; then
  note "mpirun not on PATH: the two-rank trial on cuda not run"
elif [[ -n "$engine" ]]; then
  note "trial: mpirun -np 2 train --backend cuda --compute-budget-gb 0.1 --steps 3 (two ranks on one GPU)"
  dp_log=$work/trial-dp.log
  bounded 60 mpirun -np 2 --oversubscribe --allow-run-as-root -x LT_CUDA_TRIAL=1 \
    -x LD_LIBRARY_PATH="$libs" "$engine" train --backend cuda \
    --compute-budget-gb 0.1 --steps 3 --log-every 1 --eval-problems 0 --hardware "${profile:-profiles/h200.json}" \
    --output-dir "$work/trial-dp" > "$dp_log" 2>&1
  rc=$?
  grep -E '(data parallel|gradient sums over|^plan|^step|^done|lazytrain: .*error)' "$dp_log" || tail -20 "$dp_log"
  verdict "two-rank trial on cuda" $rc
fi

# Last, since it is the slowest. Some sandboxes (gVisor) refuse the device to the
# sanitizer ("Device not supported"): that is said, not counted as a failure of ours.
if [[ -z "$tests" ]]; then
  note "no lt_cuda_tests: memcheck not run"
elif command -v compute-sanitizer >/dev/null; then
  note "lt_cuda_tests under compute-sanitizer memcheck"
  bounded 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$tests" --gtest_brief=1 \
    > "$work/memcheck.log" 2>&1
  rc=$?
  keep "$work/memcheck.log"
  tail -20 "$work/memcheck.log"
  if grep -q 'Device not supported' "$work/memcheck.log"; then
    note "compute-sanitizer refused this device (Device not supported): memcheck not run"
  elif [[ $rc -eq 124 || $rc -eq 125 ]]; then
    note "memcheck did not finish in the time left: not run to the end"
  elif [[ $rc -eq 3 ]]; then
    fail "memcheck found memory errors"
  elif [[ $rc -ne 0 ]]; then
    # The tests' own failures were reported above; memcheck's verdict is its error summary.
    note "memcheck: no memory errors, but the tests under it exited $rc" \
      "($(grep -m1 'ERROR SUMMARY' "$work/memcheck.log"))"
  else
    passed "memcheck"
  fi
else
  note "compute-sanitizer not on PATH: memcheck not run"
fi

note "summary ($SECONDS s)"
printf '%s\n' "${summary[@]}"
grep -h '^RESULT' "$work/bench-gpu.log" 2>/dev/null
[[ -n "${trial:-}" ]] && echo "$trial"
note "done, status $status"
# The log's tee must write its last lines before the script ends.
exec >&- 2>&-
wait "$tee_pid"
exit $status
