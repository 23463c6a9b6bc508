"""JAX (CPU) <-> zerohop through DLPack: same memory, same values."""

import numpy as np
import pytest

import zerohop
from conftest import address, filled_zerohop, jax, jnp, requires_jax

pytestmark = requires_jax

JAX_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
]


def sample(dtype, shape=(3, 4)):
    values = np.arange(int(np.prod(shape))).reshape(shape)
    values = values % 2 if dtype == "bool" else values
    return jnp.asarray(values, dtype=jnp.dtype(dtype))


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax_to_zerohop_shares_memory(dtype):
    x = sample(dtype)
    t = zerohop.from_dlpack(x)
    assert t.data_ptr == address(x)
    assert t.dtype == dtype and t.shape == x.shape
    y = jnp.from_dlpack(t)
    assert address(y) == address(x)
    assert bool((y == x).all())


@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_zerohop_to_jax_shares_memory(dtype):
    t = filled_zerohop((3, 4), dtype)
    y = jnp.from_dlpack(t)
    assert address(y) == t.data_ptr
    assert y.dtype == jnp.dtype(dtype)
    assert bool((y == sample(dtype)).all())


def test_transposed_tensor_from_zerohop():
    t = filled_zerohop((3, 4), "float32")
    x = jnp.from_dlpack(t)
    z = zerohop.from_dlpack(x)
    assert z.data_ptr == t.data_ptr
    # JAX hands out only compact buffers; a transposed NumPy view imports into zerohop and
    # JAX takes it with a relayout copy of its own, which we accept but do not claim as ours.
    tt = zerohop.from_dlpack(np.from_dlpack(t).T)
    assert tt.strides == (1, 4)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(tt)), np.from_dlpack(t).T)


def test_zero_d_and_empty():
    s = zerohop.from_dlpack(jnp.asarray(1.5, dtype=jnp.float32))
    assert s.shape == ()
    assert float(jnp.from_dlpack(s)) == 1.5
    assert jnp.from_dlpack(zerohop.zeros((0, 2))).shape == (0, 2)
    assert zerohop.from_dlpack(jnp.zeros((2, 0))).shape == (2, 0)


def test_numpy_to_jax_through_zerohop_is_one_buffer():
    t = filled_zerohop((16,), "float32")
    a = np.from_dlpack(t)
    y = jnp.from_dlpack(zerohop.from_dlpack(a))
    assert address(y) == address(a)


def test_read_only_tensor_is_shared_with_jax_and_refused_to_other_legacy_consumers():
    # JAX asks only for legacy capsules, which cannot carry the read-only mark; JAX arrays are
    # immutable, so JAX gets the memory. Any other legacy consumer is refused, as NumPy does.
    ro = zerohop.from_dlpack(zerohop.zeros((4,), "float64"), readonly=True)  # 128-B aligned
    assert ro.readonly
    assert address(jnp.from_dlpack(ro)) == ro.data_ptr
    with pytest.raises(BufferError, match="read-only"):
        ro.__dlpack__()

def test_a_float64_column_without_x64_is_refused_for_the_narrowing_not_for_alignment():
    # jax_enable_x64 is a process-wide switch that conftest turns on; run JAX without it.
    import subprocess
    import sys

    script = """
import warnings
import zerohop
t = zerohop.Table([("d", "float64"), ("f", "float32")], 64, alignment=128)
(f,) = t.tensors(["f"], "jax")
assert f.unsafe_buffer_pointer() == t["f"].data_ptr, "a float32 column must still be shared"
try:
    t.tensors(["d"], "jax")
except BufferError as err:
    print("REFUSED", err)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    (d,) = t.tensors(["d"], "jax", copy=True)
print("WARNED", [str(w.message) for w in caught], d.dtype)
"""
    env = {**__import__("os").environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    refused = next(line for line in out.stdout.splitlines() if line.startswith("REFUSED"))
    assert "converts float64 to float32" in refused and "jax_enable_x64" in refused
    assert "64-byte" not in refused
    warned = next(line for line in out.stdout.splitlines() if line.startswith("WARNED"))
    assert "converts float64 to float32" in warned and warned.endswith("float32")
