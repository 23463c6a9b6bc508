"""The Arrow C device interface on a GPU: CUDA tables and tensors export device capsules with
a sync event recorded on their stream, zerohop imports them by pointer and waits on the
event, and pyarrow's view of them is recorded. Skipped where there is no CUDA device."""

import ctypes

import pytest

import zerohop
import zerohop.cuda

torch = pytest.importorskip("torch")
pa = pytest.importorskip("pyarrow")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

from late_writer import written_late  # noqa: E402 - after the skips: it imports torch

ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
SYNC_EVENT_OFFSET = 96  # ArrowArray (80) + device_id (8) + device_type (4) + padding (4)
DEVICE_TYPE_OFFSET = 88


def device_array_fields(capsule):
    """(device_type, event handle) of the ArrowDeviceArray inside a capsule."""
    base = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"arrow_device_array")
    device_type = ctypes.c_int32.from_address(base + DEVICE_TYPE_OFFSET).value
    event_ptr = ctypes.c_void_p.from_address(base + SYNC_EVENT_OFFSET).value
    event = ctypes.c_void_p.from_address(event_ptr).value if event_ptr else None
    return device_type, event


def cuda_table(n=1024):
    x = zerohop.zeros((n,), "float32", device="cuda:0")
    v = zerohop.zeros((n, 3), "float64", device="cuda:0")
    torch.from_dlpack(x).copy_(torch.arange(n, dtype=torch.float32, device="cuda"))
    torch.from_dlpack(v).fill_(2.0)
    return x, v, zerohop.Table.from_tensors({"x": x, "v": v})


def test_cuda_tables_round_trip_through_device_capsules_by_pointer():
    x, v, table = cuda_table()
    assert table.storage == "device" and len(table) == 1024
    schema, array = table.__arrow_c_device_array__()
    device_type, event = device_array_fields(array)
    assert device_type == 2 and event  # CUDA, with an event to wait on

    class Producer:
        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            return schema, array

    back = zerohop.from_arrow(Producer())
    assert back.storage == "device"
    assert back["x"].data_ptr == x.data_ptr and back["x"].device == "cuda:0"
    assert back["v"].data_ptr == v.data_ptr and back["v"].shape == (1024, 3)
    # Arrow data is immutable and torch ignores read-only: sharing is the caller's word.
    assert back.column("x", "torch", share_readonly=True).sum().item() == sum(range(1024))
    (xt,) = back.tensors(["x"], "torch", share_readonly=True)
    assert xt.data_ptr() == x.data_ptr and xt.is_cuda
    assert tuple(xt.shape) == (1024, 1)  # one rank per spec, as over an SoA table (issue #40)
    with pytest.raises(BufferError, match="device"):
        pa.table(table)  # host capsules of device data are refused, not faked


def test_device_streams_round_trip():
    x, _, table = cuda_table(64)

    class StreamProducer:
        def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
            return table.__arrow_c_device_stream__()

    back = zerohop.from_arrow(StreamProducer())
    assert back["x"].data_ptr == x.data_ptr


def test_a_cuda_tensor_exports_a_plain_device_array():
    x = zerohop.zeros((8, 2), "int32", device="cuda:0")
    schema, array = x.__arrow_c_device_array__()
    assert device_array_fields(array)[0] == 2

    class Producer:
        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            return schema, array

    back = zerohop.from_arrow(Producer())
    assert back.columns == ["values"]  # an unnamed array: named as the host import names it
    assert back["values"].data_ptr == x.data_ptr and back["values"].shape == (8, 2)


def test_the_sync_event_orders_the_consumer_after_the_producer():
    cupy = pytest.importorskip("cupy")  # imported before the race: it takes a while
    n = 1 << 22
    t, xt, _, consumer = written_late(n, 2_000_000_000)
    table = zerohop.Table.from_tensors({"x": t})
    schema, array = table.__arrow_c_device_array__()
    _, event = device_array_fields(array)
    # The event sits behind the sleeping kernel: cudaEventQuery says not ready (600).
    assert cupy.cuda.runtime.eventQuery(event) == 600

    class Producer:
        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            return schema, array

    imported = zerohop.from_arrow(Producer())
    with torch.cuda.stream(consumer):
        seen = imported.column("x", "torch", share_readonly=True).sum()
    consumer.synchronize()
    assert seen.item() == n
    del t, xt, imported


def test_what_pyarrow_makes_of_cuda_device_arrays():
    """pyarrow reads CUDA device arrays only when built with CUDA; either way it must not
    crash, and a CUDA-enabled pyarrow must see our pointers."""
    x, _, table = cuda_table(16)
    try:
        batch = pa.RecordBatch._import_from_c_device_capsule(*table.__arrow_c_device_array__())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowKeyError, NotImplementedError) as e:
        print(f"pyarrow {pa.__version__} refuses CUDA device arrays: {e}")
        return
    assert batch.device_type == pa.DeviceAllocationType.CUDA
    assert batch.column(0).buffers()[1].address == x.data_ptr
    print(f"pyarrow {pa.__version__} imported the CUDA batch by pointer")


def test_a_cuda_string_column_is_refused_by_name_not_read():
    """cuDF's string column: int32 offsets and utf-8 bytes in device memory. zerohop used to
    read the offsets on the host (SIGSEGV); it refuses the type before looking at a buffer."""
    cupy = pytest.importorskip("cupy")
    from arrow_c import DeviceProducer, Node, batch_type, string_column

    offsets = cupy.asarray([0, 1, 3, 6], dtype=cupy.int32)
    data = cupy.frombuffer(b"abbccc", dtype=cupy.uint8) if hasattr(cupy, "frombuffer") \
        else cupy.asarray(list(b"abbccc"), dtype=cupy.uint8)
    x = cupy.arange(3, dtype=cupy.float32)
    alone = DeviceProducer(string_column(3, offsets.data.ptr, data.data.ptr), pa.utf8())
    with pytest.raises(ValueError, match="Utf8 has no tensor form"):
        zerohop.from_arrow(alone)
    table = Node(3, [None], [Node(3, [None, x.data.ptr]),
                             string_column(3, offsets.data.ptr, data.data.ptr)])
    batch = DeviceProducer(table, batch_type(x=pa.float32(), name=pa.utf8()))
    with pytest.raises(ValueError, match='"name"'):
        zerohop.from_arrow(batch)
    assert (alone.released, batch.released) == (1, 1)
    # The same column without the strings is taken, by pointer.
    floats = DeviceProducer(Node(3, [None, x.data.ptr]), pa.float32())
    back = zerohop.from_arrow(floats)
    assert back["values"].data_ptr == x.data.ptr
