#!/usr/bin/env python3
"""The verdict on a valgrind memcheck log, for scripts/valgrind-*.sh.

    valgrind-verdict.py LOG LABEL

Runtimes (CPython, libtorch, the loader) report known, harmless errors under valgrind, so the
verdict looks at what matters here: an error whose stack passes through zerohop (its Python
extension, its Rust crates or its C ABI), and any invalid write, invalid free, mismatched free
or overlapping copy anywhere. Exits 1 when there is one, printing the first few.
"""

import re
import sys

ERROR = re.compile(r"(Invalid|Conditional|Use of|Mismatched|Syscall|Source and destination)")
SERIOUS = re.compile(r"Invalid (write|free)|Mismatched free|Source and destination overlap")
OURS = re.compile(r"_zerohop|zerohop::|zerohop_capi|\bzh_")


def records(path):
    current = []
    for line in open(path, errors="replace"):
        body = re.sub(r"^==\d+== ?", "", line.rstrip("\n"))
        if body:
            current.append(body)
        elif current:
            yield current
            current = []
    if current:
        yield current


def main():
    log, label = sys.argv[1], sys.argv[2]
    errors = [r for r in records(log) if ERROR.match(r[0])]
    serious = [r for r in errors if any(OURS.search(line) for line in r) or SERIOUS.match(r[0])]
    print(f"valgrind ({label}): {len(errors)} error records, {len(serious)} in zerohop or serious")
    for r in serious[:5]:
        print("\n".join(r[:25]), "\n")
    return 1 if serious else 0


if __name__ == "__main__":
    sys.exit(main())
