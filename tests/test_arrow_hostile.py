"""Arrow producers that lie, through `zerohop.from_arrow`: device arrays whose buffers the host
must not read, children shorter than their parents, lengths no memory holds, negative fixed
sizes, CUDA claims on a machine without CUDA. Each is refused by name and released once; none
is read through. The bad inputs run in a child process, so a crash is a failed test here, not
a dead test run. docs/hostile-inputs.md lists every case id below."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

import zerohop  # noqa: E402
import zerohop.cuda  # noqa: E402

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs" / "hostile-inputs.md"
PRELUDE = f"""
import sys
sys.path.insert(0, {str(TESTS / "gpu")!r})
import numpy as np, pyarrow as pa, zerohop
from arrow_c import *
"""


def outcome(body):
    """Runs `body` after PRELUDE in a fresh interpreter; returns its stdout. A signal or a
    Rust panic fails the test with what the child printed."""
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (
        f"the child died with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    assert "panicked" not in done.stderr, done.stderr
    return done.stdout


CASES = {
    "arrow-device-strings": """
        # cuDF's shape: int32 offsets and utf-8 bytes in memory the host may not read.
        device = Unreadable()
        column = string_column(3, device.address, device.address + 64)
        producer = DeviceProducer(column, pa.utf8())
        try:
            zerohop.from_arrow(producer)
        except ValueError as e:
            print("refused:", e)
        print("released", producer.released)
        floats = Node(3, [None, device.address + 128])
        table = Node(3, [None], [floats, string_column(3, device.address, device.address + 64)])
        producer = DeviceProducer(table, batch_type(x=pa.float32(), name=pa.utf8()))
        try:
            zerohop.from_arrow(producer)
        except ValueError as e:
            print("refused:", e)
        print("released", producer.released)
    """,
    "arrow-device-short-child": """
        # Pinned, managed or ROCm host memory: 10,000,000 rows over a one-element child.
        one = np.ones(1)
        for kind in (CUDA_HOST, CUDA_MANAGED, ROCM_HOST):
            table = Node(10_000_000, [None], [Node(1, [None, one.ctypes.data])])
            producer = DeviceProducer(table, batch_type(x=pa.float64()), device_type=kind)
            try:
                t = zerohop.from_arrow(producer)
                print("accepted", np.from_dlpack(t["x"]).sum())
            except (ValueError, RuntimeError) as e:
                print("refused:", e)
            print("released", producer.released)
    """,
    "arrow-boolean-impossible-length": """
        bits = np.full(16, 255, np.uint8)
        for rows in (2**63 - 1, 2**59):
            producer = DeviceProducer(Node(rows, [None, bits.ctypes.data]), pa.bool_(),
                                      device_type=1)
            try:
                t = zerohop.from_arrow(producer)
                t.column("values", "numpy", copy=True)
                print("accepted")
            except (ValueError, MemoryError) as e:
                print("refused:", type(e).__name__, e)
    """,
    "arrow-negative-fixed-size": """
        import ctypes
        for fmt in (b"w:-1", b"+w:-1"):
            # pyarrow will not build these types, so the schema is written by hand.
            class Schema(ctypes.Structure):
                pass
            Schema._fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("metadata", ctypes.c_char_p), ("flags", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p),
                ("release", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
                ("private_data", ctypes.c_void_p)]
            noop = Schema._fields_[7][1](lambda s: None)
            child = Schema(format=b"i", release=noop)
            table = (ctypes.POINTER(Schema) * 1)(ctypes.pointer(child))
            schema = Schema(format=fmt, release=noop, n_children=1 if fmt[0] == 43 else 0,
                            children=ctypes.cast(table, ctypes.c_void_p))
            new = ctypes.pythonapi.PyCapsule_New
            new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                            ctypes.c_void_p]
            class Producer:
                def __arrow_c_schema__(self):
                    return new(ctypes.addressof(schema), b"arrow_schema", None)
                def __arrow_c_array__(self, requested_schema=None):
                    return self.__arrow_c_schema__(), pa.array([1]).__arrow_c_array__()[1]
            try:
                zerohop.from_arrow(Producer())
            except ValueError as e:
                print("refused:", e)
    """,
    "arrow-device-cuda-without-cuda": """
        device = Unreadable()
        producer = DeviceProducer(Node(3, [None, device.address]), pa.float32())
        try:
            zerohop.from_arrow(producer)
            print("accepted")
        except (ValueError, RuntimeError) as e:
            print("refused:", type(e).__name__, e)
        print("released", producer.released)
    """,
}


def test_a_device_string_column_is_refused_by_name_never_read():
    out = outcome(CASES["arrow-device-strings"])
    refusals = re.findall(r"refused: (.*)", out)
    assert len(refusals) == 2, out
    assert all("no tensor form" in r and "Utf8" in r for r in refusals), out
    assert '"name"' in refusals[1], out
    assert out.count("released 1") == 2, out


def test_a_struct_longer_than_its_children_is_refused_in_host_readable_device_memory():
    out = outcome(CASES["arrow-device-short-child"])
    assert "accepted" not in out, out
    assert out.count("has 1 entries, its parent addresses 10000000") == 3, out
    assert out.count("released 1") == 3, out


def test_a_boolean_length_no_memory_holds_is_an_error():
    out = outcome(CASES["arrow-boolean-impossible-length"])
    lines = out.splitlines()
    assert "past the end of any address space" in lines[0], out
    assert lines[1].startswith("refused: MemoryError"), out


def test_negative_fixed_sizes_are_refused():
    out = outcome(CASES["arrow-negative-fixed-size"])
    assert out.count("negative fixed size (-1)") == 2, out


@pytest.mark.skipif(zerohop.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_arrays_are_refused_where_there_is_no_cuda():
    out = outcome(CASES["arrow-device-cuda-without-cuda"])
    assert "refused:" in out and "CUDA" in out and "Arrow device array" in out, out
    assert "released 1" in out, out


def test_the_docs_page_lists_every_arrow_case():
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", DOCS.read_text(), flags=re.M))
    assert not set(CASES) - listed, f"docs/hostile-inputs.md lacks {sorted(set(CASES) - listed)}"
