"""PyTorch (CPU) <-> zerohop through DLPack: same memory, same values, no aborts."""

import numpy as np
import pytest

import zerohop
from conftest import address, filled_zerohop, requires_torch, torch

pytestmark = requires_torch

TORCH_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
]


def torch_dtype(name):
    return getattr(torch, name)


def sample(name, shape=(3, 4)):
    values = torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape)
    return (values % 2).to(torch.bool) if name == "bool" else values.to(torch_dtype(name))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_to_zerohop_shares_memory(dtype):
    x = sample(dtype)
    t = zerohop.from_dlpack(x)
    assert t.data_ptr == address(x)
    assert t.dtype == dtype and t.shape == tuple(x.shape) and t.strides == x.stride()
    y = torch.from_dlpack(t)
    assert address(y) == address(x)
    assert torch.equal(y, x)


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_zerohop_to_torch_shares_memory(dtype):
    t = filled_zerohop((3, 4), dtype)
    y = torch.from_dlpack(t)
    assert address(y) == t.data_ptr
    assert y.dtype == torch_dtype(dtype)
    assert torch.equal(y, sample(dtype))


def test_in_place_torch_ops_land_in_zerohop_memory():
    t = filled_zerohop((4,), "float32")
    y = torch.from_dlpack(t)
    y.mul_(2)
    torch.add(y, 1, out=y)
    np.testing.assert_array_equal(t.numpy(), [1, 3, 5, 7])


@pytest.mark.parametrize(
    "make",
    [lambda x: x.t(), lambda x: x[::2, 1::3], lambda x: x[1:].t()[::2], lambda x: x[:, 3]],
    ids=["transposed", "stepped", "offset-transposed-stepped", "column"],
)
def test_non_contiguous_views_round_trip(make):
    x = make(torch.arange(60, dtype=torch.float32).reshape(6, 10))
    t = zerohop.from_dlpack(x)
    assert t.data_ptr == address(x)
    assert t.strides == x.stride()
    y = torch.from_dlpack(t)
    assert address(y) == address(x) and y.stride() == x.stride()
    assert torch.equal(y, x)


def test_zero_d_and_empty():
    s = torch.tensor(2.5)
    t = zerohop.from_dlpack(s)
    assert t.shape == () and t.data_ptr == address(s)
    assert torch.from_dlpack(t).item() == 2.5
    e = zerohop.from_dlpack(torch.zeros(0, 5))
    assert e.shape == (0, 5)
    assert torch.from_dlpack(e).shape == (0, 5)
    assert torch.from_dlpack(zerohop.zeros((3, 0))).shape == (3, 0)


def test_numpy_to_torch_through_zerohop_is_one_buffer():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = torch.from_dlpack(zerohop.from_dlpack(a))
    assert address(y) == address(a)
    y[0, 0] = -1
    assert a[0, 0] == -1


def test_negative_strides_never_reach_torch():
    # torch.from_dlpack aborts the interpreter on negative strides (torch 2.11); zerohop
    # must refuse before torch sees them.
    t = zerohop.from_dlpack(np.arange(6.0)[::-1])
    with pytest.raises(BufferError, match="negative"):
        torch.from_dlpack(t)
    copied = torch.from_dlpack(t.copy())
    assert torch.equal(copied, torch.arange(6.0).flip(0).to(torch.float64))


def test_read_only_export_uses_the_versioned_flag_and_torch_is_refused():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = zerohop.from_dlpack(a)
    capsule = t.__dlpack__(max_version=(1, 3))
    assert "dltensor_versioned" in repr(capsule)
    # torch ignores READ_ONLY, so it would get writable access: refused, a copy is offered.
    with pytest.raises(BufferError, match="read-only"):
        torch.from_dlpack(t)
    assert address(torch.from_dlpack(t.copy())) != address(a)


def test_requires_grad_tensor_is_refused_by_torch_with_its_own_error():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(Exception, match="(?i)grad|detach"):
        zerohop.from_dlpack(x)
    t = zerohop.from_dlpack(x.detach())
    assert t.data_ptr == address(x)


def test_to_framework_shares_memory_and_keeps_read_only_data_from_torch():
    t = zerohop.from_dlpack(np.arange(12.0).reshape(3, 4))
    x = t.to_framework("torch")
    assert x.data_ptr() == t.data_ptr and x.shape == (3, 4)
    assert address(t.to_framework("numpy")) == t.data_ptr
    read_only = zerohop.Table.from_tensors({"x": np.arange(5.0)}).tensors(["x"], readonly=True)[0]
    with pytest.raises(BufferError, match="read-only"):
        read_only.to_framework("torch")                    # torch ignores the flag
    with pytest.warns(zerohop.CopyWarning, match="copied"):
        copy = read_only.to_framework("torch", copy=True)
    assert copy.data_ptr() != read_only.data_ptr and copy.flatten().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match='framework: "mxnet" must be'):
        t.to_framework("mxnet")
