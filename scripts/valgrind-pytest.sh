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
PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=no --num-callers=40 \
  --log-file="$LOG" "$PY" -m pytest -q -p no:cacheprovider $TESTS
tests=$?
"$PY" - "$LOG" <<'PY'
import re, sys

records, current = [], []
for line in open(sys.argv[1], errors="replace"):
    body = re.sub(r"^==\d+== ?", "", line.rstrip("\n"))
    if not body:
        if current:
            records.append(current)
        current = []
    else:
        current.append(body)
if current:
    records.append(current)
errors = [r for r in records if r and re.match(r"(Invalid|Conditional|Use of|Mismatched|Syscall|Source and destination)", r[0])]
serious = [r for r in errors
           if any("_zerohop" in l or "zerohop::" in l for l in r)
           or re.match(r"Invalid (write|free)|Mismatched free|Source and destination overlap", r[0])]
print(f"valgrind: {len(errors)} error records, {len(serious)} in zerohop or serious")
for r in serious[:5]:
    print("\n".join(r[:25]), "\n")
sys.exit(1 if serious else 0)
PY
verdict=$?
[ $tests -eq 0 ] || echo "the tests failed under valgrind"
exit $(( tests != 0 || verdict != 0 ))
