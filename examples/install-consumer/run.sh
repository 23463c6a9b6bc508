#!/usr/bin/env bash
# zerohop installed like any library, then used as a project outside this tree would use it:
# `make install` into a staging DESTDIR, the staged prefix moved elsewhere (conda and spack
# relocate prefixes), and from the moved prefix alone C and C++ programs are built with
# pkg-config (PKG_CONFIG_PATH) and with CMake (find_package, CMAKE_PREFIX_PATH), against the
# shared library and the archive, then run. `make cpp-example` (so `make test`) calls this.
#   examples/install-consumer/run.sh    PY=python with torch (default .venv/bin/python): the
#                                       libtorch of the zerohop_torch.h consumer; cmake on PATH
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
WORK=$ROOT/target/install-check
FAILED=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILED=1; }
command -v cmake >/dev/null || { echo "FAIL no cmake on PATH (the venv's: make venv)"; exit 1; }
command -v pkg-config >/dev/null || { echo "FAIL no pkg-config on PATH"; exit 1; }

rm -rf "$WORK"
# The prefix it is installed for is not where it ends up: nothing may depend on it.
make -s --no-print-directory -C "$ROOT" install PREFIX=/opt/zerohop DESTDIR="$WORK/stage"
mkdir -p "$WORK/moved"
mv "$WORK/stage/opt/zerohop" "$WORK/moved/zerohop"
P=$WORK/moved/zerohop
for f in include/zerohop.h include/zerohop_torch.h lib/libzerohop_capi.so lib/libzerohop_capi.a \
  lib/pkgconfig/zerohop.pc lib/pkgconfig/zerohop-static.pc lib/cmake/zerohop/zerohopConfig.cmake \
  lib/cmake/zerohop/zerohopConfigVersion.cmake; do
  [[ -e $P/$f ]] || fail "installed: $f is missing"
done
SONAME=$(readelf -d "$P/lib/libzerohop_capi.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [[ $SONAME == libzerohop_capi.so.* && -L $P/lib/$SONAME && -L $P/lib/libzerohop_capi.so ]]; then
  ok "libzerohop_capi.so -> $SONAME -> $(readlink "$P/lib/$SONAME")"
else
  fail "the shared library's SONAME ('$SONAME') and its links"
fi
if grep -rl -e "$ROOT" -e /opt/zerohop "$P/lib/pkgconfig" "$P/lib/cmake"; then
  fail "the files above name the build tree or the install prefix"
else
  ok "the .pc and CMake files name no absolute path"
fi

# What each program must print: the installed package's version.
export PKG_CONFIG_PATH=$P/lib/pkgconfig
VERSION=$(pkg-config --modversion zerohop)
# Runs a program; it must succeed, print the version, and load zerohop from $P (shared) or not
# load it at all (static).
check_run() { # NAME BINARY shared|static
  local out needed
  if ! out=$("$2" 2>&1); then fail "$1: $out"; return; fi
  [[ $out == "zerohop $VERSION:"* ]] || { fail "$1 printed '$out', not zerohop $VERSION"; return; }
  needed=$(readelf -d "$2" | grep -c 'NEEDED.*libzerohop_capi' || true)
  if [[ $3 == static && $needed != 0 ]]; then fail "$1 needs libzerohop_capi.so"; return; fi
  # ldd's whole output first: `ldd | grep -q` under pipefail fails whenever grep exits at its
  # match before ldd has written the rest (ldd then dies of SIGPIPE), one run in a few.
  if [[ $3 == shared ]]; then
    local loaded
    loaded=$(ldd "$2")
    if ! grep -q "libzerohop_capi.so.* => $P/lib/" <<<"$loaded"; then
      fail "$1 does not load zerohop from $P/lib: $(grep zerohop <<<"$loaded")"
      return
    fi
  fi
  ok "$1 ($3): $out"
}

echo "== pkg-config (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
B=$WORK/pkg-config
mkdir -p "$B"
read -r -a SHARED <<< "$(pkg-config --cflags --libs zerohop)"
read -r -a STATIC <<< "$(pkg-config --cflags --libs zerohop-static)"
gcc -std=c11 -Wall -Wextra -Werror "$HERE/consumer.c" "${SHARED[@]}" -o "$B/consumer"
gcc -std=c11 -Wall -Wextra -Werror "$HERE/consumer.c" "${STATIC[@]}" -o "$B/consumer_static"
g++ -std=c++17 -Wall -Wextra -Werror "$HERE/consumer.cpp" "${SHARED[@]}" -o "$B/consumer_cpp"
check_run "C, pkg-config zerohop" "$B/consumer" shared
check_run "C, pkg-config zerohop-static" "$B/consumer_static" static
check_run "C++, pkg-config zerohop" "$B/consumer_cpp" shared

echo "== CMake find_package(zerohop) (CMAKE_PREFIX_PATH=$P)"
TORCH=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
B=$WORK/cmake
if cmake -S "$HERE" -B "$B" -DCMAKE_PREFIX_PATH="$P" -DTORCH_ROOT="$TORCH" \
    > "$WORK/cmake.log" 2>&1 && cmake --build "$B" -j 2 >> "$WORK/cmake.log" 2>&1; then
  found=$(sed -n 's/^zerohop_DIR:PATH=//p' "$B/CMakeCache.txt")
  [[ $found == "$P/lib/cmake/zerohop" ]] && ok "found in $found" || fail "found in '$found'"
  check_run "C, zerohop::zerohop" "$B/consumer" shared
  check_run "C, zerohop::zerohop_static" "$B/consumer_static" static
  check_run "C++, zerohop::zerohop" "$B/consumer_cpp" shared
  check_run "C++ with libtorch and zerohop_torch.h" "$B/torch_consumer" shared
else
  cat "$WORK/cmake.log"
  fail "the CMake consumers did not build"
fi
[[ $FAILED == 0 ]] || { echo "FAILED: zerohop as an installed library"; exit 1; }
echo "zerohop as an installed library: every consumer built and ran"
