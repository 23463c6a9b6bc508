#!/usr/bin/env bash
# Checks zerohop's type information against the runtime with mypy's stubtest and exits
# non-zero on any disagreement (or when mypy finds a type error in what it checks, which
# stops stubtest before it compares anything).
#
#   scripts/stubtest.sh         the extension's stubs (python/zerohop/_zerohop*.pyi) against
#                               the built zerohop._zerohop, and the package's public modules
#                               (zerohop, .memory, .cuda, .tour) and the ECG app's (zerohop_ecg, its
#                               extension _native) against what they
#                               define when imported
#   scripts/stubtest.sh --all   every module of the package, the ECG job's stages too
#   PY=/path/to/python scripts/stubtest.sh    another interpreter (default .venv/bin/python)
#
# Other arguments go to stubtest (--concise, --generate-allowlist, ...).
#
# mypy is told not to follow imports into torch and jax (they are Any to it here): reading
# torch's sources takes it over a minute, and comparing zerohop's definitions with the
# runtime does not need torch's types.
#
# Two shims, both confined to the stubtest process:
# - The extension's `memory` and `cuda` are module objects that PyO3 does not put in
#   sys.modules, so no import name reaches them; their stubs are the stub-only modules
#   zerohop._zerohop_memory and _zerohop_cuda. Before stubtest imports anything,
#   those names are bound in sys.modules to the extension's very objects, so each stub is
#   compared with the object it describes. Nothing else about the runtime is changed.
# - stubtest always adds a package's submodules to the modules named; without --all, it is
#   made to check just the modules named here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

modules=(zerohop zerohop._zerohop zerohop._zerohop_memory
    zerohop._zerohop_cuda zerohop.memory zerohop.cuda zerohop.tour
    zerohop_ecg zerohop_ecg._native)
all=0
if [[ ${1:-} == --all ]]; then
    shift
    all=1
    modules=(zerohop)
fi

config=$(mktemp)
trap 'rm -f "$config"' EXIT
cat >"$config" <<'INI'
[mypy]
[mypy-torch.*,jax.*,jaxlib.*]
follow_imports = skip
INI

MYPYPATH=apps/ecg/python "$PY" - "$all" --mypy-config-file "$config" --allowlist scripts/stubtest-allowlist.txt "$@" \
    "${modules[@]}" <<'PYTHON'
import inspect
import sys

import mypy.stubtest as stubtest

import zerohop._zerohop as extension

for name in ("memory", "cuda"):
    sys.modules[f"zerohop._zerohop_{name}"] = getattr(extension, name)

everything = sys.argv.pop(1) == "1"
if not everything:
    build_stubs = stubtest.build_stubs
    if "find_submodules" not in inspect.signature(build_stubs).parameters:
        sys.exit("scripts/stubtest.sh: this mypy's stubtest.build_stubs takes no "
                 "find_submodules; run with --all, or update the script")

    def build_named_only(modules, options, find_submodules=False):
        return build_stubs(modules, options, find_submodules=False)

    stubtest.build_stubs = build_named_only

sys.exit(stubtest.main())
PYTHON
