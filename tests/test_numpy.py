"""NumPy <-> zerohop through DLPack and the array interface: same memory, same values."""

import numpy as np
import pytest

import zerohop
from conftest import address, filled_zerohop

NUMPY_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]


def sample(dtype, shape=(3, 4)):
    values = np.arange(int(np.prod(shape))).reshape(shape)
    return (values % 2).astype(dtype) if dtype == "bool" else values.astype(dtype)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_to_zerohop_shares_memory(dtype):
    a = sample(dtype)
    t = zerohop.from_dlpack(a)
    assert t.data_ptr == address(a)
    assert t.shape == a.shape and t.dtype == dtype and t.device == "cpu"
    assert t.strides == tuple(s // a.itemsize for s in a.strides)
    back = t.numpy()
    assert address(back) == address(a)
    np.testing.assert_array_equal(back, a)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_zerohop_to_numpy_shares_memory(dtype):
    t = filled_zerohop((3, 4), dtype)
    for a in (np.from_dlpack(t), np.asarray(t), t.numpy()):
        assert address(a) == t.data_ptr
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, sample(dtype))


def test_writes_are_seen_on_both_sides():
    a = np.zeros(5, np.float32)
    t = zerohop.from_dlpack(a)
    np.from_dlpack(t)[2] = 7.0
    assert a[2] == 7.0
    a[4] = 9.0
    assert t.numpy()[4] == 9.0


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.T,
        lambda a: a[::2, 1::3],
        lambda a: a[1:, :].T[::2],
        lambda a: a[:, 2],
    ],
    ids=["transposed", "stepped", "offset-transposed-stepped", "column"],
)
def test_non_contiguous_views_round_trip(make):
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    a = make(base)
    t = zerohop.from_dlpack(a)
    assert t.data_ptr == address(a)
    assert t.strides == tuple(s // 8 for s in a.strides)
    for b in (np.from_dlpack(t), t.numpy()):
        assert address(b) == address(a)
        assert b.strides == a.strides
        np.testing.assert_array_equal(b, a)


def test_zero_d_and_empty():
    scalar = np.array(3.5, dtype=np.float32)
    t = zerohop.from_dlpack(scalar)
    assert t.shape == () and t.ndim == 0 and t.size == 1
    assert t.data_ptr == address(scalar)
    assert np.from_dlpack(t) == 3.5

    empty = np.zeros((0, 3), np.int16)
    e = zerohop.from_dlpack(empty)
    assert e.shape == (0, 3) and e.size == 0
    assert np.from_dlpack(e).shape == (0, 3)
    assert e.numpy().shape == (0, 3)
    z = zerohop.zeros((4, 0))
    assert np.from_dlpack(z).shape == (4, 0)


def test_read_only_numpy_stays_read_only():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = zerohop.from_dlpack(a)
    assert t.readonly
    assert t.data_ptr == address(a)
    for b in (t.numpy(), np.from_dlpack(t)):
        assert address(b) == address(a)
        assert not b.flags.writeable
        with pytest.raises(ValueError):
            b[0] = 1.0
    # A read-only tensor never leaves as a legacy capsule: that format has no read-only flag.
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()


def test_negative_strides_import_but_never_export_without_a_copy():
    a = np.arange(6.0)[::-1]
    t = zerohop.from_dlpack(a)
    assert t.strides == (-1,)
    assert t.data_ptr == address(a)
    np.testing.assert_array_equal(t.numpy(), a)  # the array interface handles them
    for kwargs in ({}, {"max_version": (1, 3)}, {"max_version": (1, 3), "copy": False}):
        with pytest.raises(BufferError, match="negative"):
            t.__dlpack__(**kwargs)
    copied = np.from_dlpack(t, copy=True)
    np.testing.assert_array_equal(copied, a)
    assert address(copied) != address(a)
    c = zerohop.from_dlpack(a, copy=True)
    assert c.is_copied and c.strides == (1,)
    np.testing.assert_array_equal(c.numpy(), a)


def test_array_interface_describes_the_view():
    t = filled_zerohop((2, 3), "int32")
    ai = t.__array_interface__
    assert ai["version"] == 3
    assert ai["shape"] == (2, 3)
    assert ai["typestr"] == "<i4"
    assert ai["data"] == (t.data_ptr, False)
    assert ai["strides"] == (12, 4)


def test_numpy_refuses_dtypes_it_lacks_with_a_clear_error():
    t = zerohop.zeros((2,), "bfloat16")
    with pytest.raises(TypeError, match="bfloat16"):
        t.numpy()


def test_zerohop_memory_is_aligned_for_every_consumer():
    for dtype in ("int8", "float64"):
        for shape in ((1,), (7, 3), (1000,)):
            assert zerohop.zeros(shape, dtype).data_ptr % 128 == 0


def test_tensor_to_the_host_is_a_reported_copy_with_the_same_layout():
    values = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = zerohop.from_dlpack(values[1:, ::-2])  # a negative stride, element 0 mid-span
    copied = view.to("cpu")
    assert copied.is_copied and not view.is_copied
    assert copied.strides == view.strides and copied.shape == view.shape
    assert copied.data_ptr != view.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(copied.copy()), values[1:, ::-2])
    values[:] = -1  # the copy is its own memory
    assert np.from_dlpack(copied.copy()).min() >= 0
    frozen = values.copy()
    frozen.flags.writeable = False
    assert zerohop.from_dlpack(frozen).to("cpu").readonly


def test_tensor_to_a_device_this_machine_lacks_fails_clearly():
    t = zerohop.from_dlpack(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="cuda:7|device"):
        t.to("cuda:7")
    with pytest.raises(ValueError, match="tpu"):
        t.to("tpu")
