"""Arrow C device arrays built by hand with ctypes, so a test can make a producer say anything:
any device, any lengths, buffers anywhere (device memory, or host pages the process may not
read). The schema comes from pyarrow; the array struct, its children and its release callback
are this module's, and `released` counts the release calls."""

import ctypes
import mmap

import pyarrow as pa


class ArrowArray(ctypes.Structure):
    pass


RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", RELEASE),
    ("private_data", ctypes.c_void_p),
]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [
        ("array", ArrowArray),
        ("device_id", ctypes.c_int64),
        ("device_type", ctypes.c_int32),
        ("sync_event", ctypes.c_void_p),
        ("reserved", ctypes.c_int64 * 3),
    ]


CUDA, CUDA_HOST, CUDA_MANAGED, ROCM_HOST = 2, 3, 13, 11

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Node:
    """One ArrowArray and what keeps its tables alive."""

    def __init__(self, length, buffers, children=(), offset=0):
        self.children = list(children)
        self.buffer_table = (ctypes.c_void_p * max(len(buffers), 1))(*buffers)
        self.child_table = (ctypes.POINTER(ArrowArray) * max(len(self.children), 1))(
            *[ctypes.pointer(c.struct) for c in self.children])
        self.struct = ArrowArray(
            length=length, null_count=0, offset=offset, n_buffers=len(buffers),
            n_children=len(self.children),
            buffers=ctypes.cast(self.buffer_table, ctypes.POINTER(ctypes.c_void_p)),
            children=ctypes.cast(self.child_table, ctypes.POINTER(ctypes.POINTER(ArrowArray))))


class DeviceProducer:
    """An object with `__arrow_c_device_array__` handing over `root` (a Node) as an array of
    `arrow_type` on `device_type`; `released` counts the consumer's release calls."""

    def __init__(self, root, arrow_type, device_type=CUDA, device_id=0):
        self.root, self.arrow_type = root, arrow_type
        self.released = 0

        def release(array):
            self.released += 1
            array.contents.release = RELEASE()

        self._release = RELEASE(release)
        # Children are released by their parent's release; until then each must look live.
        self._noop = RELEASE(lambda array: None)
        pending = list(root.children)
        while pending:
            child = pending.pop()
            child.struct.release = self._noop
            pending.extend(child.children)
        root.struct.release = self._release
        self.device_array = ArrowDeviceArray(array=root.struct, device_id=device_id,
                                             device_type=device_type)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        schema = self.arrow_type.__arrow_c_schema__()
        array = _capsule_new(ctypes.addressof(self.device_array), b"arrow_device_array", None)
        return schema, array


class Unreadable:
    """Pages this process may not touch (PROT_NONE): a host stand-in for device memory, where
    any read by the host is a SIGSEGV instead of a quiet wrong answer."""

    def __init__(self, pages=1):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        self.bytes = pages * mmap.PAGESIZE
        self.address = libc.mmap(None, self.bytes, 0,  # PROT_NONE
                                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        assert self.address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()


def string_column(length, offsets_address, values_address):
    """A utf-8 column laid out as cuDF exports one: int32 offsets and bytes, no validity."""
    return Node(length, [None, offsets_address, values_address])


def batch_type(**fields):
    return pa.struct([pa.field(name, t, nullable=False) for name, t in fields.items()])
