#!/usr/bin/env bash
# Builds the documentation site (mkdocs.yml, docs/ → site/) with every MkDocs warning an
# error: `mkdocs build --strict`, non-zero exit on any warning.
#   PY                   the interpreter whose environment has requirements-docs.txt and
#                        zerohop installed (default .venv/bin/python); the API reference
#                        imports zerohop. Install the tools once:
#                        $PY -m pip install -r requirements-docs.txt
#   DOCS_RUN_EXAMPLES=1  also run every ```python block of the docs pages written for the
#                        site (each as its own script, in a scratch folder), skipping blocks
#                        whose title says "not run"; processes.md and hostile-inputs.md are
#                        checked by tests/ instead. Needs torch, JAX, pyarrow and polars.
# Extra arguments go to mkdocs (e.g. --quiet).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if ! "$PY" -c 'import mkdocs, material, mkdocstrings_handlers.python' 2>/dev/null; then
  echo "docs-build: $PY lacks the docs tools; run: $PY -m pip install -r requirements-docs.txt" >&2
  exit 1
fi
# Material's notice about its end of life is not a warning about these docs.
export NO_MKDOCS_2_WARNING=1
"$PY" -m mkdocs build --strict "$@"

if [ "${DOCS_RUN_EXAMPLES:-0}" = 1 ]; then
  "$PY" - docs/*.md <<'PYEOF'
import pathlib, re, subprocess, sys, tempfile

SKIP_PAGES = {"processes.md", "hostile-inputs.md"}  # their examples are run by tests/
FENCE = re.compile(r"^```(python[^\n]*)\n(.*?)^```", re.S | re.M)
ran = failed = 0
for page in map(pathlib.Path, sys.argv[1:]):
    if page.name in SKIP_PAGES:
        continue
    text = page.read_text()
    for block in FENCE.finditer(text):
        info, code = block.groups()
        line = text.count("\n", 0, block.start()) + 1
        if "not run" in info:
            print(f"skipped {page}:{line} ({info})")
            continue
        with tempfile.TemporaryDirectory() as scratch:
            script = pathlib.Path(scratch) / "example.py"
            script.write_text(code)
            run = subprocess.run([sys.executable, str(script)], cwd=scratch,
                                 capture_output=True, text=True, timeout=600)
        ran += 1
        if run.returncode != 0:
            failed += 1
            print(f"FAILED {page}:{line}\n{(run.stdout + run.stderr)[-3000:]}")
print(f"docs examples: {ran - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PYEOF
fi
