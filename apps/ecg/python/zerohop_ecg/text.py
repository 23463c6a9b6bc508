"""CSV files as labs send them: compressed (gzip, bzip2, xz, zstd: told by their first bytes,
whatever the name) or in UTF-16 or UTF-32 with a byte-order mark. Either is streamed, a
megabyte at a time, into a plain UTF-8 file in a private temporary folder, which the CSV
reader then parses like any other; the folder goes when the job has read it.
"""

from __future__ import annotations

import codecs
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Callable, cast

from .errors import EcgInputError

CHUNK = 1 << 20

#: First bytes → (what it is, how to open it as a binary stream of the plain file).
MAGIC: list[tuple[bytes, str]] = [
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
]

#: Byte-order marks, longest first (UTF-32 LE starts like UTF-16 LE).
BOMS: list[tuple[bytes, str]] = [
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
]


def _opener(kind: str, where: str) -> Callable[[Path], IO[bytes]]:
    if kind == "gzip":
        import gzip

        return lambda p: cast(IO[bytes], gzip.open(p, "rb"))
    if kind == "bzip2":
        import bz2

        return lambda p: cast(IO[bytes], bz2.open(p, "rb"))
    if kind == "xz":
        import lzma

        return lambda p: cast(IO[bytes], lzma.open(p, "rb"))
    try:
        import zstandard
    except ImportError:
        raise EcgInputError(f"{where}: the file is zstd-compressed; install zstandard (pip "
                            f"install zstandard) or decompress it first (zstd -d)") from None
    return lambda p: zstandard.ZstdDecompressor().stream_reader(open(p, "rb"), closefd=True)


def _kind(head: bytes) -> str | None:
    return next((kind for magic, kind in MAGIC if head.startswith(magic)), None)


def _encoding(head: bytes) -> str | None:
    return next((enc for bom, enc in BOMS if head.startswith(bom)), None)


@contextlib.contextmanager
def plain_text(path: Path, where: str, say: Callable[[str], object],
               encoding: str | None = None) -> Iterator[Path]:
    """`path` itself when it is plain UTF-8 (or ASCII) text; otherwise a decompressed and/or
    re-encoded UTF-8 copy, made by streaming, that lives for the `with` block. `encoding`
    names the text's codec where no byte-order mark does (cp1252, latin-1, ...)."""
    if encoding is not None:
        try:
            encoding = codecs.lookup(encoding).name
        except LookupError:
            raise EcgInputError(f"--encoding {encoding}: not a text encoding Python knows "
                                f"(cp1252, latin-1, utf-8, ...)") from None
        if encoding == "utf-8":
            encoding = None
    with open(path, "rb") as f:
        head = f.read(8)
    kind = _kind(head)
    if kind is None and encoding is None and _encoding(head) in (None, "utf-8-sig"):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="zerohop-csv-") as room:
        plain = Path(room) / (path.name + ".utf8.csv")
        source = _opener(kind, where)(path) if kind else open(path, "rb")
        try:
            with source, open(plain, "wb") as out:
                first = source.read(CHUNK)
                marked = _encoding(first[:8])
                if marked is not None:  # a byte-order mark outranks --encoding
                    encoding = None if marked == "utf-8-sig" else marked
                if encoding is None:
                    out.write(first)
                    shutil.copyfileobj(source, out, CHUNK)
                else:
                    decoder = codecs.getincrementaldecoder(encoding)()
                    bom = next((b for b, e in BOMS if e == marked), b"") if marked else b""
                    chunk = first[len(bom):]
                    while True:
                        out.write(decoder.decode(chunk, final=not chunk).encode("utf-8"))
                        if not chunk:
                            break
                        chunk = source.read(CHUNK)
        except (OSError, EOFError, UnicodeDecodeError, ValueError) as error:
            raise EcgInputError(f"{where}: could not read it as {kind or encoding} "
                                f"({error})") from None
        said = [f"{kind}-compressed" if kind else None,
                f"{encoding.upper()} text" if encoding is not None else None]
        say(f"{where}: {' '.join(s for s in said if s)}, read as plain UTF-8 "
            f"({plain.stat().st_size:,} bytes)")
        yield plain
