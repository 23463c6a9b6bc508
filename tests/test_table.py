"""zerohop.Table and tensor maps from Python: zero-copy into torch, jax and numpy, write-back,
every spec form and every error."""

import warnings

import numpy as np
import pytest

import zerohop
from conftest import address, jax, jnp, requires_jax, requires_torch, torch

SCHEMA = [
    ("run", "int32", "scalar"),
    ("x", "float32"),
    ("y", "float32"),
    ("z", "float32"),
    ("p", "float32", 3),
    ("q", "float32", 3),
    {"name": "cov", "dtype": "float64", "shape": (2, 3), "order": "col"},
    ("id", "int64"),
]


def filled(rows=6, **kwargs):
    t = zerohop.Table(SCHEMA, rows, **kwargs)
    for c, name in enumerate("xyz"):
        t[name].numpy()[:] = np.arange(rows) + 1000 * c
    t["p"].numpy()[:] = np.arange(rows * 3).reshape(rows, 3)
    t["q"].numpy()[:] = -np.arange(rows * 3).reshape(rows, 3)
    t["cov"].numpy()[:] = np.arange(rows * 6).reshape(rows, 2, 3)
    t["id"].numpy()[:] = np.arange(rows)
    t["run"].numpy()[...] = 42
    return t


def test_describe_schema_and_lengths():
    t = filled()
    assert len(t) == 6 and t.columns == [s[0] if isinstance(s, tuple) else s["name"] for s in SCHEMA]
    text = t.describe()
    assert "matrix[2x3, column-major]" in text and "alignment 128 B" in text
    assert t.schema[0] == ("run", "int32", "scalar")
    assert t.schema[6] == ("cov", "float64", (2, 3), "col")
    assert zerohop.Table(t.schema, 3).describe().splitlines()[1:] == zerohop.Table(SCHEMA, 3).describe().splitlines()[1:]
    assert t.alignment == 128 and t.data_ptr % 128 == 0
    assert "6 rows" in repr(t)


def test_columns_are_zero_copy_views():
    t = filled()
    x = t["x"]
    assert x.shape == (6,) and x.strides == (1,)
    assert np.from_dlpack(x).tolist() == list(range(6))
    p = t["p"]
    assert p.shape == (6, 3) and p.strides == (1, 32)
    cov = t["cov"]
    assert cov.shape == (6, 2, 3) and cov.strides == (1, 16, 32)
    assert t["run"].shape == () and int(t["run"].numpy()) == 42
    assert t.column("x", "numpy").ctypes.data == x.data_ptr
    with pytest.raises(KeyError, match="no column named"):
        t["nope"]


@requires_torch
@pytest.mark.parametrize(
    "spec",
    [
        {"pos": ["x", "y", "z"], "mom": ["p", "q"], "cov": ["cov"]},
        [("pos", ["x", "y", "z"]), ("mom", ["p", "q"]), ("cov", "cov")],
        "pos: x, y, z; mom: p, q; cov",  # the C ABI's string, by the core's one grammar
    ],
    ids=["dict", "pairs", "string"],
)
def test_tensor_map_into_torch_matches_the_cms_shapes(spec):
    t = filled()
    pos, mom, cov = t.tensors(spec, "torch")
    assert (tuple(pos.shape), pos.stride()) == ((6, 3), (1, 32))
    assert (tuple(mom.shape), mom.stride()) == ((6, 2, 3), (1, 96, 32))
    assert (tuple(cov.shape), cov.stride()) == ((6, 2, 3), (1, 16, 32))
    assert address(pos) == t["x"].data_ptr
    assert address(mom) == t["p"].data_ptr
    assert address(cov) == t["cov"].data_ptr
    assert pos[:, 1].tolist() == [1000.0 + i for i in range(6)]
    assert mom[2, 1].tolist() == [-6.0, -7.0, -8.0]
    np.testing.assert_array_equal(cov.numpy(), np.from_dlpack(t["cov"]))


def test_a_spec_string_is_refused_with_the_group_that_is_wrong():
    t = filled()
    with pytest.raises(ValueError, match=r'invalid spec: group 2 \("b: , y"\)'):
        t.tensors("a: x; b: , y")
    with pytest.raises(ValueError, match="names no tensors"):
        t.tensors(" ; ")


@requires_torch
def test_list_of_names_and_order():
    t = filled()
    ids, x = t.tensors(["x", "id"], "torch", order=["id", "x"])
    assert address(ids) == t["id"].data_ptr and tuple(ids.shape) == (6, 1)
    assert address(x) == t["x"].data_ptr
    with pytest.raises(ValueError, match="exactly once"):
        t.tensors(["x", "id"], order=["x"])


@requires_torch
def test_model_outputs_land_in_the_columns_without_write_back():
    t = filled()
    (pos,) = t.tensors({"pos": ["x", "y", "z"]}, "torch")
    (mom,) = t.tensors({"mom": ["p"]}, "torch")
    pos.mul_(2)  # in place
    torch.add(mom, 1.0, out=mom)  # out= argument
    weights = torch.eye(3) * 3
    torch.matmul(mom.clone(), weights, out=mom)
    assert np.from_dlpack(t["y"]).tolist() == [2 * (1000 + i) for i in range(6)]
    np.testing.assert_array_equal(
        np.from_dlpack(t["p"]), (np.arange(18).reshape(6, 3) + 1) * 3
    )


def test_numpy_consumer_and_read_only_maps():
    t = filled()
    (pos,) = t.tensors({"pos": ["x", "y", "z"]}, "numpy")
    assert pos.ctypes.data == t["x"].data_ptr and pos.strides == (4, 128)
    (ro,) = t.tensors({"pos": ["x", "y", "z"]}, "numpy", readonly=True)
    assert not ro.flags.writeable
    (zt,) = t.tensors({"pos": ["x", "y", "z"]}, readonly=True)
    assert isinstance(zt, zerohop.Tensor) and zt.readonly
    frozen = zerohop.Table(SCHEMA, 2, readonly=True)
    assert frozen.readonly and frozen["x"].readonly


def test_table_scalars_broadcast_or_materialise():
    t = filled()
    (run,) = t.tensors(["run"], "numpy")
    assert run.shape == (6, 1) and run.strides[0] == 0 and (run == 42).all()
    with pytest.warns(zerohop.CopyWarning, match="table scalars were repeated"):
        (run,) = t.tensors(["run"], "numpy", materialize=["run"])
    assert run.strides == (4, 4) and (run == 42).all()


def test_uneven_groups_error_or_copy_with_a_warning():
    t = filled()
    with pytest.raises(ValueError, match=r"\"zyx\".*not evenly spaced"):
        t.tensors({"zyx": ["z", "y", "x"]})
    with pytest.warns(zerohop.CopyWarning, match="zyx"):
        (zyx,) = t.tensors({"zyx": ["z", "y", "x"]}, "numpy", copy=True)
    assert zyx[0].tolist() == [2000, 1000, 0]
    assert zyx.ctypes.data != t["x"].data_ptr
    with pytest.raises(ValueError, match="mixes dtypes"):
        t.tensors({"bad": ["x", "id"]})
    with pytest.raises(ValueError, match="mixes kinds"):
        t.tensors({"bad": ["x", "p"]})
    with pytest.raises(ValueError, match="no column named"):
        t.tensors({"bad": ["nope"]})
    with pytest.raises(ValueError, match="framework"):
        t.tensors(["x"], "mxnet")
    with pytest.raises(TypeError):
        t.tensors([42])


def test_bad_schemas_name_the_column():
    with pytest.raises(ValueError, match='"x"'):
        zerohop.Table([("x", "float32"), ("x", "int8")], 3)
    with pytest.raises(ValueError, match="dtype"):
        zerohop.Table([("x", "float99")], 3)
    with pytest.raises(ValueError, match="order"):
        zerohop.Table([("m", "float32", (2, 2), "diagonal")], 3)
    with pytest.raises(ValueError, match="alignment"):
        zerohop.Table([("x", "float64")], 3, alignment=4)
    with pytest.raises(ValueError, match="needs \"dtype\""):    # as a pickled state's missing key
        zerohop.Table([{"name": "x"}], 3)


@requires_torch
def test_row_slices_are_zero_copy_minibatches():
    t = filled(100)
    batch = t.rows(32, 64)
    assert len(batch) == 32 and batch.alignment == 128
    (pos,) = batch.tensors({"pos": ["x", "y", "z"]}, "torch")
    assert address(pos) == t["x"].data_ptr + 32 * 4
    assert pos[0].tolist() == [32.0, 1032.0, 2032.0]
    odd = t.rows(3, 10)
    assert odd.alignment == 4
    assert "guaranteed alignment 4 B" in odd.describe()
    with pytest.raises(ValueError):
        t.rows(90, 120)


@requires_torch
def test_from_columns_copies_framework_arrays_into_the_layout():
    n = 5
    t = zerohop.Table.from_columns(
        {
            "e": np.arange(n, dtype=np.float32),
            "v": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
            "m": np.arange(n * 4, dtype=np.float64).reshape(n, 2, 2),
            "k": np.array(3, dtype=np.int16),
        }
    )
    assert t.schema == [("e", "float32"), ("v", "float32", 3), ("m", "float64", (2, 2), "row"), ("k", "int16", "scalar")]
    np.testing.assert_array_equal(t["v"].numpy(), np.arange(15).reshape(5, 3))
    np.testing.assert_array_equal(t["m"].numpy(), np.arange(20).reshape(5, 2, 2))
    assert int(t["k"].numpy()) == 3
    with pytest.raises(ValueError, match="rows"):
        zerohop.Table.from_columns({"a": np.zeros(3), "b": np.zeros(4)})


def test_one_spec_gives_one_rank_whatever_the_table_holds():
    # Issue #40: a one-column group is (n, 1), CMS's shape, over every kind of table; CUDA
    # tables of adopted columns are checked in tests/gpu/test_arrow_device.py.
    x, p = np.arange(5, dtype=np.float32), np.zeros((5, 3), np.float32)
    tables = {
        "soa": zerohop.Table([("x", "float32"), ("p", "float32", 3)], 5),
        "from_columns": zerohop.Table.from_columns({"x": x, "p": p}),
        "from_tensors": zerohop.Table.from_tensors({"x": x, "p": p}),
    }
    for kind, table in tables.items():
        shapes = [t.shape for t in table.tensors({"x": ["x"], "p": ["p"], "again": ["x"]})]
        assert shapes == [(5, 1), (5, 3), (5, 1)], kind
        assert table["x"].shape == (5,), kind


@requires_jax
def test_jax_takes_packed_tables_without_a_copy_and_padded_ones_with_one():
    packed = zerohop.Table([("x", "float32"), ("y", "float32"), ("z", "float32")], 7, alignment=4)
    for c, name in enumerate("xyz"):
        packed[name].numpy()[:] = np.arange(7) + 10 * c
    (pos,) = packed.tensors({"pos": ["x", "y", "z"]}, "jax")
    assert address(pos) == packed["x"].data_ptr
    assert pos[3].tolist() == [3.0, 13.0, 23.0]
    padded = filled()
    with pytest.raises(BufferError, match="JAX accepts only compact"):
        padded.tensors({"pos": ["x", "y", "z"]}, "jax")
    with pytest.warns(zerohop.CopyWarning):
        (pos,) = padded.tensors({"pos": ["x", "y", "z"]}, "jax", copy=True)
    assert pos[1].tolist() == [1.0, 1001.0, 2001.0]
    (single,) = padded.tensors(["x"], "jax")  # (n, 1): compact, shared
    assert address(single) == padded["x"].data_ptr


@requires_torch
def test_torch_tensors_keep_the_table_alive():
    import gc

    t = filled()
    x_ptr = t["x"].data_ptr
    pos, cov = t.tensors({"pos": ["x", "y", "z"], "cov": ["cov"]}, "torch")
    del t
    gc.collect()
    assert address(pos) == x_ptr
    assert pos[4].tolist() == [4.0, 1004.0, 2004.0]
    assert cov[5, 1, 2].item() == 5 * 6 + 5


@requires_torch
def test_every_column_of_a_wide_table_reaches_torch_at_its_own_address():
    # 64 float32 columns, one pitch apart, as the table bench hands them over.
    t = zerohop.Table([(f"c{k}", "float32") for k in range(64)], 1000)
    names = [f"c{k}" for k in range(64)]
    for k, name in enumerate(names):
        t[name].numpy()[:] = k
    tensors = t.tensors(names, "torch")
    for k, (name, x) in enumerate(zip(names, tensors)):
        column = t.tensors([name])[0]
        assert address(x) == column.data_ptr, name
        assert (tuple(x.shape), x.stride()) == (tuple(column.shape), tuple(column.strides))
        assert x[0].item() == k and x[999].item() == k
    # Columns out of order, of two dtypes, read-only: each column still at its address.
    mixed = zerohop.Table([("a", "float32"), ("b", "float64"), ("c", "float32"),
                           ("d", "float32")], 10)
    got = mixed.tensors(["d", "c", "a", "b"], "torch")
    assert [address(x) for x in got] == [mixed[n].data_ptr for n in "dcab"]
    assert [x.dtype for x in got] == [torch.float32, torch.float32, torch.float32, torch.float64]
    frozen = zerohop.Table([(f"c{k}", "float32") for k in range(4)], 10, readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        frozen.tensors(["c0", "c1"], "torch")
    shared = frozen.tensors(["c0", "c1", "c2"], "torch", share_readonly=True)
    assert [address(x) for x in shared] == [frozen[f"c{k}"].data_ptr for k in range(3)]
    with pytest.warns(zerohop.CopyWarning):
        copies = frozen.tensors(["c0", "c1"], "torch", copy=True)
    assert address(copies[0]) != frozen["c0"].data_ptr
