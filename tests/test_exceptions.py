"""One fault, one exception class, wherever it is met: the table of faults, the class each
raises and a fragment of its message. A fault reached two ways (a missing column by
`table["x"]` and by `table.tensors(["x"])`) raises the same class both ways."""

import gc
import os
import pickle
import sys

import numpy as np
import pytest

import zerohop
import zerohop.cuda
import zerohop.memory as zm


def table():
    return zerohop.Table([("x", "float64"), ("v", "float32", 2)], 10)


def missing_by_item():
    table()["nope"]


def missing_by_tensors():
    table().tensors(["nope"])


def missing_by_column():
    table().column("nope")


def pickled_tensor_reaching_outside():
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    rebuild(fmt, dict(state, shape=(11,)), data)


def pickled_tensor_with_a_negative_shape():
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    rebuild(fmt, dict(state, shape=(-1,), strides=(1,)), data)


def pickled_table_with_a_wrapping_matrix():
    rebuild, (fmt, state, data) = table().__reduce_ex__(5)
    schema = [("m", "float32", "matrix", 2 ** 32 + 1, 2 ** 32, "row")]
    rebuild(fmt, dict(state, schema=schema, rows=0, nbytes=0), data)


def stale_shared_handle():
    zm.set_current(zm.Shared())
    try:
        data = pickle.dumps(zerohop.zeros((100,), "float64"))
    finally:
        zm.reset_current()
    gc.collect()
    pickle.loads(data)


def fifo_shared_handle(tmp_path):
    zm.set_current(zm.Shared())
    try:
        t = zerohop.zeros((100,), "float64")
    finally:
        zm.reset_current()
    rebuild, (fmt, state, handle) = t.__reduce_ex__(5)
    os.mkfifo(tmp_path / "fifo")
    fd = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        rebuild(fmt, state, dict(handle, pid=os.getpid(), fd=fd, dev=st.st_dev, ino=st.st_ino))
    finally:
        os.close(fd)


def cuda_handle_from_another_machine():
    """A CUDA IPC handle made on another machine is refused by name, before the driver (here
    there is none) is asked anything."""
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    handle = dict(memory=bytes(64), event=bytes(64), offset=0, bytes=40,
                  device_uuid=bytes(16), pid=1, boot_id="0" * 36)
    rebuild(fmt, dict(state, cuda_ipc=handle), None)


def over_a_memory_limit():
    limited = zm.Limit(zm.System(), 1000)
    zm.set_current(limited)
    try:
        zerohop.zeros((1000,), "float64")
    finally:
        zm.reset_current()


def writing_a_read_only_column():
    t = table()
    view = t.tensors(["x"], readonly=True)[0]
    np.from_dlpack(view)[0] = 1.0


def schema_with_a_duplicate_name():
    zerohop.Table([("x", "float64"), ("x", "float32")], 10)


def pickled_state_without_a_field():
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    rebuild(fmt, {k: v for k, v in state.items() if k != "nbytes"}, data)


def pickled_state_with_a_field_of_the_wrong_type():
    rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
    rebuild(fmt, dict(state, shape="10"), data)


def schema_item_without_a_field():
    zerohop.Table([{"name": "x"}], 10)


def schema_item_with_a_field_of_the_wrong_type():
    zerohop.Table([("x", "float32", 2.5)], 10)


FAULTS = [
    # (fault, exception classes it must be, message fragment)
    (missing_by_item, (zerohop.NoSuchColumnError, KeyError, ValueError), 'no column named "nope"'),
    (missing_by_tensors, (zerohop.NoSuchColumnError, KeyError, ValueError),
     'no column named "nope"'),
    (missing_by_column, (zerohop.NoSuchColumnError, KeyError, ValueError),
     'no column named "nope"'),
    (pickled_tensor_reaching_outside, (ValueError,), "reach outside"),
    (pickled_tensor_with_a_negative_shape, (ValueError,), "pickled tensor"),
    (pickled_table_with_a_wrapping_matrix, (ValueError,), "components per row"),
    (stale_shared_handle, (ValueError,), "stale handle"),
    (cuda_handle_from_another_machine, (ValueError,), "made on another machine"),
    (over_a_memory_limit, (zm.OutOfMemoryError, MemoryError), "memory limit exceeded"),
    (writing_a_read_only_column, (ValueError,), "read-only"),
    (schema_with_a_duplicate_name, (ValueError,), "used twice"),
    (pickled_state_without_a_field, (ValueError,), 'lacks "nbytes"'),
    (schema_item_without_a_field, (ValueError,), 'needs "dtype"'),
    (pickled_state_with_a_field_of_the_wrong_type, (TypeError,), '"shape" must be'),
    (schema_item_with_a_field_of_the_wrong_type, (TypeError,), "column shape"),
]


def cuda_on_a_machine_without_it():
    zerohop.zeros((4,), device="cuda:0")


if not zerohop.cuda.is_available():
    FAULTS.append((cuda_on_a_machine_without_it, (ValueError,),
                   "cuda:0 does not exist (0 device(s) visible)"))


@pytest.mark.parametrize("fault, classes, says", FAULTS, ids=[f.__name__ for f, _, _ in FAULTS])
def test_each_fault_raises_its_documented_exception(fault, classes, says):
    with pytest.raises(classes[0]) as raised:
        fault()
    for cls in classes:
        assert isinstance(raised.value, cls), f"{type(raised.value)} is not a {cls.__name__}"
    assert says in str(raised.value), str(raised.value)


def test_a_failed_cuda_call_has_a_class_of_its_own():
    """A driver call that fails (zerohop::Error::Cuda) is neither bad input nor a lack of
    memory: `zerohop.CudaError`, a RuntimeError as torch's and CuPy's CUDA errors are, with
    the call, the CUresult and its symbol. (The mapping from the core's error is tested in
    Rust; a machine without a GPU cannot make the driver fail.)"""
    assert issubclass(zerohop.CudaError, RuntimeError)
    assert not issubclass(zerohop.CudaError, (ValueError, MemoryError))
    assert zerohop.CudaError.__module__ == "zerohop"
    table = open(os.path.join(os.path.dirname(__file__), "..", "docs",
                              "hostile-inputs.md")).read()
    assert "`zerohop.CudaError` (a `RuntimeError`" in table


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="shared memory is Linux-only")
def test_a_handle_naming_a_fifo_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="is a FIFO, not shared memory"):
        fifo_shared_handle(tmp_path)


def test_data_that_arrived_read_only_stays_read_only_when_realigned():
    """Read-only bytes at an address too poorly aligned for float64 are copied to realign
    them; the copy is private, but the promise was read-only, so read-only it stays."""
    t = zerohop.zeros((8,), "float64")
    rebuild, (fmt, state, data) = t.__reduce_ex__(5)
    raw = bytes(8 * 8 + 1)
    misaligned = memoryview(raw)[1:]  # read-only, one byte off
    rebuilt = rebuild(fmt, dict(state, readonly=False), misaligned)
    assert rebuilt.readonly, "realigned read-only data came back writable"
    table_rebuild, (tfmt, tstate, tdata) = table().__reduce_ex__(5)
    raw = bytes(tstate["nbytes"] + 1)
    rebuilt = table_rebuild(tfmt, dict(tstate, readonly=False), memoryview(raw)[1:])
    assert rebuilt.readonly
