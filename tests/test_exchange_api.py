"""zerohop.Tensor publishes DLPack 1.3's C exchange API (`__dlpack_c_exchange_api__`): driven
here through ctypes as a C consumer would, with pointer identity at every hand-off, torch's own
table taking zerohop's managed tensors, and refusals that set a Python error instead of
crashing."""

import ctypes
from ctypes import POINTER, Structure, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32
from ctypes import c_uint64, c_void_p, py_object

import numpy as np
import pytest

import zerohop

FROM_PY = ctypes.PYFUNCTYPE(c_int, py_object, POINTER(c_void_p))
TO_PY = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
DESCRIBE = ctypes.PYFUNCTYPE(c_int, py_object, c_void_p)
STREAM = ctypes.CFUNCTYPE(c_int, c_int, c_int32, POINTER(c_void_p))
SET_ERROR = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_char_p, ctypes.c_char_p)
ALLOCATE = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p), c_void_p, SET_ERROR)


class Api(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev", c_void_p),
                ("allocate", c_void_p), ("from_py", c_void_p), ("to_py", c_void_p),
                ("describe", c_void_p), ("stream", c_void_p)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device_type", c_int32), ("device_id", c_int32),
                ("ndim", c_int32), ("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),
                ("byte_offset", c_uint64)]


class Managed(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("ctx", c_void_p),
                ("deleter", c_void_p), ("flags", c_uint64), ("dl_tensor", DLTensor)]


def table_of(cls) -> Api:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = c_void_p, [py_object, ctypes.c_char_p]
    return Api.from_address(get(cls.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))


API = table_of(zerohop.Tensor)


def owned(address: int):
    """The object a new reference at `address` points to, the reference handed to Python."""
    obj = ctypes.cast(address, py_object).value
    ctypes.pythonapi.Py_DecRef(py_object(obj))
    return obj


def export(t) -> int:
    out = c_void_p()
    assert FROM_PY(API.from_py)(t, ctypes.byref(out)) == 0
    return out.value


def test_the_table_is_dlpack_1_3_and_complete():
    assert (API.major, API.minor) == (1, 3) and API.prev is None
    assert all(getattr(API, f) for f in ("allocate", "from_py", "to_py", "describe", "stream"))


def test_a_tensor_goes_out_and_back_without_a_copy():
    source = np.arange(12.0).reshape(3, 4)
    t = zerohop.from_dlpack(source)
    managed = export(t)
    m = Managed.from_address(managed)
    assert (m.major, m.dl_tensor.data, m.dl_tensor.ndim) == (1, source.ctypes.data, 2)
    out = c_void_p()
    assert TO_PY(API.to_py)(managed, ctypes.byref(out)) == 0
    back = owned(out.value)
    assert isinstance(back, zerohop.Tensor)
    assert back.data_ptr == source.ctypes.data and back.shape == (3, 4)
    del t
    assert np.from_dlpack(back).sum() == source.sum(), "the producer is kept alive"


def test_torch_takes_zerohop_tensors_through_its_own_table():
    torch = pytest.importorskip("torch")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this torch has no C exchange API")
    theirs = table_of(torch.Tensor)
    source = np.arange(5, dtype=np.float32)
    managed = export(zerohop.from_dlpack(source))
    out = c_void_p()
    assert TO_PY(theirs.to_py)(managed, ctypes.byref(out)) == 0
    x = owned(out.value)
    assert x.data_ptr() == source.ctypes.data and x.tolist() == [0, 1, 2, 3, 4]
    # And torch's tensors into zerohop through torch's export and zerohop's import.
    y = torch.arange(3.0)
    out = c_void_p()
    assert FROM_PY(theirs.from_py)(y, ctypes.byref(out)) == 0
    z = c_void_p()
    assert TO_PY(API.to_py)(out.value, ctypes.byref(z)) == 0
    assert owned(z.value).data_ptr == y.data_ptr()


def test_a_read_only_tensor_leaves_marked_read_only():
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    m = Managed.from_address(export(zerohop.from_dlpack(frozen)))
    assert m.flags & 1, "DLPACK_FLAG_BITMASK_READ_ONLY"
    out = c_void_p()
    assert TO_PY(API.to_py)(ctypes.addressof(m), ctypes.byref(out)) == 0  # freed with it
    assert owned(out.value).readonly


def test_describe_points_into_the_live_tensor():
    t = zerohop.from_dlpack(np.zeros((2, 3), dtype=np.int16))
    d = DLTensor()
    assert DESCRIBE(API.describe)(t, ctypes.addressof(d)) == 0
    assert d.data == t.data_ptr and (d.code, d.bits, d.lanes) == (0, 16, 1)
    assert [d.shape[i] for i in range(2)] == [2, 3] and [d.strides[i] for i in range(2)] == [3, 1]


def test_foreign_objects_and_null_outs_raise_instead_of_crashing():
    with pytest.raises(TypeError, match="takes zerohop.Tensor objects, not list"):
        FROM_PY(API.from_py)([1, 2], ctypes.byref(c_void_p()))
    with pytest.raises(ValueError, match="NULL out"):
        FROM_PY(API.from_py)(zerohop.zeros((2,)), None)
    with pytest.raises(ValueError, match="NULL tensor"):
        TO_PY(API.to_py)(None, ctypes.byref(c_void_p()))
    with pytest.raises(TypeError):
        DESCRIBE(API.describe)(np.zeros(2), ctypes.addressof(DLTensor()))


def test_the_work_stream_is_the_legacy_stream_on_cuda_and_none_on_the_host():
    out = c_void_p(7)
    assert STREAM(API.stream)(1, 0, ctypes.byref(out)) == 0 and out.value is None
    assert STREAM(API.stream)(2, 0, ctypes.byref(out)) == 0 and out.value == 1
    assert STREAM(API.stream)(2, 0, None) == -1


def test_the_allocator_makes_zeroed_zerohop_memory_or_reports_why_not():
    shape = (c_int64 * 2)(3, 4)
    proto = DLTensor(None, 1, 0, 2, 2, 32, 1, shape, None, 0)
    out = c_void_p()
    errors = []
    report = SET_ERROR(lambda ctx, kind, message: errors.append((kind, message)))
    assert ALLOCATE(API.allocate)(ctypes.addressof(proto), ctypes.byref(out), None, report) == 0
    made = c_void_p()
    assert TO_PY(API.to_py)(out.value, ctypes.byref(made)) == 0
    t = owned(made.value)
    assert t.shape == (3, 4) and np.from_dlpack(t).sum() == 0 and t.data_ptr % 64 == 0
    proto.code = 99
    assert ALLOCATE(API.allocate)(ctypes.addressof(proto), ctypes.byref(out), None, report) == -1
    assert errors == [(b"RuntimeError", b"unsupported dtype")]
