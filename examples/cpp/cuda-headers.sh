#!/usr/bin/env bash
# Unpacks the CUDA runtime's headers (cuda_runtime_api.h and crt/, from PyPI's
# nvidia-cuda-runtime and nvidia-cuda-crt wheels) into DEST and prints their include folder.
# The torch wheel ships libtorch's headers but not these, and the C++ example's libtorch
# allocator hook (torch_cuda_allocator.cpp) includes them.
#   examples/cpp/cuda-headers.sh DEST [CUDA_VERSION]   (default: the CUDA that PY's torch was
#   built with; the GPU machine has no network, so gpu-check.sh carries them from here)
set -euo pipefail
DEST=$1
PY=${PY:-python3}
VERSION=${2:-$("$PY" -c 'import torch; print(torch.version.cuda or "")')}
if [[ -z $VERSION ]]; then
  echo "cuda-headers.sh: $PY's torch is a CPU build, so there is no CUDA version to match" >&2
  exit 1
fi
found() { find "$DEST" -name cuda_runtime_api.h -printf '%h\n' 2>/dev/null | head -1 || true; }
INC=$(found)
if [[ -z $INC || ! -f $INC/crt/host_defines.h ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$PY" -m pip download -q --no-deps -d "$tmp" \
    "nvidia-cuda-runtime==$VERSION.*" "nvidia-cuda-crt==$VERSION.*"
  # Only the headers: the wheels' libraries are the GPU machine's own business.
  "$PY" - "$DEST" "$tmp"/*.whl <<'PYEOF'
import sys, zipfile
dest, wheels = sys.argv[1], sys.argv[2:]
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest, [n for n in z.namelist() if "/include/" in n])
PYEOF
  INC=$(found)
fi
[[ -n $INC && -f $INC/crt/host_defines.h ]] || { echo "cuda-headers.sh: no headers in $DEST" >&2; exit 1; }
echo "$INC"
