#!/usr/bin/env bash
# The GPU check: runs the CUDA code on a machine with an NVIDIA GPU and says what ran.
#
#   scripts/gpu_check.sh --bundle   here (the build machine, after building lt_cuda_tests and
#                                   lt_tests in build/): packs into .device/ what the GPU
#                                   machine needs, which may have none of the CPU engine's
#                                   libraries: lt_cuda_tests, lt_tests and lazytrain with the shared
#                                   libraries they link (minus glibc and libstdc++), and
#                                   googletest's source for a rebuild there.
#   scripts/gpu_check.sh            on the GPU machine, from the repository root: runs
#                                   lt_cuda_tests (the kernel library against float64),
#                                   the kernels' benchmark (beside PyTorch where it is
#                                   there), then lt_tests' AdamWCuda test (the 8-bit AdamW kernel
#                                   against the CPU's bits) and CudaBackend tests (the cuda
#                                   backend's memory, copies and events), StreamingCuda
#                                   (five streamed training steps on cuda against the
#                                   CPU's, within its own bf16 distance), a 3-step
#                                   training trial on cpu and on cuda (losses printed
#                                   side by side, planned with the GPU's
#                                   profile from `profile --backend cuda`), two ranks
#                                   under mpirun sharing the GPU (where mpirun is), `bench
#                                   gpu` (the MILP vs the megatrain rule at the
#                                   Qwen2.5-7B shape), then
#                                   lt_cuda_tests under compute-sanitizer's memcheck where
#                                   it works. Where the carried lt_cuda_tests cannot start
#                                   there, it is rebuilt from source with nvcc.
# The log goes to stdout and, when OUT is set, to $OUT/gpu_check.log. Exit status: that
# of the first check that failed.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--bundle" ]]; then
  set -e
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

log=/dev/null
[[ -n "${OUT:-}" ]] && log="$OUT/gpu_check.log"
exec > >(tee "$log") 2>&1
status=0
note() { echo "=== [gpu_check] $* ==="; }
fail() { note "FAILED: $*"; [[ $status -eq 0 ]] && status=1; }
# run_gtest NAME CMD...: runs a googletest binary, its log in /tmp/gpu_check/NAME.log; a
# failure fails the check, and so does a skip (on a GPU machine every test must run).
run_gtest() {
  local name=$1
  shift
  mkdir -p /tmp/gpu_check
  "$@" 2>&1 | tee "/tmp/gpu_check/$name.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "$name"
  if grep -q '^\[  SKIPPED \]' "/tmp/gpu_check/$name.log"; then fail "$name skipped tests on a GPU machine"; fi
}

note "machine"
nvidia-smi -L || { note "no nvidia-smi: no GPU here"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1

# cuBLASLt: the toolkit's, or the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; note "cuBLASLt from $d"; break; fi
done

tests=.device/lt_cuda_tests
if ! "$tests" --gtest_list_tests >/dev/null 2>&1; then
  note "the carried lt_cuda_tests does not start here ($("$tests" --gtest_list_tests 2>&1 | head -2)); building it with nvcc"
  mkdir -p /tmp/gpu_check
  g=.device/googletest/googletest
  nvcc -std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -Isrc -Itests -I"$g/include" -I"$g" \
    src/kernels/cuda/*.cu tests/cuda/*_test.cpp "$g/src/gtest-all.cc" "$g/src/gtest_main.cc" \
    -ldl -o /tmp/gpu_check/lt_cuda_tests || { fail "nvcc build"; exit $status; }
  tests=/tmp/gpu_check/lt_cuda_tests
fi

note "lt_cuda_tests"
run_gtest lt_cuda_tests "$tests"

# The kernels' speed (attention fp32 and on tensor cores, RMSNorm, the conv, the delta
# rule): bench/cuda/cuda_kernels_bench.py beside PyTorch's where torch sees the GPU here,
# else our times alone. A benchmark: reported, not judged.
if [[ -x .device/cuda_kernels_bench ]]; then
  note "cuda_kernels_bench (5 rounds)"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout 180 python3 bench/cuda/cuda_kernels_bench.py --binary .device/cuda_kernels_bench --rounds 5 \
      || note "cuda_kernels_bench.py exited $?"
  else
    timeout 120 .device/cuda_kernels_bench 5 || note "cuda_kernels_bench exited $?"
  fi
fi

note "lt_tests AdamWCuda, CudaBackend and DeviceCollectives (with the CPU engine's carried libraries)"
if [[ -f .device/lt_tests.tar.xz ]]; then
  mkdir -p /tmp/gpu_check && tar -C /tmp/gpu_check -xJf .device/lt_tests.tar.xz
  run_gtest lt_tests env LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" \
    /tmp/gpu_check/lt_tests --gtest_filter='AdamWCuda.*:CudaBackend.*:DeviceCollectives.*'
  # The streamed training step on cuda against the CPU's (a process of its own: the first
  # steps ever run there may crash it, and that must not hide the tests above).
  note "lt_tests StreamingCuda: five training steps on cuda within the CPU's bf16 distance"
  run_gtest lt_tests_streaming env LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" \
    /tmp/gpu_check/lt_tests --gtest_filter='StreamingCuda.*'
else
  note "no .device/lt_tests.tar.xz (run scripts/gpu_check.sh --bundle first): AdamWCuda and CudaBackend not run"
fi

# The GPU's profile as the planner will read it: the cuda backend's matmul rates and pinned
# copies each way, the device's memory (exec/backend_rates.h), then the host's disk and
# optimizer as on the CPU. The trial below plans with it; where it fails, with the shipped
# H200 profile.
hardware=profiles/h200.json
if [[ -x /tmp/gpu_check/lazytrain ]]; then
  note "profile --backend cuda"
  if LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" timeout 180 /tmp/gpu_check/lazytrain profile \
    --backend cuda --out /tmp/gpu_check/cuda_profile.json --dir /tmp/gpu_check --nvme-mb 512 --reps 5; then
    hardware=/tmp/gpu_check/cuda_profile.json
    [[ -n "${OUT:-}" ]] && cp "$hardware" "$OUT"/
  else
    fail "profile --backend cuda"
  fi
fi

# A first training trial on the GPU (reported, not judged against a bound: no step has run
# there yet): the embedded default for 3 steps under one compute budget, on the cpu
# backend and on cuda (LT_CUDA_TRIAL=1 lifts the refusal), one hardware profile for both
# (so one plan); a run that fails fails the check.
if [[ -x /tmp/gpu_check/lazytrain ]]; then
  for backend in cpu cuda; do
    note "trial: train --backend $backend --compute-budget-gb 0.1 --steps 3 --hardware $hardware"
    trial_log="/tmp/gpu_check/trial-$backend.log"
    LT_CUDA_TRIAL=1 LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" timeout 300 \
      /tmp/gpu_check/lazytrain train --backend "$backend" --compute-budget-gb 0.1 --steps 3 --log-every 1 \
      --eval-problems 0 --hardware "$hardware" --output-dir "/tmp/gpu_check/trial-$backend" > "$trial_log" 2>&1
    rc=$?
    grep -E '^(plan|step|done|lazytrain: error)' "$trial_log" || tail -20 "$trial_log"
    [[ $rc -eq 0 ]] || fail "trial on $backend exited $rc"
  done
fi

# Two data-parallel ranks on the one GPU (reported): they share it, so they sum on the
# host (NCCL joins one rank per GPU; the startup line says so). Where the machine has no
# mpirun, said and skipped; a run that fails fails the check.
if [[ -x /tmp/gpu_check/lazytrain ]] && ! command -v mpirun >/dev/null; then
  note "mpirun not on PATH: the two-rank trial on cuda not run"
elif [[ -x /tmp/gpu_check/lazytrain ]]; then
  note "trial: mpirun -np 2 train --backend cuda --compute-budget-gb 0.1 --steps 3 (two ranks on one GPU)"
  dp_log=/tmp/gpu_check/trial-dp.log
  timeout 300 mpirun -np 2 --oversubscribe --allow-run-as-root -x LT_CUDA_TRIAL=1 \
    -x LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" /tmp/gpu_check/lazytrain train --backend cuda \
    --compute-budget-gb 0.1 --steps 3 --log-every 1 --eval-problems 0 --hardware "$hardware" \
    --output-dir /tmp/gpu_check/trial-dp > "$dp_log" 2>&1
  rc=$?
  grep -E '(data parallel|gradient sums over|^plan|^step|^done|lazytrain: error)' "$dp_log" || tail -20 "$dp_log"
  [[ $rc -eq 0 ]] || fail "two-rank trial on cuda exited $rc"
fi

# The GPU bench: a Qwen2.5-7B-shaped model (8 layers, random weights) trained a few steps
# with the MILP's plan and the megatrain rule at the largest batch both fit, planned with
# the GPU's profile; its RESULT line is the issue's figure (reported; a run that fails
# fails the check). Batches up to 16 x 1024 tokens: a few minutes of the device's time,
# which the whole check shares.
if [[ -x /tmp/gpu_check/lazytrain ]]; then
  note "bench gpu --hardware $hardware --max-batch 16 --steps 3"
  LT_CUDA_TRIAL=1 LD_LIBRARY_PATH="/tmp/gpu_check/lib:${LD_LIBRARY_PATH:-}" timeout 300 \
    /tmp/gpu_check/lazytrain bench gpu --hardware "$hardware" --max-batch 16 --steps 3 \
    --offload-dir /tmp/gpu_check > /tmp/gpu_check/bench-gpu.log 2>&1
  rc=$?
  cat /tmp/gpu_check/bench-gpu.log
  [[ $rc -eq 0 ]] || fail "bench gpu exited $rc"
fi

note "lt_cuda_tests under compute-sanitizer memcheck"
# Last, since it is the slowest. Some sandboxes (gVisor) refuse the device to the
# sanitizer ("Device not supported"): that is said, not counted as a failure of ours.
if command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$tests" --gtest_brief=1 \
    > /tmp/gpu_check/memcheck.log 2>&1
  rc=$?
  tail -40 /tmp/gpu_check/memcheck.log
  if grep -q 'Device not supported' /tmp/gpu_check/memcheck.log; then
    note "compute-sanitizer refused this device (Device not supported): memcheck not run"
  elif [[ $rc -eq 124 ]]; then
    note "memcheck did not finish in 240 s: not run to the end"
  elif [[ $rc -eq 3 ]]; then
    fail "memcheck found memory errors"
  elif [[ $rc -ne 0 ]]; then
    # The tests' own failures were reported above; memcheck's verdict is its error summary.
    note "memcheck: no memory errors, but the tests under it exited $rc ($(grep -m1 'ERROR SUMMARY' /tmp/gpu_check/memcheck.log))"
  fi
else
  note "compute-sanitizer not on PATH: memcheck not run"
fi

[[ -n "${OUT:-}" ]] && cp /tmp/gpu_check/*.log "$OUT"/ 2>/dev/null
note "done, status $status"
exit $status
