#!/usr/bin/env bash
# zerohop's C ABI under valgrind's memcheck: the C smoke test must be spotless (no errors, no
# leaks); the libtorch example must have no error in zerohop's frames and no invalid write or
# free anywhere (libtorch's own start-up noise is reported, not fatal). Needs the binaries of
# examples/cpp/run.sh (target/cpp-example). Loud skip without valgrind.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${ZEROHOP_PREBUILT:-target/cpp-example}
LOG=${VALGRIND_LOG:-out/valgrind-capi.log}
mkdir -p "$(dirname "$LOG")"
if ! command -v valgrind >/dev/null; then
  echo "################################################################"
  echo "## WARNING: valgrind is not installed; the C ABI memcheck was SKIPPED"
  echo "################################################################"
  exit 0
fi
echo "valgrind memcheck: the C smoke test and layout example (errors and leaks fatal)"
valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --error-exitcode=99 -q "$OUT/smoke" > /dev/null
smoke=$?
[ $smoke -eq 0 ] || echo "valgrind: the C smoke test has memory errors or leaks (exit $smoke)"
valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --error-exitcode=99 -q "$OUT/layout" 1000 7 > /dev/null
layout=$?
[ $layout -eq 0 ] || echo "valgrind: the C layout example has memory errors or leaks (exit $layout)"
valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --error-exitcode=99 -q "$OUT/blocks" > /dev/null
blocks=$?
[ $blocks -eq 0 ] || echo "valgrind: the C blocks example has memory errors or leaks (exit $blocks)"

echo "valgrind memcheck: the libtorch example, 64 rows (about a minute)"
valgrind --tool=memcheck --leak-check=no --num-callers=40 --log-file="$LOG" \
  "$OUT/soa_inference" "$OUT/track_scorer.pt" cpu 64 > /dev/null
example=$?
[ $example -eq 0 ] || echo "the libtorch example failed under valgrind (exit $example)"
python3 scripts/valgrind-verdict.py "$LOG" "libtorch example"
verdict=$?
exit $(( smoke != 0 || layout != 0 || blocks != 0 || example != 0 || verdict != 0 ))
