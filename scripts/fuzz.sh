#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), starting from the committed seed
# corpus in fuzz/seeds/<target> and the local working corpus in fuzz/corpus/<target> (new
# inputs land there; it is git-ignored). A crash, leak, timeout or out-of-memory fails the run
# and leaves the input in fuzz/artifacts/<target>/: make it a regression test, then fix it.
#
# Needs the nightly toolchain (AddressSanitizer) and cargo-fuzz; installs cargo-fuzz when it
# is missing, and skips loudly (without failing) when either cannot be had.
# `fuzz.sh build` builds the targets and runs none (make test builds them while the venv
# fills; the run later finds them built).
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD_ONLY=0
[ "$SECONDS_EACH" = build ] && BUILD_ONLY=1
TARGETS=${FUZZ_TARGETS:-"dlpack_import array_interface arrow_import tensormap_spec wire_state csv_reader wfdb_header wfdb_signal wfdb_annotations edf_reader"}

skip() {
  echo "################################################################"
  echo "## WARNING: $1; the fuzz runs were SKIPPED"
  echo "################################################################"
  exit 0
}

rustup run nightly rustc --version >/dev/null 2>&1 || skip "no nightly toolchain"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz (once, about two minutes)"
  cargo install cargo-fuzz --locked -q || skip "cargo-fuzz could not be installed"
fi

cd fuzz
echo "building the fuzz targets (AddressSanitizer, debug assertions on)"
cargo +nightly fuzz build -O || { echo "the fuzz targets did not build"; exit 1; }
[ "$BUILD_ONLY" = 1 ] && exit 0
# Two targets at a time (each fuzzer is one process; the machine has 2 cores): the same
# seconds for every target, half the wall time.
JOBS=${FUZZ_JOBS:-2}
run_one() {
  local t=$1
  mkdir -p "corpus/$t" "seeds/$t"
  # -rss_limit_mb: a target that needs more is a bug (every input is small).
  if cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      > "corpus/$t.log" 2>&1; then
    echo "== fuzz $t for ${SECONDS_EACH}s: $(grep -E "stat::number_of_executed_units|Done" "corpus/$t.log" | tail -1)"
  else
    echo "== fuzz $t FAILED:"
    grep -E "panicked at|ERROR|SUMMARY|Test unit written" -A3 "corpus/$t.log" | head -30
    touch "corpus/$t.failed"
  fi
}
rm -f corpus/*.failed
for t in $TARGETS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  run_one "$t" &
done
wait
failed=()
for t in $TARGETS; do
  [ -e "corpus/$t.failed" ] && failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/corpus/*.log)"
  exit 1
fi
echo "fuzz: every target ran ${SECONDS_EACH}s without a finding"
