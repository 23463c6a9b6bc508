#!/usr/bin/env bash
# The Python tests that drive the extension with NumPy alone (DLPack protocol, NumPy
# round trips, memory resources and hooks) under valgrind's memcheck, once.
#
# CPython and glibc's loader report known, harmless "uninitialised value" and dl-load reads
# under valgrind, so the verdict looks at what matters here: any error whose stack passes
# through the zerohop extension, and any invalid write, invalid free or mismatched free
# anywhere. The full log is kept in $VALGRIND_LOG.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOG=${VALGRIND_LOG:-out/valgrind.log}
TESTS=${VALGRIND_TESTS:-tests/test_protocol.py tests/test_numpy.py tests/test_memory.py}
mkdir -p "$(dirname "$LOG")"
if ! command -v valgrind >/dev/null; then
  echo "################################################################"
  echo "## WARNING: valgrind is not installed; the memcheck run was SKIPPED"
  echo "################################################################"
  exit 0
fi
echo "valgrind memcheck: $TESTS (a few minutes)"
# PYTHONMALLOC=malloc: every Python allocation goes through malloc, so valgrind sees it.
# ZEROHOP_TEST_NUMPY_ONLY=1: the tests' conftest leaves torch and JAX unimported (importing
# torch alone takes three minutes under memcheck).
ZEROHOP_TEST_NUMPY_ONLY=1 PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=no --num-callers=40 \
  --log-file="$LOG" "$PY" -m pytest -q -p no:cacheprovider $TESTS
tests=$?
"$PY" scripts/valgrind-verdict.py "$LOG" "pytest"
verdict=$?
[ $tests -eq 0 ] || echo "the tests failed under valgrind"
exit $(( tests != 0 || verdict != 0 ))
