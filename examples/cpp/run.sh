#!/usr/bin/env bash
# Installs zerohop's C library into target/cpp-example/prefix (scripts/install.sh, what
# `make install` runs), then builds the C smoke test and the C++ libtorch examples against that
# prefix alone, through its pkg-config file, and runs them. `make cpp-example` calls this.
#   examples/cpp/run.sh [cpu|cuda|bench] [ROWS]   PY=python with torch (default .venv/bin/python)
# With ZEROHOP_CAPI_LIB=FILE it installs that prebuilt libzerohop_capi.so instead of running
# cargo (the GPU machine has no cargo: gpu-check.sh carries the library and compiles the
# examples there against that machine's own libtorch). ZEROHOP_PREBUILT=DIR skips every build.
# With ZH_CUDA_INCLUDE=DIR (the CUDA runtime's headers: examples/cpp/cuda-headers.sh) the example
# also installs zerohop's pool as libtorch's CUDA allocator on "cuda" (torch_cuda_allocator.cpp).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEVICE=${1:-cpu}
ROWS=${2:-1000}
PY=${PY:-$ROOT/.venv/bin/python}
OUT=${ZEROHOP_PREBUILT:-$ROOT/target/cpp-example}

if [[ -z ${ZEROHOP_PREBUILT:-} ]]; then
  PREFIX=$OUT/prefix
  # A fresh prefix each time: a file left from an earlier install would hide a missing one.
  rm -rf "$PREFIX"
  bash "$ROOT/scripts/install.sh" "$PREFIX"
  export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
  if command -v pkg-config >/dev/null; then
    read -r -a ZH_FLAGS <<< "$(pkg-config --cflags --libs zerohop)"
  else # the same flags by hand (the GPU machine may lack pkg-config)
    ZH_FLAGS=(-I"$PREFIX/include" -L"$PREFIX/lib" -Wl,-rpath,"$PREFIX/lib" -lzerohop_capi)
  fi
  TORCH=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  TORCH_INC=(-isystem "$TORCH/include" -isystem "$TORCH/include/torch/csrc/api/include")
  TORCH_LIB=(-L"$TORCH/lib" -ltorch -ltorch_cpu -lc10 -Wl,-rpath,"$TORCH/lib")

  ALLOCATOR=()
  if [[ -n ${ZH_CUDA_INCLUDE:-} ]]; then
    ALLOCATOR=(-DZH_TORCH_CUDA_ALLOCATOR -isystem "$ZH_CUDA_INCLUDE"
      "$ROOT/examples/cpp/torch_cuda_allocator.cpp" -ltorch_cuda -lc10_cuda)
  fi

  echo "== C smoke test (gcc -std=c11, header and library from the prefix through pkg-config)"
  gcc -std=c11 -Wall -Wextra -Werror -isystem "$TORCH/include" "$ROOT/examples/c/smoke.c" \
    "${ZH_FLAGS[@]}" -o "$OUT/smoke"
  echo "== C blocks example (several layouts in one buffer: zh_blocks_wrap)"
  gcc -std=c11 -Wall -Wextra -Werror "$ROOT/examples/c/blocks.c" "${ZH_FLAGS[@]}" \
    -o "$OUT/blocks"
  echo "== C layout and batches example (sizes its own buffer, wraps it, walks it in batches)"
  gcc -std=c11 -Wall -Wextra -Werror "$ROOT/examples/c/layout.c" "${ZH_FLAGS[@]}" \
    -o "$OUT/layout"
  echo "== C++ example (libtorch from the venv's torch)"
  if [[ -n ${ZH_CUDA_INCLUDE:-} ]]; then
    echo "   with libtorch's CUDA allocator hook (CUDA headers: $ZH_CUDA_INCLUDE)"
  else
    echo "   without libtorch's CUDA allocator hook (no ZH_CUDA_INCLUDE)"
  fi
  # The libtorch examples compile side by side (each g++ is one process, a minute of CPU).
  g++ -std=c++20 -O1 -Wall -Werror "${TORCH_INC[@]}" "$ROOT/examples/cpp/soa_inference.cpp" \
    "${ALLOCATOR[@]}" "${ZH_FLAGS[@]}" "${TORCH_LIB[@]}" \
    -o "$OUT/soa_inference" &
  SOA_BUILD=$!
  # The CMS flow over buffers the program allocates itself (cms_wrap.cpp): on "cuda" with
  # cudaMalloc, which needs the CUDA runtime's headers and the libcudart torch came with.
  CMS_CUDA=()
  if [[ -n ${ZH_CUDA_INCLUDE:-} ]]; then
    CUDART=$("$PY" -c 'import glob, os, site, torch
roots = [os.path.dirname(torch.__file__)] + site.getsitepackages()
found = [p for r in roots for p in glob.glob(os.path.join(r, "**", "libcudart.so*"), recursive=True)]
print(sorted(found)[-1] if found else "")')
    if [[ -n $CUDART ]]; then
      CMS_CUDA=(-DZH_CMS_CUDA -isystem "$ZH_CUDA_INCLUDE" "$CUDART" -Wl,-rpath,"$(dirname "$CUDART")"
        -ltorch_cuda -lc10_cuda)
    fi
  fi
  echo "== C++ CMS example over the program's own buffers${CMS_CUDA:+ (with cudaMalloc)}"
  g++ -std=c++20 -O1 -Wall -Werror "${TORCH_INC[@]}" "$ROOT/examples/cpp/cms_wrap.cpp" \
    "${CMS_CUDA[@]}" "${ZH_FLAGS[@]}" "${TORCH_LIB[@]}" -o "$OUT/cms_wrap"
  wait "$SOA_BUILD" || { echo "soa_inference.cpp did not compile"; exit 1; }
  # The same model as an AOTInductor package for the CMS example's table (its rows fix the
  # pitch the package is exported for): on the CPU always, on "cuda" with ZH_AOTI=1 (a minute
  # of compilation there).
  AOTI_ARGS=()
  if [[ $DEVICE == cpu || ${ZH_AOTI:-0} == 1 ]] && [[ ${ZH_AOTI:-1} != 0 ]]; then
    AOTI_ARGS=(--aoti "$OUT/track_scorer.pt2" --rows "$((ROWS * 10))" --batch "$ROWS"
      --device "$([[ $DEVICE == cuda ]] && echo cuda || echo cpu)")
  fi
  "$PY" "$ROOT/examples/cpp/make_model.py" "$OUT/track_scorer.pt" "${AOTI_ARGS[@]}"
  if [[ $DEVICE == bench ]]; then
    g++ -std=c++20 -O2 -Wall -Werror "${TORCH_INC[@]}" "$ROOT/examples/cpp/map_bench.cpp" \
      "${ZH_FLAGS[@]}" "${TORCH_LIB[@]}" -o "$OUT/map_bench"
  fi
fi

if [[ $DEVICE == bench ]]; then # examples/cpp/run.sh bench [ROWS]: the 64-column map bench
  exec "$OUT/map_bench" "$ROWS" 2000
fi

"$OUT/smoke"
"$OUT/blocks"
"$OUT/layout" 1000 7
"$OUT/soa_inference" "$OUT/track_scorer.pt" "$DEVICE" "$ROWS"
PACKAGE=()
[[ -f $OUT/track_scorer.pt2 && -n ${AOTI_ARGS[*]:-} ]] && PACKAGE=("$OUT/track_scorer.pt2")
"$OUT/cms_wrap" "$OUT/track_scorer.pt" "$DEVICE" "$((ROWS * 10))" "$ROWS" "${PACKAGE[@]}"
if [[ -n ${PACKAGE[*]:-} ]]; then
  # A table of another row count has another pitch: the package would read the wrong
  # elements without a word, so the example must refuse it.
  if "$OUT/cms_wrap" "$OUT/track_scorer.pt" "$DEVICE" "$((ROWS * 10 + 64))" "$ROWS" \
      "${PACKAGE[@]}" > "$OUT/cms_wrap_other_pitch.log" 2>&1 \
      || ! grep -q "^FAIL the AOTInductor package was exported for this table's pitch" \
        "$OUT/cms_wrap_other_pitch.log"; then
    cat "$OUT/cms_wrap_other_pitch.log"
    echo "FAILED: a table of another pitch was not refused for the AOTInductor package"
    exit 1
  fi
  echo "ok   a table of another pitch is refused for the AOTInductor package"
fi
