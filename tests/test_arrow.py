"""Arrow interop: pyarrow, polars and nanoarrow round trips through the Arrow PyCapsule
interface, proven zero-copy by buffer addresses; nulls, offsets, SoA transposes and the
polars → zerohop → torch chain."""

import warnings

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm

pa = pytest.importorskip("pyarrow")
try:
    import polars as pl
except ImportError:  # the GPU machine has pyarrow but may lack polars
    pl = None
needs_polars = pytest.mark.skipif(pl is None, reason="polars is not installed")

NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


def values_address(array):
    """Address of element 0 of a pyarrow primitive array (its offset applied)."""
    return array.buffers()[1].address + array.offset * array.type.bit_width // 8


def pa_table_column(table, name):
    (chunk,) = table.column(name).chunks
    return chunk


@pytest.mark.parametrize("dtype", NUMERIC)
def test_pyarrow_to_zerohop_and_back_shares_every_buffer(dtype):
    values = pa.array(np.arange(20).astype(dtype))
    table = zerohop.from_arrow(pa.table({"a": values}))
    assert table.storage == "arrow" and len(table) == 20
    tensor = table["a"]
    assert tensor.data_ptr == values_address(values)
    assert tensor.dtype == dtype and tensor.readonly
    back = pa_table_column(pa.table(table), "a")
    assert values_address(back) == values_address(values)
    assert back.equals(values)


@pytest.mark.parametrize("dtype", ["int32", "float64", "uint16"])
def test_zerohop_tensor_to_pyarrow_and_back_shares_memory(dtype):
    tensor = zerohop.zeros((6,), dtype)
    array = pa.array(tensor)
    assert array.type == pa.from_numpy_dtype(np.dtype(dtype))
    assert values_address(array) == tensor.data_ptr
    again = zerohop.from_arrow(array)
    assert again["values"].data_ptr == tensor.data_ptr


def test_two_dimensional_tensors_are_fixed_size_lists():
    tensor = zerohop.from_dlpack(np.arange(12, dtype=np.float32).reshape(4, 3))
    array = pa.array(tensor)
    assert array.type == pa.list_(pa.field("item", pa.float32(), nullable=False), 3)
    assert values_address(array.values) == tensor.data_ptr
    assert array.to_pylist()[1] == [3.0, 4.0, 5.0]
    back = zerohop.from_arrow(array)["values"]
    assert back.shape == (4, 3) and back.data_ptr == tensor.data_ptr


def test_tensors_arrow_cannot_describe_are_refused():
    strided = zerohop.from_dlpack(np.zeros((3, 4), np.float32)[:, ::2])
    with pytest.raises(BufferError, match="strides"):
        pa.array(strided)
    with pytest.raises(ValueError, match="bool"):
        pa.array(zerohop.zeros((3,), "bool"))
    with pytest.raises(ValueError, match="0-d"):
        pa.array(zerohop.zeros((), "float32"))


def test_sliced_arrays_keep_their_offset_without_copying():
    base = pa.array(np.arange(100, dtype=np.int64))
    sliced = base.slice(30, 10)
    tensor = zerohop.from_arrow(sliced)["values"]
    assert tensor.data_ptr == base.buffers()[1].address + 30 * 8
    assert tensor.numpy().tolist() == list(range(30, 40))
    back = pa_table_column(pa.table(zerohop.from_arrow(pa.table({"s": sliced}))), "s")
    assert values_address(back) == values_address(sliced)
    assert back.to_pylist() == list(range(30, 40))


def test_table_slices_share_memory():
    table = zerohop.from_arrow(pa.table({"x": np.arange(10.0)}))
    rows = table.rows(2, 5)
    assert len(rows) == 3
    assert rows["x"].data_ptr == table["x"].data_ptr + 2 * 8


def test_nulls_survive_a_round_trip_with_their_bitmap():
    values = pa.array([1.0, None, 3.0, None, 5.0])
    table = zerohop.from_arrow(pa.table({"x": values}))
    back = pa_table_column(pa.table(table), "x")
    assert back.null_count == 2
    assert back.buffers()[0].address == values.buffers()[0].address
    assert back.to_pylist() == [1.0, None, 3.0, None, 5.0]


def test_nulls_cannot_reach_dlpack_without_a_fill_value():
    table = zerohop.from_arrow(pa.table({"x": pa.array([1, None, 3], pa.int32())}))
    with pytest.raises(ValueError, match=r'column "x".*1 nulls.*fill'):
        table["x"]
    with pytest.raises(ValueError, match="nulls"):
        table.tensors(["x"], "torch")
    with pytest.warns(zerohop.CopyWarning, match="nulls"):
        filled = table.column("x", "numpy", fill=-1)
    assert filled.tolist() == [1, -1, 3]
    with pytest.warns(zerohop.CopyWarning):
        (t,) = table.tensors(["x"], "numpy", fill=0)
    assert t[:, 0].tolist() == [1, 0, 3]
    with pytest.raises(ValueError, match="fill value 0.5"):
        table.column("x", fill=0.5)


def test_sliced_nulls_follow_the_slice():
    values = pa.array([None, 1.0, 2.0, None, 4.0]).slice(1, 3)  # [1, 2, None]
    table = zerohop.from_arrow(values)
    with pytest.warns(zerohop.CopyWarning):
        assert table.column("values", "numpy", fill=9).tolist() == [1.0, 2.0, 9.0]


def test_under_aligned_buffers_are_realigned_and_reported():
    raw = pa.py_buffer(np.arange(9, dtype=np.float64).tobytes() + b"\0")
    misaligned = raw.slice(1, 64)  # eight float64 starting one byte in
    array = pa.Array.from_buffers(pa.float64(), 8, [None, misaligned])
    with pytest.warns(zerohop.CopyWarning, match="realigned"):
        table = zerohop.from_arrow(array)
    assert table["values"].data_ptr != misaligned.address
    assert table["values"].data_ptr % 8 == 0


def test_chunked_data_is_concatenated_only_on_request():
    chunked = pa.table({"x": pa.chunked_array([[1.0, 2.0], [3.0]])})
    with pytest.raises(BufferError, match="2 chunks"):
        zerohop.from_arrow(chunked)
    with pytest.warns(zerohop.CopyWarning, match="concatenated"):
        table = zerohop.from_arrow(chunked, copy=True)
    assert table["x"].numpy().tolist() == [1.0, 2.0, 3.0]


def test_soa_plain_columns_export_as_views_of_the_table_buffer():
    soa = zerohop.Table([("x", "float32"), ("y", "int64")], 5)
    arrow = pa.table(soa)
    start, end = soa.data_ptr, soa.data_ptr + soa.nbytes
    for name in ("x", "y"):
        address = values_address(pa_table_column(arrow, name))
        assert start <= address < end
        assert address == soa[name].data_ptr


def test_soa_vectors_need_an_explicit_transpose():
    schema = [("x", "float32"), ("v", "float64", 3), ("m", "int32", (2, 2), "col"),
              ("scale", "float32", "scalar")]
    soa = zerohop.Table(schema, 4)
    with pytest.raises(BufferError, match=r'column "v".*to_arrow\(copy=True\)'):
        pa.table(soa)
    with pytest.warns(zerohop.CopyWarning, match="transposed"):
        arrow = soa.to_arrow(copy=True)
    pa_table = pa.table(arrow)
    assert pa_table.schema.field("v").type.list_size == 3
    assert b"zerohop.scalar.scale" in pa_table.schema.metadata
    back = zerohop.from_arrow(pa_table).to_soa()
    assert back.schema == soa.schema


def test_soa_round_trip_keeps_values_and_layout_order():
    soa = zerohop.Table([("v", "float32", 2), ("m", "int32", (2, 3), "col")], 3)
    v = np.arange(6, dtype=np.float32).reshape(3, 2)
    m = np.arange(18, dtype=np.int32).reshape(3, 2, 3)
    for name, src in (("v", v), ("m", m)):
        soa[name].numpy()[...] = src  # a writable view of the SoA column
    with pytest.warns(zerohop.CopyWarning):
        arrow = pa.table(soa.to_arrow(copy=True))
    assert arrow.column("v").to_pylist() == v.tolist()
    assert arrow.column("m").to_pylist() == m.tolist()
    back = zerohop.from_arrow(arrow).to_soa()
    np.testing.assert_array_equal(back["v"].numpy(), v)
    np.testing.assert_array_equal(back["m"].numpy(), m)


def test_groups_of_arrow_columns_are_joined_only_by_a_reported_copy():
    table = zerohop.from_arrow(pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0]}))
    with pytest.raises(ValueError, match="separate Arrow allocations"):
        table.tensors({"ab": ["a", "b"]})
    with pytest.warns(zerohop.CopyWarning):
        (ab,) = table.tensors({"ab": ["a", "b"]}, "numpy", copy=True)
    assert ab.tolist() == [[1.0, 3.0], [2.0, 4.0]]


def test_groups_of_an_exported_soa_table_stay_views():
    soa = zerohop.Table([("x", "float32"), ("y", "float32")], 4)
    arrow = soa.to_arrow()
    (xy,) = arrow.tensors({"xy": ["x", "y"]})
    assert xy.data_ptr == soa["x"].data_ptr and xy.shape == (4, 2)


@needs_polars
def test_polars_round_trip_shares_memory():
    df = pl.DataFrame({"a": np.arange(6, dtype=np.float64), "b": np.arange(6, dtype=np.int32)})
    table = zerohop.from_arrow(df)
    a_address = values_address(df["a"].to_arrow())
    assert table["a"].data_ptr == a_address
    back = pl.DataFrame(table)
    assert back.equals(df)
    assert values_address(back["a"].to_arrow()) == a_address


@needs_polars
def test_polars_nulls_and_slices():
    df = pl.DataFrame({"x": [1.0, None, 3.0, 4.0]})
    table = zerohop.from_arrow(df.slice(1, 3))
    with pytest.raises(ValueError, match="nulls"):
        table["x"]
    sliced = zerohop.from_arrow(df.slice(2, 2))
    assert sliced["x"].numpy().tolist() == [3.0, 4.0]
    assert sliced["x"].data_ptr == values_address(df["x"].to_arrow()) + 2 * 8
    assert pl.DataFrame(zerohop.from_arrow(df))["x"].to_list() == [1.0, None, 3.0, 4.0]


@needs_polars
def test_polars_to_torch_chain_copies_nothing():
    torch = pytest.importorskip("torch")
    n = 1000
    df = pl.DataFrame({
        "x": np.linspace(0, 1, n, dtype=np.float32),
        "label": np.arange(n, dtype=np.int64),
        "pos": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
    })
    table = zerohop.from_arrow(df)
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        # Arrow memory is read-only and torch ignores that flag: sharing is the caller's call.
        x, label, pos = table.tensors(["x", "label", "pos"], "torch", share_readonly=True)
    assert x.data_ptr() == values_address(df["x"].to_arrow())
    assert label.data_ptr() == values_address(df["label"].to_arrow())
    assert pos.data_ptr() == values_address(df["pos"].to_arrow().values)
    assert x.shape == (n, 1) and pos.shape == (n, 3)
    assert torch.equal(pos[1], torch.tensor([3.0, 4.0, 5.0]))
    assert label.sum().item() == n * (n - 1) // 2


def test_nanoarrow_round_trip():
    na = pytest.importorskip("nanoarrow")
    source = na.c_array([1, 2, 3], na.int32())
    table = zerohop.from_arrow(source)
    assert table["values"].numpy().tolist() == [1, 2, 3]
    back = na.Array(zerohop.from_arrow(pa.table({"x": [1.5, 2.5]})))
    assert back.to_pylist() == [{"x": 1.5}, {"x": 2.5}]


def test_device_capsules_of_host_tables_say_cpu():
    x = pa.array(np.arange(3.0))
    table = zerohop.from_arrow(pa.table({"x": x}))
    batch = pa.RecordBatch._import_from_c_device_capsule(*table.__arrow_c_device_array__())
    assert batch.device_type == pa.DeviceAllocationType.CPU
    assert values_address(batch.column(0)) == values_address(x)

    class DeviceStreamOnly:
        def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
            return table.__arrow_c_device_stream__(requested_schema, **kwargs)

    again = zerohop.from_arrow(DeviceStreamOnly())
    assert again["x"].data_ptr == values_address(x)
    with pytest.raises(NotImplementedError, match="sync"):
        table.__arrow_c_device_array__(sync=True)
    table.__arrow_c_device_array__(anything=None)  # None-valued keywords are fine


def test_requested_schema_is_best_effort():
    table = zerohop.from_arrow(pa.table({"x": [1.0]}))
    same = pa.schema([("x", pa.float64())])
    pa.RecordBatchReader._import_from_c_capsule(table.__arrow_c_stream__(same.__arrow_c_schema__()))
    other = pa.schema([("x", pa.int32())])
    with pytest.warns(zerohop.CopyWarning, match="cast"):
        cast = pa.RecordBatchReader._import_from_c_capsule(table.__arrow_c_stream__(other.__arrow_c_schema__()))
    assert cast.read_all()["x"].to_pylist() == [1]


def test_capsules_are_used_once_and_unused_ones_are_released():
    table = zerohop.from_arrow(pa.table({"x": [1.0, 2.0]}))
    stream = table.__arrow_c_stream__()
    reader = pa.RecordBatchReader._import_from_c_capsule(stream)
    assert reader.read_all().num_rows == 2

    class Replay:
        def __arrow_c_stream__(self, requested_schema=None):
            return stream

    with pytest.raises(ValueError, match="already consumed"):
        zerohop.from_arrow(Replay())
    for _ in range(1000):  # never consumed: the destructors release them
        table.__arrow_c_array__()
        table.__arrow_c_stream__()
        table.__arrow_c_device_array__()


def test_objects_without_arrow_are_a_type_error():
    with pytest.raises(TypeError, match="Arrow PyCapsule"):
        zerohop.from_arrow([1, 2, 3])
    with pytest.raises(ValueError, match="has no tensor form"):
        zerohop.from_arrow(pa.table({"s": ["a", "b"]}))["s"]


def test_from_tensors_wraps_without_copying():
    torch = pytest.importorskip("torch")
    a = np.arange(4.0)
    b = torch.arange(4)
    table = zerohop.Table.from_tensors({"a": a, "b": b})
    assert table.storage == "arrow"
    arrow = pa.table(table)
    assert values_address(pa_table_column(arrow, "a")) == a.ctypes.data
    assert values_address(pa_table_column(arrow, "b")) == b.data_ptr()
    with pytest.raises(ValueError, match="unequal"):
        zerohop.Table.from_tensors({"a": np.zeros(3), "b": np.zeros(4)})


def test_arrow_buffers_keep_zerohop_memory_alive():
    tensor = zerohop.from_dlpack(np.arange(5, dtype=np.int64))
    array = pa.array(tensor)
    del tensor
    import gc

    gc.collect()
    assert array.to_pylist() == [0, 1, 2, 3, 4]


def test_boolean_columns_are_unpacked_only_as_a_reported_copy():
    table = zerohop.from_arrow(pa.table({"b": [True, False, True], "x": [1.0, 2.0, 3.0]}))
    with pytest.raises(ValueError, match=r'column "b".*booleans.*copy=True'):
        table["b"]
    with pytest.warns(zerohop.CopyWarning, match="booleans"):
        unpacked = table.column("b", "numpy", copy=True)
    assert unpacked.dtype == np.bool_ and unpacked.tolist() == [True, False, True]
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        assert np.from_dlpack(table["x"]).tolist() == [1.0, 2.0, 3.0]


def test_the_schema_of_an_arrow_table_is_read_from_its_types_without_a_copy():
    v = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3)
    m = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.int32)), 2), 2)
    table = zerohop.from_arrow(pa.table({
        "b": [True, False], "x": pa.array([1.0, None]), "v": v, "m": m}))
    counted = zm.Stats(zm.System())
    zm.set_current(counted)
    try:
        assert table.schema == [("b", "bool"), ("x", "float64"), ("v", "float32", 3),
                                ("m", "int32", (2, 2))]
        # Unpacking the booleans or filling the nulls would have allocated host memory.
        assert counted.stats()["total_count"] == 0
    finally:
        zm.reset_current()


def test_chunked_input_maps_chunk_by_chunk_without_a_copy():
    batches = [pa.record_batch({"x": pa.array(np.arange(k * 10, k * 10 + 10, dtype=np.float32))})
               for k in range(3)]
    source = pa.Table.from_batches(batches)
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        tables = zerohop.from_arrow(source, chunks=True)
        streamed = zerohop.from_arrow(pa.RecordBatchReader.from_batches(source.schema, batches),
                                      chunks=True)
    for got in (tables, streamed):
        assert [len(t) for t in got] == [10, 10, 10]
        for table, batch in zip(got, batches):
            assert table["x"].data_ptr == values_address(batch["x"])
    assert np.from_dlpack(tables[2]["x"]).tolist() == list(range(20, 30))
    with pytest.raises(BufferError, match="chunks"):
        zerohop.from_arrow(source)
    with pytest.raises(ValueError, match="choose one"):
        zerohop.from_arrow(source, chunks=True, copy=True)
    one = zerohop.from_arrow(pa.table({"x": [1.0]}), chunks=True)
    assert isinstance(one, list) and len(one) == 1


def test_duckdb_record_batch_readers_map_chunk_by_chunk_without_a_copy():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i::DOUBLE AS x, (i * 2)::INTEGER AS y "
                "FROM range(2500) r(i)")
    reader = con.sql("SELECT x, y FROM t ORDER BY x").to_arrow_reader(1000)
    batches = list(reader)  # kept, to compare addresses with what zerohop maps
    assert len(batches) >= 2, "duckdb gave one batch; the test needs several"
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        tables = zerohop.from_arrow(pa.RecordBatchReader.from_batches(batches[0].schema, batches),
                                    chunks=True)
    assert [len(t) for t in tables] == [b.num_rows for b in batches]
    for table, batch in zip(tables, batches):
        assert table["x"].data_ptr == values_address(batch["x"])
        assert table["y"].data_ptr == values_address(batch["y"])
    got = np.concatenate([np.from_dlpack(t["x"]) for t in tables])
    assert got.tolist() == [float(i) for i in range(2500)]
    # duckdb's reader straight in (the Arrow PyCapsule stream interface), chunk by chunk.
    direct = zerohop.from_arrow(con.sql("SELECT y FROM t ORDER BY x").to_arrow_reader(1000),
                                chunks=True)
    assert sum(len(t) for t in direct) == 2500
    assert np.concatenate([np.from_dlpack(t["y"]) for t in direct]).tolist() == \
        [2 * i for i in range(2500)]


@needs_polars
def test_chunked_polars_frames_map_chunk_by_chunk():
    frame = pl.concat([pl.DataFrame({"x": [1.0, 2.0]}), pl.DataFrame({"x": [3.0]})],
                      rechunk=False)
    assert frame.n_chunks() == 2
    tables = zerohop.from_arrow(frame, chunks=True)
    # One table per batch of polars' own export, which may rechunk on the way out.
    exported = list(pa.RecordBatchReader.from_stream(frame))
    assert [len(t) for t in tables] == [b.num_rows for b in exported]
    assert [v for t in tables for v in np.from_dlpack(t["x"]).tolist()] == [1.0, 2.0, 3.0]
