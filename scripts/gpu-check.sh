#!/usr/bin/env bash
# Runs on the GPU machine (see DEVELOPERS.md): installs the wheel carried in .carry/, runs the
# GPU test suite and the CPU suite against the GPU box's own torch/CuPy/JAX/Numba, then the
# GPU benches. Everything it writes goes under $OUT (default out/gpu).
#   build here:  maturin build --release -o .carry
#                (cd apps/ecg && ../../.venv/bin/maturin build --release -o ../../.carry)
#                  (the ECG app's wheel, zerohop_ecg)
#                cargo build --release -p zerohop --features cuda --example cuda_pool_bench
#                cp target/release/examples/cuda_pool_bench .carry/   (then carry .carry)
#                cargo build --release -p zerohop --features cuda --example guard_cuda
#                cp target/release/examples/guard_cuda .carry/
#                cargo build --release -p zerohop-capi && cp target/release/libzerohop_capi.so .carry/
#                PY=.venv/bin/python bash examples/cpp/cuda-headers.sh .carry/cuda-include 13.0
#                  (the CUDA runtime's headers for this machine's torch, cu130: the C++ example
#                  installs zerohop's pool as libtorch's CUDA allocator with them)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
rm -rf /tmp/zerohop-site
$PY -m pip install -q --no-index --no-deps --target /tmp/zerohop-site .carry/zerohop-*.whl \
  .carry/zerohop_ecg-*.whl || exit 1
export PYTHONPATH=/tmp/zerohop-site
# The EDF readers bench/edf_read.py compares against, when their wheels were carried
# (pip download edfio pyedflib --no-deps --only-binary :all: --python-version 3.12 -d .carry/peers).
if ls .carry/peers/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/zerohop-site .carry/peers/*.whl || true
fi
# RMM, whose pool the allocation bench (bench/gpu_dlpack.py) sets beside zerohop's, from
# carried wheels, on that bench's path alone (the machine's own cuda-bindings serve it):
# pip download rmm-cu13 librmm-cu13 rapids-logger --no-deps --only-binary :all:
#   --python-version 3.12 --platform manylinux_2_28_x86_64 -d .carry/rmm
RMM_PATH=
if ls .carry/rmm/*.whl >/dev/null 2>&1; then
  rm -rf /tmp/rmm-site
  $PY -m pip install -q --no-index --no-deps --target /tmp/rmm-site .carry/rmm/*.whl \
    && RMM_PATH=:/tmp/rmm-site
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c 'import sys, torch, cupy, jax, numba, numpy; print(sys.version.split()[0], "torch", torch.__version__, "cupy", cupy.__version__, "jax", jax.__version__, "numba", numba.__version__, "numpy", numpy.__version__)'
  $PY -c 'import zerohop, zerohop.cuda as c; print("zerohop", zerohop.__version__, "cuda available:", c.is_available(), "devices:", c.device_count())'
  $PY -c 'import importlib; [print(m, getattr(importlib.import_module(m), "__version__", "?")) for m in ("pyarrow", "polars", "numba.cuda") if importlib.util.find_spec(m.split(".")[0])]' || true
} 2>&1 | tee "$OUT/device.txt"
# The suites run from a copy of tests/ (with docs/ and the extension's sources, which tests
# check against) so the repository's python/ folder is not imported.
rm -rf /tmp/zerohop-run && mkdir -p /tmp/zerohop-run && cp -r tests docs README.md /tmp/zerohop-run/
cp -r --parents apps/ecg/tests /tmp/zerohop-run/
cp -r --parents scripts/check-layers.py scripts/valgrind-verdict.py crates/zerohop-python/src fuzz/seeds/csv_reader fuzz/seeds/edf_reader \
  bench/torch_tools.py /tmp/zerohop-run/
T=/tmp/zerohop-run/tests
status=0
# ONLY=ecg: the flagship's benches alone (reading a day-long EDF beside edfio and pyedflib,
# the day-long job on the GPU and on the host's cores, signal quality's cost beside detection).
if [ "${ONLY:-}" = ecg ]; then
  $PY bench/edf_read.py --hours 24 --repeat 5 --out "$OUT/edf_read.md" 2>&1 | tail -12 \
    | tee "$OUT/edf_read.log" || status=1
  $PY bench/ecg_holter.py --device cuda --device cpu --runs 2 --out "$OUT/ecg_holter.md" 2>&1 \
    | tail -8 | tee "$OUT/holter.log" || status=1
  $PY bench/ecg_holter.py --edf --device cuda --device cpu --runs 2 \
    --out "$OUT/ecg_holter_edf.md" 2>&1 | tail -8 | tee -a "$OUT/holter.log" || status=1
  $PY bench/ecg_accuracy.py --quality-only --out "$OUT/ecg_quality.md" 2>&1 | tail -8 \
    | tee "$OUT/quality.log" || status=1
  exit $status
fi
# ONLY=handoff: the GPU suite, the hand-off and allocation bench, and signal quality's cost
# (iterating on the hand-off without the long benches).
if [ "${ONLY:-}" = handoff ]; then
  $PY -m pytest -q -rs -p no:cacheprovider $T/gpu 2>&1 | tail -25 | tee "$OUT/pytest-gpu.log"
  grep -qE "^(FAILED|ERROR)| failed" "$OUT/pytest-gpu.log" && status=1
  PYTHONPATH=$PYTHONPATH$RMM_PATH $PY bench/gpu_dlpack.py --out "$OUT/gpu_dlpack.md" 2>&1 | tee "$OUT/bench.log" || status=1
  $PY bench/ecg_accuracy.py --quality-only --out "$OUT/ecg_quality.md" 2>&1 | tail -8 \
    | tee "$OUT/quality.log" || status=1
  exit $status
fi
# Two GPUs are lent only at times: their bench runs first (ONLY=ddp: nothing else).
gpus=$($PY -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -ge 2 ] || [ "${ONLY:-}" = ddp ]; then
  $PY -m pytest -q -rs -p no:cacheprovider $T/gpu/test_ecg_training_graph.py 2>&1 | tail -15 \
    | tee "$OUT/pytest-ddp.log"
  grep -qE "^(FAILED|ERROR)| failed" "$OUT/pytest-ddp.log" && status=1
  # DDP_BENCH=0: the 2-GPU tests only, not the training benches.
  if [ "${DDP_BENCH:-1}" = 1 ]; then
  # DDP_FUSE=0 leaves out the steps fused by torch.compile (each compiles for tens of seconds).
  fuse=$([ "${DDP_FUSE:-1}" = 1 ] && echo --fuse)
  # DDP_PER_RANK=1,1.41 adds 2-rank runs with a whole batch on each rank (--batch-per-rank),
  # one per factor on the learning rate.
  $PY bench/ecg_ddp.py --batches ${DDP_BATCHES:-0,1024} ${DDP_EAGER:+--eager} $fuse \
    ${DDP_PER_RANK:+--per-rank $DDP_PER_RANK} --out "$OUT/ecg_ddp.md" >"$OUT/ddp.log" 2>&1 || status=1
  tail -30 "$OUT/ddp.log"
  $PY bench/ecg_step.py $fuse ${STEP_FUSED:+--fused-batches $STEP_FUSED} --out "$OUT/ecg_step.md" 2>&1 | tail -12 | tee "$OUT/step.log" || status=1
  fi
  [ "${ONLY:-}" = ddp ] && exit $status
fi
$PY -m pytest -q -rs -s -p no:cacheprovider $T/gpu 2>&1 | tee "$OUT/pytest-gpu.log" || status=1
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.log" || true
# The C ABI from C++ on the GPU: the table in device memory from a zerohop pool, the
# TorchScript model on cuda:0, libtorch's own CUDA tensors from the same pool (examples/cpp;
# compiled here against this machine's libtorch).
if command -v g++ >/dev/null && [ -f .carry/libzerohop_capi.so ]; then
  inc=$(find .carry/cuda-include -name cuda_runtime_api.h -printf '%h\n' 2>/dev/null | head -1)
  [ -n "$inc" ] && inc=$PWD/$inc
  PY=$PY ZH_CUDA_INCLUDE=$inc ZEROHOP_CAPI_LIB=.carry/libzerohop_capi.so \
    bash examples/cpp/run.sh cuda 100000 2>&1 \
    | tee "$OUT/cpp-example.log" || status=1
else
  echo "C++ example skipped: no g++ or no .carry/libzerohop_capi.so" | tee "$OUT/cpp-example.log"
fi
if [ "${QUICK:-0}" = 1 ] && [ -x .carry/guard_cuda ]; then
  .carry/guard_cuda 2>&1 | tee "$OUT/guard_cuda.md" || status=1
fi
# QUICK=1: the GPU suite, the C++ example and the guard only (iterating on GPU code).
[ "${QUICK:-0}" = 1 ] && exit $status
# Every test's name goes to the log as it starts, and the suite has a deadline, so a test that
# hangs (round 6: the suite once ran past the machine's 10 minutes, in a test not identified)
# is named in the log instead of taking the whole run down with it.
timeout ${CPU_SUITE_SECONDS:-400} $PY -m pytest -v -p no:cacheprovider $T \
  -k "not lifetimes and not ecg" --ignore=$T/gpu > /tmp/pytest-cpu.full 2>&1 || status=1
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/pytest-cpu.full | tail -15 > "$OUT/pytest-cpu.log"
tail -3 /tmp/pytest-cpu.full >> "$OUT/pytest-cpu.log"
cat "$OUT/pytest-cpu.log"
PYTHONPATH=$PYTHONPATH$RMM_PATH $PY bench/gpu_dlpack.py --out "$OUT/gpu_dlpack.md" 2>&1 | tee "$OUT/bench.log" || status=1
# torch's own tools (graphs, compile, statistics) per way of installing zerohop's pool.
$PY bench/torch_tools.py --out "$OUT/torch_tools.md" 2>&1 | tail -20 | tee "$OUT/torch_tools.log" || status=1
$PY bench/ecg_pipeline_gpu.py --out "$OUT/ecg_pipeline_gpu.md" 2>&1 | tail -25 | tee "$OUT/ecg-bench.log" || status=1
# Hand-offs to another process: CUDA IPC against torch.multiprocessing, and host memory.
$PY bench/ipc.py --cuda --write --repeat 51 --out "$OUT/ipc_cuda.md" 2>&1 | tail -20 | tee "$OUT/ipc.log" || status=1
$PY bench/ipc.py --out "$OUT/ipc_host.md" 2>&1 | tail -20 | tee -a "$OUT/ipc.log" || status=1
# Where a CUDA IPC consumer's time goes (unpickle, view, write, synchronise, drop).
$PY bench/ipc_cuda_phases.py 2>&1 | tee "$OUT/ipc_cuda_phases.txt" || status=1
# Many recordings over local workers (1 to 16) (SKIP_RECORDS=1 leaves this long bench out).
[ "${SKIP_RECORDS:-0}" = 1 ] || $PY bench/ecg_records.py --out "$OUT/ecg_records.md" 2>&1 | tail -25 | tee "$OUT/records.log" || status=1
# The day-long record from a CSV file, whole job, on the GPU and on the 16 cores.
$PY bench/ecg_holter.py --device cuda --device cpu --runs 2 --out "$OUT/ecg_holter.md" 2>&1 \
  | tail -8 | tee "$OUT/holter.log" || status=1
# The flagship job on the GPU (plots only where matplotlib is installed).
plots=$($PY -c 'import matplotlib' 2>/dev/null && echo "" || echo "--no-plots")
$PY -m zerohop_ecg --device cuda --out "$OUT/ecg-gpu" $plots 2>&1 | tail -20 | tee "$OUT/ecg-gpu.log" || status=1
# The const-input guard's device fingerprint against the host's, a one-byte write caught, and
# its cost beside a device-to-device copy (crates/zerohop/examples/guard_cuda.rs).
if [ -x .carry/guard_cuda ]; then
  .carry/guard_cuda 2>&1 | tee "$OUT/guard_cuda.md" || status=1
fi
if [ -x .carry/cuda_pool_bench ]; then
  .carry/cuda_pool_bench 2>&1 | tee "$OUT/cuda_pool.md" || status=1
fi
exit $status
