#!/usr/bin/env bash
# Installs zerohop's C library the way C and C++ projects expect a library (`make install`):
#   PREFIX/lib/libzerohop_capi.so (-> its SONAME link -> the versioned file), libzerohop_capi.a
#   PREFIX/include/zerohop.h, zerohop_torch.h
#   PREFIX/lib/pkgconfig/zerohop.pc (shared), zerohop-static.pc (the archive)
#   PREFIX/lib/cmake/zerohop/zerohopConfig.cmake, zerohopConfigVersion.cmake
#
#   scripts/install.sh [PREFIX]     PREFIX defaults to $PREFIX, else /usr/local; DESTDIR stages.
#
# The .pc and CMake files name no absolute path: both find the prefix from where they lie, so
# the installed tree may be moved as a whole (conda and spack relocate prefixes).
# Needs cargo for a release build of zerohop-capi, and no Python or CMake. NO_BUILD=1 installs
# what an earlier build left in the target folder (`make install` then `sudo make install
# NO_BUILD=1` where root has no cargo). ZEROHOP_CAPI_LIB=FILE installs that prebuilt shared
# library and no archive (the GPU machine has no cargo: examples/cpp/run.sh there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${1:-${PREFIX:-/usr/local}}
DESTDIR=${DESTDIR:-}
die() { echo "install.sh: $*" >&2; exit 1; }

if [[ $PREFIX != /* ]]; then
  [[ -z $DESTDIR ]] || die "PREFIX must be absolute with DESTDIR (got '$PREFIX')"
  PREFIX=$PWD/$PREFIX
fi

# What the Rust standard library in libzerohop_capi.a needs from the system, as
# `cargo rustc -p zerohop-capi --release -- --print native-static-libs` lists it on Linux.
# examples/install-consumer/run.sh links a program with the archive and these alone.
NATIVE_LIBS="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
[[ -n $VERSION ]] || die "no version in $ROOT/Cargo.toml"

if [[ -n ${ZEROHOP_CAPI_LIB:-} ]]; then
  SHARED=$ZEROHOP_CAPI_LIB
  STATIC=
else
  if [[ ${NO_BUILD:-0} != 1 ]]; then
    (cd "$ROOT" && cargo build -q --release -p zerohop-capi)
  fi
  BUILT=${CARGO_TARGET_DIR:-$ROOT/target}/release
  SHARED=$BUILT/libzerohop_capi.so
  STATIC=$BUILT/libzerohop_capi.a
  [[ -f $STATIC ]] || die "$STATIC is missing (build first: cargo build --release -p zerohop-capi)"
fi
[[ -f $SHARED ]] || die "$SHARED is missing (build first: cargo build --release -p zerohop-capi)"

DEST=$DESTDIR$PREFIX
LIB=$DEST/lib
install -d "$LIB/pkgconfig" "$LIB/cmake/zerohop" "$DEST/include"

# The file carries the full version; its SONAME (crates/zerohop-capi/build.rs: .so.0.MINOR
# before 1.0, whose minor versions may change the ABI; .so.MAJOR after), which programs linked
# to it record, and the bare name the linker looks for are links to it.
MAJOR=${VERSION%%.*}
MINOR=${VERSION#*.}
MINOR=${MINOR%%.*}
SONAME=libzerohop_capi.so.$([[ $MAJOR == 0 ]] && echo "0.$MINOR" || echo "$MAJOR")
if command -v readelf >/dev/null; then
  BUILT_SONAME=$(readelf -d "$SHARED" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
  [[ $BUILT_SONAME == "$SONAME" ]] \
    || die "$SHARED has SONAME '$BUILT_SONAME', not $SONAME (see crates/zerohop-capi/build.rs)"
fi
install -m 755 "$SHARED" "$LIB/libzerohop_capi.so.$VERSION"
ln -sfn "libzerohop_capi.so.$VERSION" "$LIB/$SONAME"
ln -sfn "$SONAME" "$LIB/libzerohop_capi.so"
[[ -z $STATIC ]] || install -m 644 "$STATIC" "$LIB/libzerohop_capi.a"

install -m 644 "$ROOT/include/zerohop.h" "$ROOT/include/zerohop_torch.h" "$DEST/include/"

TEMPLATES=$ROOT/crates/zerohop-capi
# CMake wants the libraries as a list of names, not linker flags.
CMAKE_LIBS=$(sed -e 's/-l//g' -e 's/ /;/g' <<< "$NATIVE_LIBS")
fill() {
  sed -e "s#@VERSION@#$VERSION#g" -e "s#@NATIVE_LIBS@#$NATIVE_LIBS#g" \
    -e "s#@NATIVE_LIBS_CMAKE@#$CMAKE_LIBS#g" "$TEMPLATES/$1" > "$2"
  chmod 644 "$2"
}
fill zerohop.pc.in "$LIB/pkgconfig/zerohop.pc"
fill zerohop-static.pc.in "$LIB/pkgconfig/zerohop-static.pc"
fill zerohopConfig.cmake.in "$LIB/cmake/zerohop/zerohopConfig.cmake"
fill zerohopConfigVersion.cmake.in "$LIB/cmake/zerohop/zerohopConfigVersion.cmake"
echo "zerohop $VERSION installed in $DEST${STATIC:+ (shared and static)}"
