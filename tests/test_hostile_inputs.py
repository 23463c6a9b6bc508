"""Hostile inputs, end to end: every case gets a clear Python exception naming the input, no
crash, no leak (a Tracking adaptor is the current resource throughout), and the valid data
next to it is never modified. docs/hostile-inputs.md lists every case id below with its
outcome; a test keeps the two in step.

DLPack producers are built by hand with ctypes, so their struct fields can say anything."""

import ctypes
import gc
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import zerohop
import zerohop.cuda
import zerohop.memory as zm
from conftest import assert_all_freed_once

DOCS = Path(__file__).resolve().parent.parent / "docs" / "hostile-inputs.md"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


PyCapsule_New = ctypes.pythonapi.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class HostileProducer:
    """A versioned DLPack capsule whose fields are whatever the case says, over a real
    64-float buffer; counts its deleter calls (a refused import must release exactly once)."""

    def __init__(self, shape=(4,), strides=(1,), ndim=None, code=2, bits=32, lanes=1,
                 device=(1, 0), major=1, byte_offset=0, data_offset=0, null_data=False,
                 null_shape=False):
        self.backing = np.arange(64, dtype=np.float32)
        self.before = self.backing.copy()
        self.deleted = 0
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = (ctypes.c_int64 * max(len(strides), 1))(*strides)

        def deleter(_):
            self.deleted += 1

        self.deleter = DELETER(deleter)
        self.managed = DLManagedTensorVersioned(
            major=major, minor=3, manager_ctx=None, deleter=self.deleter, flags=0,
            dl_tensor=DLTensor(
                data=None if null_data else self.backing.ctypes.data + data_offset,
                device=DLDevice(*device),
                ndim=len(shape) if ndim is None else ndim,
                dtype=DLDataType(code, bits, lanes),
                shape=None if null_shape else ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
                strides=ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)),
                byte_offset=byte_offset,
            ),
        )

    def capsule(self):
        return PyCapsule_New(ctypes.addressof(self.managed), b"dltensor_versioned", None)


def interface(**overrides):
    backing = np.arange(16, dtype=np.float32)
    d = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (backing.ctypes.data, False)}
    d.update(overrides)
    return type("ArrayInterface", (), {"__array_interface__": d, "backing": backing})()


def cuda_interface(**overrides):
    d = {"version": 3, "shape": (0,), "typestr": "<f4", "data": (0, False)}
    d.update(overrides)
    return type("CudaArrayInterface", (), {"__cuda_array_interface__": d})()


DLPACK = {
    "dlpack-negative-ndim": (dict(ndim=-1), BufferError, "ndim is negative"),
    "dlpack-too-many-dims": (dict(shape=(1,) * 65, strides=(1,) * 65), BufferError, "exceeds the limit"),
    "dlpack-negative-shape": (dict(shape=(2, -3), strides=(1, 1)), BufferError, r"shape\[1\] = -3 is negative"),
    "dlpack-huge-shape": (dict(shape=(1 << 40, 1 << 40), strides=(1, 1)), BufferError, "more elements than fit"),
    "dlpack-byte-count-overflow": (dict(shape=(1 << 61,), strides=(0,)), BufferError, "more bytes than the address space"),
    "dlpack-stride-overflow": (dict(shape=(4,), strides=(1 << 62,)), BufferError, "beyond the address space"),
    "dlpack-null-data": (dict(null_data=True), BufferError, "NULL"),
    "dlpack-null-shape": (dict(null_shape=True), BufferError, "shape is NULL"),
    "dlpack-misaligned-pointer": (dict(data_offset=1), BufferError, "not aligned"),
    "dlpack-byte-offset-misaligned": (dict(byte_offset=2), BufferError, "not aligned"),
    "dlpack-unknown-dtype": (dict(code=99), BufferError, "unknown DLPack type code"),
    "dlpack-opaque-handle": (dict(code=3, bits=64), BufferError, "opaque handles"),
    "dlpack-packed-sub-byte": (dict(code=17, bits=4), BufferError, "packed sub-byte"),
    "dlpack-zero-lanes": (dict(lanes=0), BufferError, "lanes must be at least 1"),
    "dlpack-wrong-width": (dict(bits=24), BufferError, "allows bit widths"),
    "dlpack-unknown-device": (dict(device=(99, 0)), BufferError, "unsupported device"),
    "dlpack-major-version-2": (dict(major=2), BufferError, "major version 2"),
}

INTERFACES = {
    "ai-non-native-byte-order": (dict(typestr=">f4"), ValueError, "native byte order"),
    "ai-unsupported-kind": (dict(typestr="<U4"), ValueError, "no tensor form"),
    "ai-multibyte-typestr": (dict(typestr="<é1"), ValueError, "typestr"),
    "ai-oversized-typestr": (dict(typestr="<f32"), ValueError, "too wide"),
    "ai-masked": (dict(mask=np.ones(4, bool)), ValueError, "mask"),
    "ai-buffer-protocol-data": (dict(data=None), ValueError, "buffer protocol"),
    "ai-stride-not-a-multiple": (dict(strides=(6,)), ValueError, "not a multiple"),
    "ai-wrong-stride-count": (dict(strides=(4, 4)), ValueError, "2 entries for 1 dimensions"),
    "ai-wrong-version": (dict(version=2), ValueError, "version"),
    "ai-wrong-value-type": (dict(shape="four"), ValueError, "expected a tuple of integers"),
    "ai-misaligned-pointer": (dict(offset=1), BufferError, "not aligned"),
    "ai-negative-offset": (dict(offset=-8), ValueError, "offset"),
}


@pytest.fixture(autouse=True)
def every_case_frees_everything(tracking):
    yield
    assert_all_freed_once(tracking)


@pytest.mark.parametrize("case", sorted(DLPACK))
def test_hostile_dlpack_producers(case):
    fields, error, message = DLPACK[case]
    producer = HostileProducer(**fields)
    with pytest.raises(error, match=message):
        zerohop.from_dlpack(producer.capsule())
    assert producer.deleted == 1, "a refused capsule must be released exactly once"
    assert (producer.backing == producer.before).all()


def test_a_well_formed_hand_made_producer_is_accepted():
    """Control for the table above: the same builder with sane fields imports zero-copy."""
    producer = HostileProducer(shape=(2, 3), strides=(3, 1))
    t = zerohop.from_dlpack(producer.capsule())
    assert t.data_ptr == producer.backing.ctypes.data
    assert np.from_dlpack(t).tolist() == [[0, 1, 2], [3, 4, 5]]
    del t
    gc.collect()
    assert producer.deleted == 1


def test_a_consumed_capsule_cannot_be_consumed_again():
    producer = HostileProducer()
    capsule = producer.capsule()
    view = zerohop.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already consumed"):  # dlpack-consumed-capsule
        zerohop.from_dlpack(capsule)
    del view
    gc.collect()
    assert producer.deleted == 1


@pytest.mark.parametrize("case", sorted(INTERFACES))
def test_hostile_array_interfaces(case):
    fields, error, message = INTERFACES[case]
    producer = interface(**fields)
    before = producer.backing.copy()
    with pytest.raises(error, match=message):
        zerohop.from_dlpack(producer)
    assert (producer.backing == before).all()


@pytest.mark.skipif(zerohop.cuda.is_available(), reason="the no-driver outcome needs no GPU")
def test_cai_pointer_without_a_driver():
    with pytest.raises(ValueError, match="CUDA is not available"):
        zerohop.from_dlpack(cuda_interface(shape=(4,), data=(0xDEAD0000, False)))


def test_cai_stream_zero():
    with pytest.raises(ValueError, match="stream 0 is ambiguous"):
        zerohop.cuda.from_cuda_array_interface(cuda_interface(stream=0))


EXPORTS = {
    "export-negative-strides": (
        lambda: np.from_dlpack(zerohop.from_dlpack(np.arange(5.0)[::-1])), BufferError, "negative"),
    "export-stream-for-cpu-data": (
        lambda: zerohop.zeros((4,)).__dlpack__(stream=1), BufferError, "has no streams"),
    "export-stream-zero": (
        lambda: zerohop.zeros((4,)).__dlpack__(stream=0), ValueError, "stream 0 is ambiguous"),
    "export-other-device": (
        lambda: zerohop.zeros((4,)).__dlpack__(dl_device=(2, 0)), BufferError, "does not copy across devices"),
    "export-read-only-as-legacy": (
        lambda: zerohop.from_dlpack(np.frombuffer(b"\0" * 16, np.float32)).__dlpack__(),
        BufferError, "no read-only flag"),
    "zeros-negative-shape": (lambda: zerohop.zeros((-3,), "float32"), BufferError, "negative"),
    "zeros-unknown-dtype": (lambda: zerohop.zeros((3,), "float128"), ValueError, "not a dtype name"),
    "table-bad-alignment": (
        lambda: zerohop.Table([("x", "float32")], 10, alignment=3), ValueError, "power of two"),
    "table-huge": (lambda: zerohop.Table([("x", "float32")], 2**62), ValueError, "overflows"),
    "memory-limit": (lambda: zm.Limit(zm.System(), 1000).allocate(5000), zm.OutOfMemoryError, "limit exceeded"),
}


@pytest.mark.parametrize("case", sorted(EXPORTS))
def test_hostile_requests(case):
    make, error, message = EXPORTS[case]
    with pytest.raises(error, match=message):
        make()


def test_hostile_tensor_specs():
    table = zerohop.Table([("x", "float32"), ("n", "int64")], 10)
    table["x"].numpy()[:] = 7
    with pytest.raises(ValueError, match='no column named "zz"'):  # spec-unknown-column
        table.tensors(["zz"])
    with pytest.raises(ValueError, match="mixes dtypes"):  # spec-mixed-dtypes
        table.tensors({"a": ["x", "n"]})
    with pytest.raises(ValueError, match="defined twice"):  # spec-duplicate-name
        table.tensors([("a", ["x"]), ("a", ["n"])])
    assert (table["x"].numpy() == 7).all()


def test_hostile_double_free_is_refused():
    pool = zm.Pool(zm.System())
    tracker = zm.Tracking(pool)  # its own: this one ends with a refusal
    p = tracker.allocate(64)
    tracker.deallocate(p, 64)
    with pytest.raises(ValueError, match=f"free of {p:#x}.*double free"):
        tracker.deallocate(p, 64)  # memory-double-free
    assert pool.usage()["in_use"] == 0, "in_use wrapped"
    a, b = tracker.allocate(64), tracker.allocate(64)
    assert a != b, "the double free reached the pool"
    tracker.deallocate(a, 64)
    tracker.deallocate(b, 64)
    assert zm.leaks(tracker) == [] and tracker.invalid_frees() == []


# A free Python cannot vouch for, run in a child: before the fix it crashed the interpreter
# (System freed 0x1000; a Pool handed 0x1000 out to the next zeros, which wrote to it).
FOREIGN_FREE = textwrap.dedent("""
    import sys, zerohop, zerohop.memory as zm
    resource = {"pool": zm.Pool(zm.System()), "system": zm.System()}[sys.argv[1]]
    zm.set_current(resource)
    try:
        resource.deallocate(0x1000, 64)
    except ValueError as e:
        print("refused:", e)
    t = zerohop.zeros((16,), "float64")
    assert t.numpy().sum() == 0 and t.data_ptr != 0x1000
    print("alive")
""")


@pytest.mark.parametrize("resource", ["pool", "system"])
def test_hostile_foreign_free_is_refused(resource):
    out = subprocess.run([sys.executable, "-c", FOREIGN_FREE, resource],  # memory-foreign-free
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: invalid free of 0x1000" in out.stdout and "alive" in out.stdout, out.stdout


def test_hostile_wrong_size_free_is_refused():
    pool = zm.Pool(zm.System())
    p = pool.allocate(64)
    with pytest.raises(ValueError, match=f"free of {p:#x}.*allocated as 64 bytes"):
        pool.deallocate(p, 1 << 20)  # memory-wrong-size-free
    assert pool.usage()["in_use"] == 256, "the block stays allocated"
    pool.deallocate(p, 64)
    assert pool.usage()["in_use"] == 0


pa = pytest.importorskip("pyarrow")

ARROW = {
    "arrow-decreasing-offsets": (
        lambda: pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(np.array([0, 5, 3], np.int32)),
                                                      pa.py_buffer(b"hello")]),
        "decreasing offsets"),
}


@pytest.mark.parametrize("case", sorted(ARROW))
def test_hostile_arrow_producers(case):
    make, message = ARROW[case]
    with pytest.raises(ValueError, match=message):
        zerohop.from_arrow(make())


def test_hostile_arrow_columns():
    nulls = zerohop.from_arrow(pa.table({"a": pa.array([1.0, None, 3.0])}))
    with pytest.raises(ValueError, match="1 nulls in 3 rows"):  # arrow-nulls-to-dlpack
        nulls.tensors(["a"], "numpy")
    strings = zerohop.from_arrow(pa.table({"s": pa.array(["x"])}))
    with pytest.raises(ValueError, match="has no tensor form"):  # arrow-unsupported-type
        strings.tensors(["s"], "numpy")


CSV = {
    "csv-short-row": (b"a,b\n1,2\n3\n", {}, "line 3.*expected 2 fields, found 1"),
    "csv-not-a-number": (b"a,b\n1,x2\n", {}, r"line 2, column 2 \(b\).*not a number"),
    "csv-empty-field": (b"a,b\n1,\n", {}, "line 2, column 2 .*empty field"),
    "csv-nan-rejected": (b"a\nnan\n", {}, "not finite"),
    "csv-not-utf8": (b"a,b\n1,\xff\xfe\n", {}, "not UTF-8"),
    "csv-empty-file": (b"", {}, "empty"),
    "csv-unknown-column": (b"a,b\n1,2\n", {"columns": ["z"]}, 'no column "z"'),
    "csv-duplicate-header": (b"a,a\n1,2\n", {}, "appears twice"),
}


@pytest.mark.parametrize("case", sorted(CSV))
def test_hostile_csv(case, tmp_path):
    ecg = pytest.importorskip("zerohop_ecg")  # the ECG app's CSV reader (apps/ecg)
    data, options, message = CSV[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message) as info:
        ecg.read_csv(str(path), **options)
    assert str(path) in str(info.value), "the error names the file"
    assert path.read_bytes() == data


def test_csv_missing_file(tmp_path):
    ecg = pytest.importorskip("zerohop_ecg")
    missing = tmp_path / "nope.csv"
    with pytest.raises(OSError, match="nope.csv"):  # csv-missing-file
        ecg.read_csv(str(missing))


def all_case_ids():
    ids = set(DLPACK) | set(INTERFACES) | set(EXPORTS) | set(ARROW) | set(CSV)
    ids |= {"dlpack-consumed-capsule", "cai-no-driver", "cai-stream-zero", "spec-unknown-column",
            "spec-mixed-dtypes", "spec-duplicate-name", "memory-double-free", "arrow-nulls-to-dlpack",
            "memory-foreign-free", "memory-wrong-size-free",
            "arrow-unsupported-type", "csv-missing-file"}
    return ids


def test_the_docs_page_lists_every_case():
    text = DOCS.read_text()
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.M))
    missing = all_case_ids() - listed
    assert not missing, f"docs/hostile-inputs.md lacks {sorted(missing)}"


def test_a_well_formed_array_interface_is_imported_without_a_copy():
    """Control for the interface table: a sane dict is a view of the producer's memory, kept
    alive by the view, read-only when the dict says so."""
    producer = interface(shape=(2, 2), strides=(8, 4), offset=4, data=None)
    producer.__array_interface__["data"] = (producer.backing.ctypes.data, True)
    t = zerohop.from_dlpack(producer)
    assert t.data_ptr == producer.backing.ctypes.data + 4
    assert np.from_dlpack(t).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert not np.from_dlpack(t).flags.writeable
    backing = producer.backing
    del producer
    gc.collect()
    assert np.from_dlpack(t)[1, 1] == backing[4]
