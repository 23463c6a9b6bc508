"""The DLPack Python protocol itself: capsules, versions, streams, devices, copies, errors."""

import ctypes
import gc
import threading

import numpy as np
import pytest

import zerohop
from conftest import address, filled_zerohop

PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]


def capsule_name(capsule):
    return PyCapsule_GetName(capsule).decode()


def test_capsule_kind_follows_max_version():
    t = filled_zerohop((4,), "float32")
    assert capsule_name(t.__dlpack__()) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(t.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    assert capsule_name(t.__dlpack__(max_version=(2, 0))) == "dltensor_versioned"


def test_a_consumed_capsule_is_renamed_and_cannot_be_consumed_again():
    t = filled_zerohop((4,), "float32")
    for kwargs, name in (({}, "dltensor"), ({"max_version": (1, 3)}, "dltensor_versioned")):
        capsule = t.__dlpack__(**kwargs)
        view = zerohop.from_dlpack(capsule)
        assert view.data_ptr == t.data_ptr
        assert capsule_name(capsule) == "used_" + name
        with pytest.raises(BufferError, match="already consumed"):
            zerohop.from_dlpack(capsule)
        del capsule
        gc.collect()
        np.testing.assert_array_equal(view.numpy(), [0, 1, 2, 3])


def test_capsules_from_other_producers_are_consumed_once():
    a = np.arange(3.0)
    capsule = a.__dlpack__(max_version=(1, 0))
    t = zerohop.from_dlpack(capsule)
    assert t.data_ptr == address(a)
    assert capsule_name(capsule) == "used_dltensor_versioned"
    with pytest.raises((BufferError, ValueError)):  # NumPy's word for "used capsule"
        np.from_dlpack(_Holder(capsule))


class _Holder:
    """Hands out a given capsule, to feed an already-used capsule to a consumer."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_an_unconsumed_capsule_frees_its_tensor():
    t = filled_zerohop((1000,), "float64")
    for _ in range(1000):
        t.__dlpack__(max_version=(1, 3))
        t.__dlpack__()
    gc.collect()
    assert np.from_dlpack(t)[999] == 999


def test_wrong_capsules_and_objects_are_refused():
    import ctypes as c

    other = c.pythonapi.PyCapsule_New
    other.restype = c.py_object
    other.argtypes = [c.c_void_p, c.c_char_p, c.c_void_p]
    foreign = other(c.cast(c.pointer(c.c_int(1)), c.c_void_p), b"not_dlpack", None)
    with pytest.raises(TypeError, match="not a DLPack capsule"):
        zerohop.from_dlpack(foreign)
    # Not a producer: a TypeError saying what is accepted, not an AttributeError about a dunder.
    with pytest.raises(TypeError, match="expected a DLPack producer .* got object"):
        zerohop.from_dlpack(object())
    with pytest.raises(TypeError, match="got list"):
        zerohop.from_dlpack([1, 2, 3])


class _LegacyOnly:
    """A producer that refuses max_version the way a given library does."""

    def __init__(self, array, error):
        self.array = array
        self.error = error
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if "max_version" in kwargs:
            raise self.error
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize(
    "error",
    [
        TypeError("__dlpack__() got an unexpected keyword argument 'max_version'"),  # pyarrow
        NotImplementedError("max_version"),
        AssertionError("stream should be None on cpu"),  # torch
        ValueError("NumPy only supports stream=None"),
        BufferError("versioned export unsupported"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_legacy_fallback_for_producers_that_refuse_max_version(error):
    a = np.arange(5, dtype=np.int32)
    producer = _LegacyOnly(a, error)
    t = zerohop.from_dlpack(producer)
    assert t.data_ptr == address(a)
    assert producer.calls == [{"max_version": (1, 3)}, {}]


def test_a_producer_that_refuses_everything_gets_both_errors_reported():
    class Broken:
        def __dlpack__(self, **kwargs):
            raise RuntimeError("device lost" if kwargs else "still lost")

        def __dlpack_device__(self):
            return (1, 0)

    # The producer's own exception type, with both answers.
    with pytest.raises(RuntimeError, match="device lost.*still lost"):
        zerohop.from_dlpack(Broken())


def test_pyarrow_style_producer_without_max_version_keyword():
    a = np.arange(4, dtype=np.float32)

    class ArrowLike:
        def __dlpack__(self, stream=None):  # no max_version keyword at all
            return a.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    assert zerohop.from_dlpack(ArrowLike()).data_ptr == address(a)


def test_stream_values_on_cpu():
    t = filled_zerohop((2,), "float32")
    t.__dlpack__(stream=None)
    t.__dlpack__(stream=-1)  # "no synchronisation", harmless on the CPU
    with pytest.raises(BufferError, match="has no streams"):
        t.__dlpack__(stream=1)
    with pytest.raises(ValueError, match="ambiguous"):
        t.__dlpack__(stream=0)
    with pytest.raises(TypeError):
        t.__dlpack__(stream="default")


def test_dl_device_and_copy():
    t = filled_zerohop((3,), "float32")
    assert t.__dlpack_device__() == (1, 0)
    t.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    with pytest.raises(BufferError, match="does not copy across devices"):
        t.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    copied = zerohop.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True))
    assert copied.is_copied
    assert copied.data_ptr != t.data_ptr
    np.testing.assert_array_equal(copied.numpy(), t.numpy())
    same = zerohop.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=False))
    assert same.data_ptr == t.data_ptr and not same.is_copied


def test_from_dlpack_of_a_zerohop_tensor_is_the_same_memory():
    t = filled_zerohop((3,), "int64")
    assert zerohop.from_dlpack(t).data_ptr == t.data_ptr
    assert zerohop.from_dlpack(t, copy=True).data_ptr != t.data_ptr


def test_properties_and_repr():
    t = filled_zerohop((2, 3), "int16")
    assert (t.shape, t.strides, t.dtype, t.device) == ((2, 3), (3, 1), "int16", "cpu")
    assert (t.ndim, t.size, t.nbytes, len(t)) == (2, 6, 12, 2)
    assert t.is_contiguous() and not t.readonly and not t.is_copied
    assert "int16" in repr(t) and "shape=[2, 3]" in repr(t)
    with pytest.raises(TypeError):
        len(zerohop.zeros(()))


def test_zeros_validates_its_arguments():
    with pytest.raises(ValueError, match="not a dtype name"):
        zerohop.zeros((2,), "float128")
    with pytest.raises(BufferError, match="negative"):
        zerohop.zeros((-1,))
    with pytest.raises((MemoryError, BufferError)):
        zerohop.zeros((1 << 40, 1 << 40))


def test_views_die_on_other_threads():
    a = np.arange(100.0)
    views = [zerohop.from_dlpack(a) for _ in range(64)]
    exported = [np.from_dlpack(v) for v in views]

    def drop(items):
        items.clear()

    workers = [threading.Thread(target=drop, args=(chunk,)) for chunk in (views, exported)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    gc.collect()
    assert a.sum() == 4950.0


def test_stream_refusals_are_one_class_whatever_the_face_expects():
    t = zerohop.zeros((4,))
    for bad in (1, 0):
        with pytest.raises(zerohop.StreamError) as caught:
            t.__dlpack__(stream=bad)
        # DLPack consumers catch BufferError, argument checks ValueError: both hold.
        assert isinstance(caught.value, BufferError) and isinstance(caught.value, ValueError)
    assert t.__dlpack__(stream=-1) is not None, "-1: the consumer orders itself"
