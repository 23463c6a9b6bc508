#!/usr/bin/env python3
"""Writes docs/benchmarks.md, the site's page of measurements, from bench/results/*.md.

Every results file becomes one entry, newest first: by the date in its file name (or, for
the files named without one, the first date written in it), then by name. Each entry gives
its date, the machine it was measured on and the file's title, then the file's own text with
its headings moved below the entry's. The page is generated: edit the results files, not
the page, and run this script again (tests/test_benchmarks_page.py fails while the page and
the results disagree).

    python scripts/benchmarks-page.py            # (re)write docs/benchmarks.md
    python scripts/benchmarks-page.py --check    # exit 1 if docs/benchmarks.md is stale
    python scripts/benchmarks-page.py --stdout   # print the page instead
"""

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"

DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")
# gpu-h200-2026-11-27-…, gpu-h100x2-2026-11-25-…: the device, and how many of it.
NAMED_GPU = re.compile(r"^gpu-(h100|h200)(?:x(\d+))?-")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")

# Files whose name carries no machine and whose first lines name more than one (or name one
# in passing, as a kind that "was lent" but not used). Read from each file's opening lines.
MACHINES = {
    "capi.md": "2-core x86_64 (this repository's machine)",
    "cpu-kernels-2026-11-26-session8.md": "2-core VM; an H100 host's 16-core CPU",
    "cpu-layers-2026-11-26-session7.md": "2-core VM; an H100 host's 16-core CPU",
    "gpu-2026-11-26-session4.md": "NVIDIA H200 or H100 hosts (each line says which), 16 cores",
    "gpu-2026-11-26-session5.md": "NVIDIA H100, 16 cores",
    "gpu-2026-11-26-session6.md": "NVIDIA H100, 16 cores",
    "gpu-h200-2026-11-26-session3.md": "2 × NVIDIA H200, then one",
    "ipc_cuda.md": "a CUDA host, 16 cores (the GPU is not named in the file)",
    "tch_map.md": "2-core x86_64 (this repository's machine)",
}


@dataclass
class Entry:
    name: str
    date: str | None  # YYYY-MM-DD
    date_in_name: bool
    machine: str
    title: str
    body: str

    @property
    def anchor(self) -> str:
        return "r-" + re.sub(r"[^a-z0-9]+", "-", Path(self.name).stem.lower()).strip("-")


def _opening(text: str, lines: int = 6) -> str:
    """The first lines of a file, up to its first table or second heading."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith("|") or (kept and line.startswith("#")):
            break
        kept.append(line)
        if len(kept) >= lines:
            break
    return "\n".join(kept)


def machine_of(name: str, text: str) -> str:
    if name in MACHINES:
        return MACHINES[name]
    match = NAMED_GPU.match(name)
    if match:
        count = f"{match.group(2)} × " if match.group(2) else ""
        return f"{count}NVIDIA {match.group(1).upper()}"
    head = _opening(text)
    gpus = list(dict.fromkeys(re.findall(r"\b(H100|H200)\b", head)))
    cores = list(dict.fromkeys(re.findall(r"\b(\d+)[ -]cores?\b", head)))
    if gpus:
        return "NVIDIA " + " and ".join(gpus) + (f", {cores[0]} cores" if len(cores) == 1 else "")
    if len(cores) == 1:
        return f"{cores[0]}-core x86_64" if "x86_64" in head else f"{cores[0]} cores"
    return "not stated in the file"


def title_of(name: str, text: str) -> tuple[str, list[str]]:
    """The file's title and its lines without it: its first `# ` heading, or else the first
    line's words before a parenthesis or colon (that line is then kept in the body)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip():
            if line.startswith("# "):
                return line[2:].strip(), lines[:i] + lines[i + 1 :]
            short = re.split(r"\s[(:;]|[.:;]\s", line.strip(), maxsplit=1)[0]
            return short.strip() or Path(name).stem, lines
    return Path(name).stem, lines


def _unlink(line: str, name: str) -> str:
    """Relative links in a results file point from bench/results/, which the site does not
    hold: keep their text and name the path instead."""

    def plain(match: re.Match[str]) -> str:
        text, target = match.groups()
        if re.match(r"^(https?:|mailto:|#)", target):
            return match.group(0)
        path = (Path("bench/results") / target).as_posix()
        path = re.sub(r"[^/]+/\.\./", "", path)
        return f"{text} (`{path}`)" if text.strip("`") != path else f"`{path}`"

    return LINK.sub(plain, line)


def body_of(lines: list[str], name: str) -> str:
    """The file's text with its headings two levels down (an entry is a `##`), code blocks
    untouched."""
    out: list[str] = []
    in_code = False
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
            out.append(line)
            continue
        if not in_code:
            heading = HEADING.match(line)
            if heading:
                level = min(6, max(3, len(heading.group(1)) + 1))
                line = "#" * level + " " + heading.group(2)
            else:
                line = _unlink(line, name)
        out.append(line.rstrip())
    if in_code:
        out.append("```")  # an unclosed block would swallow the next entry
    text = "\n".join(out).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def read_entries(results: Path = RESULTS) -> list[Entry]:
    entries = []
    for path in sorted(results.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        named = DATE.search(path.name)
        found = named or DATE.search(text)
        title, rest = title_of(path.name, text)
        entries.append(
            Entry(
                name=path.name,
                date=found.group(1) if found else None,
                date_in_name=named is not None,
                machine=machine_of(path.name, text),
                title=title,
                body=body_of(rest, path.name),
            )
        )
    # Newest first, then by name; undated files last.
    entries.sort(key=lambda e: e.name)
    entries.sort(key=lambda e: e.date or "", reverse=True)
    return entries


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(results: Path = RESULTS) -> str:
    entries = read_entries(results)
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by scripts/benchmarks-page.py from bench/results/*.md: do not edit."
        " Run `python scripts/benchmarks-page.py` after adding or changing a results file. -->",
        "",
        "Every measurement committed to `bench/results/`, newest first. Each entry is one"
        " results file as it was written: its date, the machine it ran on, and its tables."
        " Figures from different machines, or from different runs on the shared 2-core"
        " machine, are not comparable unless an entry says they ran side by side.",
        "",
        "`make bench` reruns the CPU benchmarks and rewrites their files; `scripts/gpu-check.sh`"
        " runs the GPU suite and benches on a GPU machine. This page is generated from those"
        " files by `scripts/benchmarks-page.py`.",
        "",
        "| date | machine | results | file |",
        "|---|---|---|---|",
    ]
    for e in entries:
        date = e.date or "undated"
        if e.date and not e.date_in_name:
            date += " (in the file)"
        out.append(
            f"| {date} | {_cell(e.machine)} | [{_cell(e.title)}](#{e.anchor}) |"
            f" `{e.name}` |"
        )
    for e in entries:
        out += [
            "",
            f"## {e.title} {{#{e.anchor}}}",
            "",
            f"**{e.date or 'undated'}** · {e.machine} · `bench/results/{e.name}`",
            "",
            e.body,
        ]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="fail if the page is stale")
    group.add_argument("--stdout", action="store_true", help="print the page")
    args = parser.parse_args(argv)
    page = render()
    if args.stdout:
        sys.stdout.write(page)
        return 0
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(
                f"{PAGE.relative_to(ROOT)} is out of date with bench/results/: run "
                "python scripts/benchmarks-page.py",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(read_entries())} results files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
