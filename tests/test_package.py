"""The package as a user meets it: submodules reachable from `import zerohop`, lazily (no torch
imported by `import zerohop`), the tour's honest output without torch, and a wheel that holds the
library only (the ECG app is its own package, apps/ecg)."""

import subprocess
import sys

import zerohop


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=300).stdout.strip()


def test_submodules_are_attributes_of_the_package():
    for name in ("memory", "cuda", "tour"):
        assert getattr(zerohop, name).__name__ == f"zerohop.{name}"
        assert name in dir(zerohop)
    assert zerohop.memory.System is not None


def test_a_missing_attribute_is_an_attribute_error():
    try:
        zerohop.nonexistent
    except AttributeError as err:
        assert "nonexistent" in str(err)
    else:
        raise AssertionError("no AttributeError")


def test_importing_zerohop_and_its_submodules_never_imports_torch():
    code = ("import sys, zerohop; loaded = 'zerohop.memory' in sys.modules; zerohop.cuda; "
            "zerohop.memory; print(loaded, 'torch' in sys.modules)")
    assert run(code) == "False False"


def test_the_installed_library_holds_no_ecg_module():
    """The wheel packs the package folder (maturin's python-source) and the extension: no file
    there is an ECG module, kernel or recording, and the extension has no ECG functions;
    `zerohop.ecg` points to the app's package."""
    from pathlib import Path

    folder = Path(zerohop.__file__).parent
    packed = [p.relative_to(folder).as_posix() for p in folder.rglob("*")
              if "__pycache__" not in p.parts]
    assert "__init__.py" in packed and any(p.startswith("_zerohop.") for p in packed), packed
    assert not [p for p in packed if "ecg" in p.lower()]
    assert not hasattr(zerohop._zerohop, "ecg")
    try:
        zerohop.ecg
    except AttributeError as err:
        assert "zerohop-ecg" in str(err) and "zerohop_ecg" in str(err)
    else:
        raise AssertionError("zerohop.ecg should point to the app")


def test_the_tour_does_not_claim_torch_ran_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import zerohop.tour as t; t.main()")
    out = run(code)
    assert "torch not installed, so not multiplied" in out
    assert "x10" not in out


def elf_sections(data):
    """The section names of a 64-bit little-endian ELF file."""
    import struct

    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [data[shoff + i * entsize:shoff + (i + 1) * entsize] for i in range(count)]
    names_at, = struct.unpack_from("<Q", headers[names_index], 0x18)
    found = []
    for header in headers:
        start = names_at + struct.unpack_from("<I", header, 0)[0]
        found.append(data[start:data.index(b"\0", start)].decode())
    return found


def test_the_extension_keeps_its_symbols_and_stays_small():
    """Release builds keep the symbol table (named Rust frames) but no debug info: the
    extension compresses (as in a wheel) to well under 15 MB."""
    import zlib
    from pathlib import Path

    library = Path(zerohop._zerohop.__file__).read_bytes()
    sections = elf_sections(library)
    assert ".symtab" in sections, f"stripped of its symbol table: {sections}"
    assert not [s for s in sections if s.startswith(".debug_")], "debug info: a ~55 MB wheel"
    assert len(zlib.compress(library, 6)) < 15e6
