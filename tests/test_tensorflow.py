"""TensorFlow (CPU) <-> zerohop through tf.experimental.dlpack: the same memory both ways.

TensorFlow's DLPack takes and gives only legacy ("dltensor") capsules, refuses strided
tensors, and has no stream argument. zerohop hands it contiguous tensors as views, strided
ones only as a reported copy (copy=True), and read-only ones as views too, since a tf.Tensor is
immutable.

These tests run in a process of their own (`make pytest` starts it with
ZEROHOP_TENSORFLOW_TESTS=1): TensorFlow loads its own LLVM, and a later import of torch's
triton (torch.compile, torch.optim's first use) in the same process then aborts with "LLVM
ERROR: inconsistency in registered CommandLine options". Importing torch first is fine.
"""

import os
import warnings

import numpy as np
import pytest

import zerohop

if not os.environ.get("ZEROHOP_TENSORFLOW_TESTS"):
    pytest.skip("TensorFlow's tests run in their own process (ZEROHOP_TENSORFLOW_TESTS=1; "
                "make pytest does that)", allow_module_level=True)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
dlpack = tf.experimental.dlpack


def tf_address(t):
    """Where a tf.Tensor's elements are, as TF's own DLPack export says."""
    return zerohop.from_dlpack(dlpack.to_dlpack(t)).data_ptr


def test_zerohop_to_tensorflow_is_the_same_memory():
    z = zerohop.zeros((3, 4), "float32")
    np.from_dlpack(z)[:] = np.arange(12).reshape(3, 4)
    t = dlpack.from_dlpack(z.__dlpack__())  # no max_version: a legacy capsule, as TF needs
    assert tf_address(t) == z.data_ptr
    assert t.numpy().tolist() == np.arange(12).reshape(3, 4).tolist()
    np.from_dlpack(z)[0, 0] = 42  # a write on zerohop's side is seen by TF's tensor
    assert float(t[0, 0]) == 42.0


def test_tensorflow_to_zerohop_is_the_same_memory_and_read_only():
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    z = zerohop.from_dlpack(t)  # TF's __dlpack__ gives a legacy capsule
    assert z.data_ptr == tf_address(t)
    assert z.readonly, "a legacy capsule cannot say the memory may be written"
    assert np.from_dlpack(z).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_tensorflow_refuses_versioned_capsules_so_the_legacy_path_is_the_way():
    z = zerohop.zeros((2,), "float32")
    with pytest.raises(Exception):
        dlpack.from_dlpack(z.__dlpack__(max_version=(1, 3)))


def test_table_columns_go_to_tensorflow_as_views():
    table = zerohop.Table([("a", "float32"), ("b", "float32")], 5)
    np.from_dlpack(table["a"])[:] = [1, 2, 3, 4, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("error", zerohop.CopyWarning)
        (a,) = table.tensors(["a"], "tensorflow")
        a_again = table.column("a", "tensorflow")
        (frozen,) = table.tensors(["a"], "tensorflow", readonly=True)
    assert isinstance(a, tf.Tensor) and a.shape == (5, 1)
    assert tf_address(a) == table["a"].data_ptr == tf_address(a_again) == tf_address(frozen)
    assert a_again.numpy().tolist() == [1, 2, 3, 4, 5]


def test_strided_groups_are_refused_or_a_reported_copy():
    table = zerohop.Table([("a", "float32"), ("b", "float32")], 5)
    np.from_dlpack(table["b"])[:] = 7
    refused = r'"kin" cannot be shared: it has strides.*C-contiguous.*copy=True'
    with pytest.raises(BufferError, match=refused):
        table.tensors({"kin": ["a", "b"]}, "tensorflow")
    with pytest.warns(zerohop.CopyWarning, match="TensorFlow takes only C-contiguous"):
        (kin,) = table.tensors({"kin": ["a", "b"]}, "tensorflow", copy=True)
    assert kin.shape == (5, 2) and kin.numpy()[:, 1].tolist() == [7] * 5
    assert tf_address(kin) != table["a"].data_ptr
