"""Table.wrap: a table over memory another framework allocated (the CMS case: the data
already sits in the framework's buffers), no copy, the producer kept alive."""

import ctypes
import gc

import numpy as np
import pytest

import zerohop
from conftest import address, requires_torch, torch

SCHEMA = [("run", "int32", "scalar"), ("pt", "float32"), ("pos", "float32", 3),
          ("cov", "float32", (2, 2), "col")]


def laid_out(rows: int) -> zerohop.Table:
    """A zerohop-made table with the layout the wrapped buffers must have."""
    return zerohop.Table(SCHEMA, rows)


def test_wraps_a_numpy_buffer_in_place_and_keeps_it_alive():
    rows = 10
    nbytes = laid_out(rows).nbytes
    buffer = np.zeros(nbytes + 256, dtype=np.uint8)
    start = (-address(buffer)) % 128  # the layout's alignment, as a C++ allocator gives it
    window = buffer[start:start + nbytes]
    table = zerohop.Table.wrap(window, SCHEMA, rows)
    assert table.data_ptr == address(window)
    pt = table.column("pt", "numpy")
    pt[:] = np.arange(rows)
    del buffer, window, pt
    gc.collect()
    assert table.column("pt", "numpy").tolist() == list(range(rows))
    assert table.schema == laid_out(rows).schema


def test_wrap_over_another_table_buffer_gives_the_same_columns():
    rows = 7
    own = laid_out(rows)
    own.column("pos", "numpy")[:] = np.arange(rows * 3).reshape(rows, 3)
    assert own.data_ptr is not None
    # The whole buffer as bytes, through ctypes: memory zerohop did not hand out as a tensor.
    raw = (ctypes.c_uint8 * own.nbytes).from_address(own.data_ptr)
    wrapped = zerohop.Table.wrap(np.ctypeslib.as_array(raw), SCHEMA, rows)
    assert wrapped.data_ptr == own.data_ptr
    assert wrapped.column("pos", "numpy").tolist() == own.column("pos", "numpy").tolist()


def test_read_only_memory_gives_a_read_only_table():
    rows = 4
    buffer = np.zeros(laid_out(rows).nbytes, dtype=np.uint8)
    buffer.flags.writeable = False
    table = zerohop.Table.wrap(buffer, SCHEMA, rows, alignment=8)
    assert table.readonly


def test_refuses_a_short_or_strided_buffer_naming_it():
    rows = 10
    nbytes = laid_out(rows).nbytes
    with pytest.raises(ValueError, match="table buffer"):
        zerohop.Table.wrap(np.zeros(nbytes - 1, np.uint8), SCHEMA, rows)
    strided = np.zeros(2 * nbytes, np.uint8)[::2]
    with pytest.raises(ValueError, match="compact"):
        zerohop.Table.wrap(strided, SCHEMA, rows)


@requires_torch
def test_torch_memory_is_wrapped_where_it_lies():
    rows = 5
    block = torch.zeros(laid_out(rows).nbytes, dtype=torch.uint8)
    table = zerohop.Table.wrap(block, SCHEMA, rows, alignment=64)
    assert table.data_ptr == block.data_ptr()
    (pos,) = table.tensors({"pos": ["pos"]}, "torch")
    assert pos.data_ptr() >= block.data_ptr()
