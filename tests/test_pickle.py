"""Pickling zerohop.Tensor and zerohop.Table (PEP 574): protocol 5 sends the data out of band and
the unpickled object views the very same memory (pointer identity); older protocols copy in
band; bad pickles are clear exceptions."""

import copy
import gc
import pickle

import numpy as np
import pytest

import zerohop

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128",
    "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
    "float4_e2m1fn",
]


def out_of_band(obj):
    """(stream, buffers) of a protocol-5 pickle with out-of-band buffers."""
    buffers = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def roundtrip(obj):
    data, buffers = out_of_band(obj)
    return pickle.loads(data, buffers=buffers)


def raw_bytes(tensor):
    """The bytes of a tensor's span, read through its own protocol-5 buffer (any dtype)."""
    return bytes(memoryview(tensor.__reduce_ex__(5)[1][2]).cast("B"))


def test_reduce_is_a_rebuild_call_with_plain_data():
    t = zerohop.from_dlpack(np.arange(4.0))
    rebuild, (fmt, state, data) = t.__reduce_ex__(5)
    assert rebuild is zerohop._zerohop._rebuild_tensor and fmt == 1
    assert state == {"dtype": "float64", "shape": (4,), "strides": (1,), "offset": 0,
                     "nbytes": 32, "readonly": False, "is_copied": False}
    assert isinstance(data, pickle.PickleBuffer)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_travels_out_of_band_and_shares_memory(dtype):
    t = zerohop.zeros((64, 3), dtype)
    span = memoryview(t.__reduce_ex__(5)[1][2]).cast("B")
    pattern = bytes(i * 7 % 251 for i in range(len(span)))
    span[:] = pattern                          # the same bytes whatever the dtype
    data, buffers = out_of_band(t)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == t.nbytes
    assert pattern[:32] not in data, "no data bytes in the stream"
    u = pickle.loads(data, buffers=buffers)
    assert u.data_ptr == t.data_ptr            # the same memory, not a copy
    assert (u.dtype, u.shape, u.strides, u.readonly, u.is_copied) == (
        dtype, (64, 3), (3, 1), False, False)
    assert raw_bytes(u) == raw_bytes(t)


def test_the_unpickled_tensor_is_a_live_view_and_keeps_the_memory_alive():
    a = np.arange(1_000_000, dtype=np.float32)
    t = zerohop.from_dlpack(a)
    data, buffers = out_of_band(t)
    assert len(data) < 300
    u = pickle.loads(data, buffers=buffers)
    a[7] = -1.0
    assert u.numpy()[7] == -1.0                # writes show: one memory
    del a, t, buffers
    gc.collect()
    assert u.numpy()[8] == 8.0 and u.numpy()[-1] == 999_999.0


def test_read_only_stays_read_only():
    a = np.arange(10.0)
    a.flags.writeable = False
    t = zerohop.from_dlpack(a)
    assert t.readonly
    data, buffers = out_of_band(t)
    assert memoryview(buffers[0]).readonly
    u = pickle.loads(data, buffers=buffers)
    assert u.readonly and u.data_ptr == t.data_ptr
    assert not u.numpy().flags.writeable


def test_a_read_only_received_buffer_gives_a_read_only_tensor():
    t = zerohop.from_dlpack(np.arange(6.0))
    data, buffers = out_of_band(t)
    frozen = bytes(buffers[0].raw())           # as Ray's store hands buffers back
    u = pickle.loads(data, buffers=[frozen])
    assert u.readonly and not t.readonly
    assert np.array_equal(u.numpy(), np.arange(6.0))
    assert not u.numpy().flags.writeable
    assert u.data_ptr == np.frombuffer(frozen, np.uint8).ctypes.data   # a view of it


@pytest.mark.parametrize("make", [
    lambda: np.arange(24.0).reshape(4, 6)[:, ::2],       # gaps
    lambda: np.arange(24.0).reshape(4, 6)[::-1, ::-2],   # negative strides
    lambda: np.arange(24.0).reshape(4, 6).T,             # transposed
    lambda: np.broadcast_to(np.arange(3.0), (5, 3)),     # stride 0
], ids=["gaps", "negative", "transposed", "broadcast"])
def test_strided_tensors_travel_as_their_span_and_stay_views(make):
    src = make()
    t = zerohop.from_dlpack(src)
    u = roundtrip(t)
    assert u.data_ptr == t.data_ptr and u.strides == t.strides and u.shape == t.shape
    assert np.array_equal(u.numpy(), src)
    # In band (protocol 4) the elements travel compacted: a copy with row-major strides.
    c = pickle.loads(pickle.dumps(t, protocol=4))
    assert c.data_ptr != t.data_ptr and c.is_contiguous()
    assert np.array_equal(c.numpy(), src)


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_older_protocols_copy_in_band(protocol):
    a = np.arange(1000, dtype=np.int64)
    t = zerohop.from_dlpack(a)
    data = pickle.dumps(t, protocol=protocol)
    assert len(data) > a.nbytes
    u = pickle.loads(data)
    assert u.data_ptr != t.data_ptr and not u.readonly
    assert np.array_equal(u.numpy(), a)
    a.flags.writeable = False
    ro = pickle.loads(pickle.dumps(zerohop.from_dlpack(a), protocol=protocol))
    assert ro.readonly


def test_protocol_5_without_a_callback_is_in_band():
    t = zerohop.from_dlpack(np.arange(100.0))
    data = pickle.dumps(t, protocol=5)
    assert len(data) > 800
    u = pickle.loads(data)
    assert u.data_ptr != t.data_ptr and not u.readonly
    assert np.array_equal(u.numpy(), np.arange(100.0))


def test_empty_zero_d_and_copied_tensors():
    for t in [zerohop.zeros((0, 5), "float32"), zerohop.zeros((), "int16"),
              zerohop.from_dlpack(np.arange(3.0), copy=True)]:
        for u in [roundtrip(t), pickle.loads(pickle.dumps(t, protocol=2))]:
            assert (u.shape, u.dtype, u.is_copied) == (t.shape, t.dtype, t.is_copied)
    assert roundtrip(zerohop.from_dlpack(np.arange(3.0), copy=True)).is_copied


def test_copy_module():
    t = zerohop.from_dlpack(np.arange(5.0))
    for c in (copy.copy(t), copy.deepcopy(t)):
        assert np.array_equal(c.numpy(), np.arange(5.0)) and c.data_ptr != t.data_ptr


def test_misaligned_received_buffers_are_copied_and_reported():
    t = zerohop.from_dlpack(np.arange(8.0))
    data, buffers = out_of_band(t)
    shifted = bytearray(t.nbytes + 1)
    shifted[1:] = buffers[0].raw()
    with pytest.warns(zerohop.CopyWarning, match="not aligned"):
        u = pickle.loads(data, buffers=[memoryview(shifted)[1:]])
    assert u.is_copied and u.data_ptr % 8 == 0
    assert np.array_equal(u.numpy(), np.arange(8.0))


def test_a_multi_lane_dtype_keeps_its_lanes():
    from test_hostile_inputs import HostileProducer

    producer = HostileProducer(shape=(4,), strides=(1,), code=2, bits=32, lanes=4)
    t = zerohop.from_dlpack(producer.capsule())
    assert t.dtype == "float32x4"
    u = roundtrip(t)
    assert u.dtype == "float32x4" and u.data_ptr == t.data_ptr
    del t


# ----------------------------------------------------------------------------- tables

SCHEMA = [("x", "float32"), ("v", "float64", 3), ("m", "float32", (2, 2), "col"),
          ("r", "int16", (2, 3), "row"), ("s", "int32", "scalar"), ("b", "bfloat16")]


def filled_table(rows=10, **kw):
    t = zerohop.Table(SCHEMA, rows, **kw)
    t["x"].numpy()[:] = np.arange(rows)
    t["v"].numpy()[:] = np.arange(rows * 3).reshape(rows, 3)
    t["m"].numpy()[:] = np.arange(rows * 4).reshape(rows, 2, 2)
    t["r"].numpy()[:] = np.arange(rows * 6).reshape(rows, 2, 3)
    t["s"].numpy()[...] = 42
    return t


def same_table(u, t):
    assert (u.storage, u.schema, u.alignment, len(u), u.readonly, u.nbytes) == (
        t.storage, t.schema, t.alignment, len(t), t.readonly, t.nbytes)
    for name in ["x", "v", "m", "r", "s"]:
        assert np.array_equal(u[name].numpy(), t[name].numpy()), name
        assert u[name].strides == t[name].strides


def test_soa_tables_travel_as_one_buffer_and_stay_views():
    t = filled_table(alignment=64)
    data, buffers = out_of_band(t)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == t.nbytes
    u = pickle.loads(data, buffers=buffers)
    same_table(u, t)
    assert u.describe() == t.describe()
    assert u.data_ptr == t.data_ptr and u["v"].data_ptr == t["v"].data_ptr
    t["x"].numpy()[0] = 99
    assert u["x"].numpy()[0] == 99


def test_row_slices_and_read_only_tables():
    t = filled_table(20)
    part = t.rows(5, 9)
    u = roundtrip(part)
    same_table(u, part)
    assert u["x"].data_ptr == part["x"].data_ptr and u.nbytes == t.nbytes
    ro = zerohop.Table(SCHEMA, 4, readonly=True)
    data, buffers = out_of_band(ro)
    assert memoryview(buffers[0]).readonly
    assert pickle.loads(data, buffers=buffers).readonly
    assert pickle.loads(data, buffers=[bytes(buffers[0].raw())]).readonly
    assert roundtrip_in_band(t).readonly is False


def roundtrip_in_band(obj, protocol=4):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_tables_in_band(protocol):
    t = filled_table(7)
    u = roundtrip_in_band(t, protocol)
    same_table(u, t)
    assert u.data_ptr != t.data_ptr


def test_arrow_tables_go_through_pyarrow_and_share_memory():
    pa = pytest.importorskip("pyarrow")
    batch = pa.record_batch({"a": np.arange(1000.0), "b": pa.array([1, None, 3] * 10 + [0] * 970)})
    t = zerohop.from_arrow(batch)
    u = roundtrip(t)
    assert u.storage == "arrow" and u.columns == ["a", "b"] and len(u) == 1000
    assert u["a"].data_ptr == t["a"].data_ptr
    assert pa.record_batch(u).equals(batch)          # nulls survive
    tensors = zerohop.Table.from_tensors({"x": np.arange(5, dtype=np.int32)})
    v = roundtrip(tensors)
    assert v["x"].data_ptr == tensors["x"].data_ptr
    w = roundtrip_in_band(t)
    assert pa.record_batch(w).equals(batch) and w["a"].data_ptr != t["a"].data_ptr


def test_misaligned_table_buffers_are_copied_and_reported():
    t = filled_table(3)
    data, buffers = out_of_band(t)
    shifted = bytearray(t.nbytes + 4)
    shifted[4:] = buffers[0].raw()
    with pytest.warns(zerohop.CopyWarning, match="not aligned"):
        u = pickle.loads(data, buffers=[memoryview(shifted)[4:]])
    same_table(u, t)


# -------------------------------------------------------------------------- bad input

def rebuild_args(obj, protocol=5):
    rebuild, (fmt, state, data) = obj.__reduce_ex__(protocol)
    return rebuild, fmt, dict(state), data


def test_truncated_pickles_raise():
    t = zerohop.from_dlpack(np.arange(100.0))
    data = pickle.dumps(t, protocol=4)
    for cut in [1, len(data) // 2, len(data) - 1]:
        with pytest.raises((pickle.UnpicklingError, EOFError, ValueError)):
            pickle.loads(data[:cut])
    stream, buffers = out_of_band(t)
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(stream)                       # the out-of-band buffer is missing


def test_buffers_of_the_wrong_size_are_refused():
    t = zerohop.from_dlpack(np.arange(100.0))
    stream, buffers = out_of_band(t)
    for wrong in [b"", bytes(799), bytes(801)]:
        with pytest.raises(ValueError, match="the buffer holds"):
            pickle.loads(stream, buffers=[wrong])
    table = filled_table(4)
    stream, buffers = out_of_band(table)
    with pytest.raises(ValueError, match="the buffer holds"):
        pickle.loads(stream, buffers=[bytes(buffers[0].raw())[:-1]])


@pytest.mark.parametrize("change, error, match", [
    (lambda s: s.update(shape=(101,)), ValueError, "reach outside"),
    (lambda s: s.update(strides=(2,)), ValueError, "reach outside"),
    (lambda s: s.update(offset=8), ValueError, "reach outside"),
    (lambda s: s.update(strides=(1, 1)), ValueError, "do not describe"),
    (lambda s: s.update(shape=(-1,)), ValueError, "do not describe"),
    (lambda s: s.update(shape=(2 ** 63 - 1,) * 64, strides=(2 ** 63 - 1,) * 64), ValueError,
     "do not describe"),
    (lambda s: s.update(shape=(2 ** 62, 2 ** 62), strides=(0, 0)), ValueError, "more elements"),
    (lambda s: s.update(shape="100"), TypeError, '"shape" must be'),
    (lambda s: s.update(dtype=7), TypeError, '"dtype" must be'),
    (lambda s: s.update(dtype="float33"), ValueError, "not a dtype"),
    (lambda s: s.pop("nbytes"), ValueError, 'lacks "nbytes"'),
    (lambda s: s.update(readonly="no"), TypeError, '"readonly" must be'),
    (lambda s: s.update(offset=-8), TypeError, '"offset" must be'),
], ids=["shape", "strides", "offset", "ndim", "negative", "overflow", "numel", "shape-type",
        "dtype-type", "dtype-name", "missing", "readonly-type", "negative-offset"])
def test_tampered_tensor_state_is_refused(change, error, match):
    rebuild, fmt, state, data = rebuild_args(zerohop.from_dlpack(np.arange(100.0)))
    change(state)
    with pytest.raises(error, match=match):
        rebuild(fmt, state, data)


def test_states_nested_without_end_or_out_of_range_are_type_errors_not_crashes():
    # pickle builds a million nested lists without recursing; reading the state must not
    # recurse either (the core opens containers to a fixed depth).
    rebuild, fmt, state, data = rebuild_args(zerohop.from_dlpack(np.arange(4.0)))
    deep = []
    for _ in range(1_000_000):
        deep = [deep]
    for shape, says in [(deep, '"shape" must be'), ((2 ** 200,), '"shape" must be'),
                        (("\ud800",), "not valid UTF-8")]:
        with pytest.raises(TypeError, match=says):
            rebuild(fmt, dict(state, shape=shape), data)


def test_wrong_types_and_versions_are_refused():
    rebuild, fmt, state, data = rebuild_args(zerohop.from_dlpack(np.arange(4.0)))
    with pytest.raises(ValueError, match="format"):
        rebuild(2, state, data)
    with pytest.raises(TypeError, match="must be a dict"):
        rebuild(fmt, [state], data)
    with pytest.raises(TypeError, match="bytes-like buffer"):
        rebuild(fmt, state, 12345)
    table_rebuild, fmt, tstate, tdata = rebuild_args(filled_table(2))
    for change, error, match in [
        (dict(storage="gpu"), ValueError, "storage"),
        (dict(schema="x"), TypeError, "schema must be a list"),
        (dict(schema=[("x", "float32")]), TypeError, "schema item"),
        (dict(schema=[("x", "float32", "tensor", 0, 0, "row")]), ValueError, "kind"),
        (dict(rows=1000), ValueError, "take"),
        (dict(len=99), ValueError, "outside a table"),
        (dict(alignment=3), ValueError, "power of two"),
    ]:
        with pytest.raises(error, match=match):
            table_rebuild(fmt, dict(tstate, **change), tdata)


def test_a_cuda_handles_event_is_64_bytes_or_none():
    """None: the producer's stream had finished, nothing to wait for. Any other value is
    checked before the driver is asked anything (here: the machine check refuses the rest)."""
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    handle = dict(memory=bytes(64), event=bytes(64), offset=0, bytes=40,
                  device_uuid=bytes(16), pid=1, boot_id="0" * 36)
    for event in (bytes(64), None):
        with pytest.raises(ValueError, match="made on another machine"):
            rebuild(fmt, dict(state, cuda_ipc=dict(handle, event=event)), None)
    with pytest.raises(ValueError, match='"event" has 3 bytes, not 64'):
        rebuild(fmt, dict(state, cuda_ipc=dict(handle, event=b"abc")), None)
    with pytest.raises(TypeError, match='"event" must be bytes, got 7'):
        rebuild(fmt, dict(state, cuda_ipc=dict(handle, event=7)), None)
    no_event = {k: v for k, v in handle.items() if k != "event"}
    with pytest.raises(ValueError, match='lacks "event"'):
        rebuild(fmt, dict(state, cuda_ipc=no_event), None)


def test_device_tensors_travel_by_cuda_ipc_or_not_at_all():
    from test_hostile_inputs import HostileProducer

    producer = HostileProducer(device=(2, 0))      # a CUDA tensor (never dereferenced)
    try:
        t = zerohop.from_dlpack(producer.capsule())
    except (BufferError, ValueError) as err:       # no driver: it cannot even be imported
        pytest.skip(f"a CUDA tensor cannot be made here: {err}")
    # Its pointer is no device allocation, so there is no IPC handle to send: an error, never
    # a copy to the host (tests/gpu/test_cuda_ipc.py sends real ones).
    with pytest.raises(ValueError, match="address range|does not exist"):
        pickle.dumps(t, protocol=5)
