"""What tables and imports promise, held to it: every framework result is the table's own memory
or a reported copy; empty tables map like any other; read-only data never becomes writable;
Arrow requests are honoured where they can be; dtypes as users write them; leak reports that
name the Python line."""

import gc
import warnings

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm
from conftest import address

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pa = pytest.importorskip("pyarrow")

SPEC_FORMS = [
    ["x"],
    [("xy", ["x", "y"])],
    {"xy": ["x", "y"], "v": ["v"]},
    {"m": ["m"], "k": ["k"]},
]


def schema():
    return [("x", "float32"), ("y", "float32"), ("v", "float32", 3), ("m", "float64", (2, 2)), ("k", "int32", "scalar")]


# ---------------------------------------------------------------- JAX: shared or reported


@pytest.mark.parametrize("alignment", [4, 8, 16, 64, 128])
@pytest.mark.parametrize("rows", [3, 16, 17])
def test_jax_results_are_the_tables_memory_or_refused(alignment, rows):
    t = zerohop.Table([("x", "float32"), ("y", "float32")], rows, alignment=alignment)
    for name in ("x", "y"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", zerohop.CopyWarning)
            try:
                (out,) = t.tensors([name], "jax")
            except BufferError as err:
                assert "64-byte" in str(err) and "copy=True" in str(err)
                assert t[name].data_ptr % 64 != 0, "refused although JAX would share it"
                continue
        assert address(out) == t[name].data_ptr, f"JAX copied {name} silently"


def test_the_issue_case_is_refused_then_a_reported_copy():
    t = zerohop.Table([("x", "float32"), ("y", "float32")], 3, alignment=4)
    t["y"].numpy()[:] = [1, 2, 3]
    with pytest.raises(BufferError, match='tensor "y" cannot be shared: it starts at'):
        t.tensors(["y"], "jax")
    with pytest.warns(zerohop.CopyWarning, match="64-byte"):
        (y,) = t.tensors(["y"], "jax", copy=True)
    assert y[:, 0].tolist() == [1, 2, 3]
    with pytest.raises(BufferError, match="64-byte"):
        t.column("y", "jax")
    with pytest.warns(zerohop.CopyWarning):
        assert t.column("y", "jax", copy=True).tolist() == [1, 2, 3]


def test_the_readme_recipe_shares_every_column_with_jax():
    # alignment = element size and a row count that keeps column starts 64-byte aligned.
    t = zerohop.Table([("x", "float32"), ("y", "float32"), ("z", "float32")], 32, alignment=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        xyz, y = t.tensors([("xyz", ["x", "y", "z"]), "y"], "jax")
    assert address(xyz) == t["x"].data_ptr and address(y) == t["y"].data_ptr


# ---------------------------------------------------------------- empty tables


@pytest.mark.parametrize("spec", SPEC_FORMS, ids=lambda s: str(s))
@pytest.mark.parametrize("framework", [None, "numpy", "torch", "jax"])
def test_an_empty_table_maps_like_an_empty_slice(spec, framework):
    empty = zerohop.Table(schema(), 0, alignment=8)
    slice_ = zerohop.Table(schema(), 5, alignment=8).rows(2, 2)
    copy = framework == "jax"  # JAX takes padded groups only as (reported) copies
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zerohop.CopyWarning)
        got = empty.tensors(spec, framework, copy=copy)
        want = slice_.tensors(spec, framework, copy=copy)
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    assert all(int(np.prod(g.shape)) == 0 for g in got)


def test_an_empty_group_has_the_shape_the_issue_expects():
    t = zerohop.Table([("x", "float32"), ("y", "float32")], 0)
    (xy,) = t.tensors({"xy": ["x", "y"]}, "torch")
    assert tuple(xy.shape) == (0, 2)


# ---------------------------------------------------------------- read-only that holds


def test_torch_never_gets_writable_access_to_a_readonly_table():
    r = zerohop.Table([("x", "float32")], 3, readonly=True)
    with pytest.raises(BufferError, match="torch ignores DLPack's read-only flag"):
        r.tensors(["x"], "torch")
    with pytest.raises(BufferError, match="read-only"):
        r.column("x", "torch")
    with pytest.warns(zerohop.CopyWarning, match="read-only"):
        (x,) = r.tensors(["x"], "torch", copy=True)
    x[0, 0] = 42
    assert r["x"].numpy()[0] == 0, "the read-only table changed"
    assert x.data_ptr() != r["x"].data_ptr


def test_readonly_maps_of_a_writable_table_are_refused_to_torch_too():
    t = zerohop.Table([("x", "float32")], 3)
    with pytest.raises(BufferError, match="read-only"):
        t.tensors(["x"], "torch", readonly=True)
    (x,) = t.tensors(["x"], "torch")  # writable stays zero-copy
    assert x.data_ptr() == t["x"].data_ptr


@pytest.mark.parametrize("consumer", ["numpy", "jax", "zerohop"])
def test_consumers_that_honour_the_flag_share_readonly_tables(consumer):
    r = zerohop.Table([("x", "float32")], 3, readonly=True)
    (x,) = r.tensors(["x"], None if consumer == "zerohop" else consumer)
    assert address(x) == r["x"].data_ptr
    if consumer == "numpy":
        with pytest.raises(ValueError):
            x[0, 0] = 42
    elif consumer == "zerohop":
        assert x.readonly
        with pytest.raises(ValueError):
            np.from_dlpack(x)[0, 0] = 42


def on_cpu(array):
    """JAX puts arrays on its default device, a GPU where there is one."""
    return jax.device_put(array, jax.devices("cpu")[0])


def test_legacy_capsules_import_readonly_so_immutable_jax_data_stays_immutable():
    j = on_cpu(jnp.arange(4.0, dtype=jnp.float32))
    z = zerohop.from_dlpack(j)
    assert z.readonly, "JAX speaks legacy DLPack: nothing says its memory may be written"
    assert z.data_ptr == j.unsafe_buffer_pointer()
    assert not np.from_dlpack(z).flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        torch.from_dlpack(z)
    torch.from_dlpack(z.copy())[0] = 42  # a private copy
    assert j.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_torch_from_dlpack_refuses_readonly_zerohop_tensors():
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    z = zerohop.from_dlpack(frozen)
    with pytest.raises(BufferError, match="torch ignores DLPack's read-only flag"):
        torch.from_dlpack(z)
    assert address(np.from_dlpack(z)) == frozen.ctypes.data  # NumPy honours the flag


def test_numpy_sees_the_same_writeability_through_zerohop_as_directly():
    # NumPy's own test_dlpack.py::test_writeable, with zerohop in the chain.
    j = on_cpu(jnp.arange(3.0))
    assert np.from_dlpack(j).flags.writeable == np.from_dlpack(zerohop.from_dlpack(j)).flags.writeable
    a = np.arange(3.0)
    assert np.from_dlpack(zerohop.from_dlpack(a)).flags.writeable
    a.flags.writeable = False
    assert not np.from_dlpack(zerohop.from_dlpack(a)).flags.writeable


def legacy_capsule_of(array):
    return array.__dlpack__()  # NumPy answers a call without max_version with a legacy capsule


def test_readonly_false_is_the_callers_word_for_legacy_producers_only():
    a = np.arange(3.0)
    writable = zerohop.from_dlpack(legacy_capsule_of(a), readonly=False)
    assert not writable.readonly and writable.data_ptr == a.ctypes.data
    torch.from_dlpack(writable)[0] = 7
    assert a[0] == 7
    assert zerohop.from_dlpack(legacy_capsule_of(a)).readonly
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    with pytest.raises(BufferError, match="marked this memory read-only"):
        zerohop.from_dlpack(frozen, readonly=False)
    copy = zerohop.from_dlpack(frozen, copy=True)
    assert not copy.readonly and copy.is_copied
    assert zerohop.from_dlpack(torch.arange(3), readonly=True).readonly


def test_versioned_producers_keep_their_writeability():
    t = torch.arange(3.0)
    z = zerohop.from_dlpack(t)
    assert not z.readonly and z.data_ptr == t.data_ptr()


# ---------------------------------------------------------------- Arrow requests


def arrow_table():
    return zerohop.from_arrow(pa.table({"a": pa.array([1, 2, 3], pa.int64()), "s": pa.array(["x", "y", "z"])}))


def test_a_cheap_requested_cast_is_made_and_reported():
    t = arrow_table()
    wanted = pa.schema([("a", pa.int32()), ("s", pa.large_string())])
    with pytest.warns(zerohop.CopyWarning, match="cast"):
        got = pa.RecordBatchReader._import_from_c_capsule(t.__arrow_c_stream__(wanted.__arrow_c_schema__()))
    assert got.schema == wanted
    assert got.read_all()["a"].to_pylist() == [1, 2, 3]


def test_a_request_that_cannot_be_met_returns_the_data_as_it_is():
    t = arrow_table()
    impossible = pa.schema([("a", pa.struct([("q", pa.int8())])), ("s", pa.int8())])
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        got = pa.RecordBatchReader._import_from_c_capsule(t.__arrow_c_stream__(impossible.__arrow_c_schema__()))
    assert got.schema == pa.schema([("a", pa.int64()), ("s", pa.string())])


def test_a_lossy_narrowing_is_not_made():
    t = zerohop.from_arrow(pa.table({"a": pa.array([1, 1 << 40], pa.int64())}))
    wanted = pa.schema([("a", pa.int32())])
    schema, array = t.__arrow_c_array__(wanted.__arrow_c_schema__())
    got = pa.RecordBatch._import_from_c_capsule(schema, array)
    assert got.schema.field("a").type == pa.int64() and got["a"].to_pylist() == [1, 1 << 40]


def test_tensor_requests_and_the_same_type_are_free():
    t = zerohop.from_dlpack(np.arange(4, dtype=np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        same = pa.array(t, type=pa.int64())
    assert same.buffers()[1].address == t.data_ptr
    with pytest.warns(zerohop.CopyWarning):
        narrowed = pa.array(t, type=pa.int32())
    assert narrowed.type == pa.int32() and narrowed.to_pylist() == [0, 1, 2, 3]


def test_a_stream_of_several_batches_stays_several_batches():
    source = pa.Table.from_batches(
        [pa.record_batch({"a": pa.array([1, 2])}), pa.record_batch({"a": pa.array([3])})]
    )
    with pytest.warns(zerohop.CopyWarning, match="chunks"):
        t = zerohop.from_arrow(source, copy=True)
    assert t["a"].numpy().tolist() == [1, 2, 3]
    again = pa.table(t)
    assert [b.num_rows for b in again.to_batches()] == [2, 1]


def test_a_producers_exception_keeps_its_type():
    class Refuses:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise TypeError("no DLPack here")

    with pytest.raises(TypeError, match="no DLPack here"):
        zerohop.from_dlpack(Refuses())


# ---------------------------------------------------------------- small frictions


@pytest.mark.parametrize(
    "dtype,name",
    [(np.float32, "float32"), (np.int16, "int16"), (np.bool_, "bool"), (np.dtype("float64"), "float64"), ("uint8", "uint8"), (torch.bfloat16, "bfloat16")],
)
def test_dtypes_as_users_write_them(dtype, name):
    t = zerohop.Table([("a", dtype)], 2)
    assert t.schema[0][1] == name


def test_a_type_numpy_does_not_know_is_refused_by_name():
    class NotADtype:
        pass

    with pytest.raises(TypeError, match="NotADtype"):
        zerohop.Table([("a", NotADtype)], 2)


def allocate_a_leak():
    return zerohop.zeros((16,), "float32")  # the line the leak report must name


def test_leak_reports_name_the_python_line():
    tracked = zm.Tracking(zm.System(), backtraces=True)
    zm.set_current(tracked)
    try:
        leak = allocate_a_leak()
    finally:
        zm.reset_current()
    (record,) = tracked.leaks()
    stack = record["python_stack"]
    assert stack.splitlines()[0].endswith("in allocate_a_leak"), stack
    assert "test_promises.py" in stack and "test_leak_reports_name_the_python_line" in stack
    assert "allocate_a_leak" in tracked.report()
    del leak
    gc.collect()
    assert tracked.leaks() == []
