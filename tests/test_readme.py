"""The README's code examples are tested code.

Every fenced block of README.md is one of:

- ```python: run as a script of its own with this interpreter (skipped only when it imports
  torch and torch is missing);
- ```c, ```cpp, ```rust: an excerpt of an example that `make test` compiles and runs. The
  block's first line is a comment naming that file (`/* from examples/c/smoke.c */`,
  `// from examples/rust-consumer/src/main.rs`); every other line must be the file's, in
  order and consecutive, leading whitespace aside. A line that is only `/* ... */` or
  `// ...` marks lines left out;
- ```sh, ```bash, ```text (or no language): commands and listings, not run.

Any other language fails, so that a new kind of block gets a check before it gets in.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 200

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SOURCE = re.compile(r"^\s*(?:/\*|//)\s*from\s+(\S+?)(?:\s*\*/)?\s*$")
ELISION = re.compile(r"^\s*(?:/\*\s*\.\.\.\s*\*/|//\s*\.\.\.)\s*$")
EXCERPTED = {"c", "cpp", "c++", "rust"}
NOT_RUN = {"sh", "bash", "console", "shell", "text", ""}

# Example sources that `make test` compiles and runs (`make cpp-example`: examples/cpp/run.sh
# and examples/install-consumer/run.sh; the Makefile runs examples/rust-consumer).
TESTED_GLOBS = (
    "examples/c/*.c",
    "examples/cpp/*.cpp",
    "examples/rust-consumer/src/main.rs",
    "examples/install-consumer/*",
)
# Timed by `make bench` (examples/cpp/run.sh bench), not run by `make test`.
NOT_IN_MAKE_TEST = {"examples/cpp/map_bench.cpp"}
# Where `make test` names them; a file none of these mention is not compiled there.
BUILD_SCRIPTS = ("Makefile", "examples/cpp/run.sh", "examples/install-consumer/run.sh",
                 "examples/install-consumer/CMakeLists.txt")


# scripts/gpu-check.sh runs the suite from a copy holding tests/, docs/ and README.md only:
# the checks against the examples and the header need the whole tree.
needs_tree = pytest.mark.skipif(not (ROOT / "examples").is_dir() or
                                not (ROOT / "include").is_dir(),
                                reason="needs the repository's examples/ and include/")


def blocks():
    text = README.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1).lower(), match.group(2)


def block_ids(kinds):
    return [pytest.param(code, id=f"README.md:{line}") for line, lang, code in blocks()
            if lang in kinds]


def sources_make_test_runs():
    build = "\n".join((ROOT / s).read_text(encoding="utf-8") for s in BUILD_SCRIPTS)
    found = set()
    for pattern in TESTED_GLOBS:
        for path in ROOT.glob(pattern):
            rel = path.relative_to(ROOT).as_posix()
            named = path.name in build or rel.rsplit("/src/", 1)[0] in build
            if path.is_file() and named and rel not in NOT_IN_MAKE_TEST:
                found.add(rel)
    return found


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_LINES, f"README.md has {lines} lines; the front page stays under {MAX_LINES}"


def test_every_block_has_a_known_kind():
    found = [(line, lang) for line, lang, _ in blocks()]
    assert any(lang == "python" for _, lang in found), "the README shows no Python example"
    unknown = [(line, lang) for line, lang in found
               if lang not in EXCERPTED | NOT_RUN | {"python"}]
    assert not unknown, f"blocks of a language this test does not check: {unknown}"


@pytest.mark.parametrize("code", block_ids({"python"}))
def test_python_example_runs(code, tmp_path):
    if re.search(r"^\s*(import|from)\s+torch\b|import .*\btorch\b", code, re.M) and \
            importlib.util.find_spec("torch") is None:
        pytest.skip("the example needs torch")
    script = tmp_path / "readme_example.py"
    script.write_text(code, encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def excerpt_chunks(code):
    """The block's source file and its lines in runs between elision marks."""
    lines = code.splitlines()
    assert lines, "an empty block"
    source = SOURCE.match(lines[0])
    assert source, (f"the block's first line must name the example it quotes, as "
                    f"'// from examples/…' or '/* from examples/… */'; it is {lines[0]!r}")
    chunks, current = [], []
    for line in lines[1:]:
        if ELISION.match(line):
            if current:
                chunks.append(current)
            current = []
        elif line.strip():
            current.append(line.strip())
    if current:
        chunks.append(current)
    return source.group(1), chunks


def find_in_order(haystack, chunks):
    """Index of the first chunk that is not a consecutive run of `haystack` after the
    previous one, or None when all are."""
    at = 0
    for i, chunk in enumerate(chunks):
        for start in range(at, len(haystack) - len(chunk) + 1):
            if haystack[start:start + len(chunk)] == chunk:
                at = start + len(chunk)
                break
        else:
            return i
    return None


@needs_tree
@pytest.mark.parametrize("code", block_ids(EXCERPTED))
def test_compiled_example_is_quoted_verbatim(code):
    source, chunks = excerpt_chunks(code)
    assert source in sources_make_test_runs(), (
        f"{source} is not an example `make test` compiles and runs "
        f"(one of {sorted(sources_make_test_runs())})")
    assert chunks, "the block quotes nothing"
    file_lines = [line.strip() for line in (ROOT / source).read_text(encoding="utf-8")
                  .splitlines() if line.strip()]
    bad = find_in_order(file_lines, chunks)
    assert bad is None, (f"these lines are not {source}'s, in this order and consecutive "
                         f"(has the example changed?):\n" + "\n".join(chunks[bad]))


@needs_tree
def test_c_examples_call_only_what_the_header_declares():
    header = (ROOT / "include" / "zerohop.h").read_text(encoding="utf-8")
    declared = set(re.findall(r"\b(zh_\w+)\s*\(", header))
    for line, lang, code in blocks():
        if lang in {"c", "cpp", "c++"}:
            called = set(re.findall(r"\b(zh_\w+)\s*\(", code))
            assert called <= declared, f"README.md:{line} calls {sorted(called - declared)}"


def test_local_links_resolve():
    text = README.read_text(encoding="utf-8")
    text = FENCE.sub("", text)
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:|^#", target):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_excerpt_checker_catches_an_edit():
    """The checker itself: an altered, reordered or foreign line fails."""
    haystack = ["a", "b", "c", "d"]
    assert find_in_order(haystack, [["a", "b"], ["d"]]) is None
    assert find_in_order(haystack, [["a", "c"]]) == 0       # not consecutive
    assert find_in_order(haystack, [["c"], ["a"]]) == 1     # out of order
    assert find_in_order(haystack, [["b", "x"]]) == 0       # not in the file
    source, chunks = excerpt_chunks("// from examples/x.rs\n  a\n// ...\nb\n")
    assert source == "examples/x.rs" and chunks == [["a"], ["b"]]
