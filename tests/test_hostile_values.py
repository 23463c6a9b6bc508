"""Hostile Python values handed to the binding (issue #40): a sequence whose `len()` lies, a
dict that changes while it is read, and `zerohop.pickling` blocks that overlap on threads.

Each case that could abort the interpreter (a vector pre-sized from a made-up `len()`) runs
in a child process, so an abort is a failed test and not a dead pytest. docs/hostile-inputs.md
lists every case id below with its outcome; a test keeps the two in step."""

import pickle
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm

DOCS = Path(__file__).resolve().parent.parent / "docs" / "hostile-inputs.md"

# Container types whose `__len__` lies; the child processes define them the same way.
LIARS = """
class LyingTuple(tuple):
    def __len__(self):
        return 1 << 40

class HugeTuple(tuple):
    def __len__(self):
        return 1 << 62

class LyingList(list):
    def __len__(self):
        return 1 << 40

class EndlessSequence:
    # A sequence by Python's test (it has __getitem__) that says 2^40 and never ends.
    def __len__(self):
        return 1 << 40
    def __getitem__(self, i):
        return 1
"""


def run_child(body):
    """Runs `body` (after LIARS) in a fresh interpreter; returns its stdout. An abort, a
    segfault or a Rust panic (PanicException) there fails the test with the child's stderr."""
    code = "import zerohop, numpy as np\n" + LIARS + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"child exited with {out.returncode}:\n{out.stderr[-3000:]}"
    assert "panicked" not in out.stderr and "PanicException" not in out.stderr, out.stderr
    return out.stdout


# id: (child body, what it must print). Each body prints one line, its outcome.
LYING_LENGTHS = {
    "value-pickled-shape-lying-len": ("""
        t = zerohop.zeros((2, 3), "float32")
        t.numpy()[:] = 5
        rebuild, (fmt, state, data) = t.__reduce_ex__(5)
        for liar in (LyingTuple, HugeTuple):
            back = rebuild(fmt, dict(state, shape=liar(state["shape"])), data)
            assert back.shape == (2, 3) and (back.numpy() == 5).all()
        print("read its stored items")
        """, "read its stored items"),
    "value-schema-lying-len": ("""
        table = zerohop.Table(LyingList([LyingTuple(("x", "float64")), ("v", "float32", 2)]), 4)
        assert [c[0] for c in table.schema] == ["x", "v"]
        table = zerohop.Table(HugeTuple([("x", "float64")]), 4)
        print("read its stored items")
        """, "read its stored items"),
    "value-spec-lying-len": ("""
        table = zerohop.Table([("x", "float32"), ("y", "float32")], 4)
        (xy,) = table.tensors(LyingList([("xy", LyingTuple(("x", "y")))]))
        assert xy.shape == (4, 2)
        (xy,) = table.tensors({"xy": HugeTuple(("x", "y"))})
        print("read its stored items")
        """, "read its stored items"),
    "args-shape-lying-len": ("""
        assert zerohop.zeros(LyingTuple((2, 3))).shape == (2, 3)
        assert zerohop.zeros(HugeTuple((2,))).shape == (2,)
        try:
            zerohop.zeros(EndlessSequence())
        except ValueError as e:
            print(e)
        """, "shape has more than 64 items"),
    "args-names-lying-len": ("""
        table = zerohop.Table([("x", "float32"), ("y", "float32")], 4)
        (x, y) = table.tensors(["x", "y"], order=LyingList(["x", "y"]))
        (x, y) = table.tensors(["x", "y"], materialize=HugeTuple(()))
        a = np.arange(3.0)
        made = zerohop.Table.from_columns(LyingList([LyingTuple(("a", a))]))
        assert (made["a"].numpy() == a).all()
        try:
            table.tensors(["x"], order=EndlessSequence())
        except (ValueError, TypeError) as e:
            print(e)
        """, "order"),
    "ai-shape-lying-len": ("""
        backing = np.arange(6, dtype=np.float32)
        class Producer:
            __array_interface__ = {"version": 3, "shape": LyingTuple((2, 3)), "typestr": "<f4",
                                   "data": (backing.ctypes.data, False)}
        from zerohop._zerohop import from_array_interface
        t = from_array_interface(Producer())
        assert t.shape == (2, 3) and t.data_ptr == backing.ctypes.data
        Producer.__array_interface__ = dict(Producer.__array_interface__,
                                            shape=EndlessSequence())
        try:
            from_array_interface(Producer())
        except ValueError as e:
            print(e)
        """, "shape"),
}


@pytest.mark.parametrize("case", sorted(LYING_LENGTHS))
def test_a_lying_len_is_never_trusted(case):
    """A list or tuple (or subclass) is read by the items it stores and any other sequence
    by iteration with a bound: a `__len__` of 2^40 used to abort the process (a vector
    pre-sized from it) and 2^62 to panic ("capacity overflow")."""
    body, expected = LYING_LENGTHS[case]
    assert expected in run_child(body)


class Mutating:
    """A dtype-like object whose attribute look-up (the binding asks for `itemsize`) adds
    keys to the dict it sits in, while the binding is reading that dict."""

    def __init__(self, owner):
        self.owner = owner

    def __getattr__(self, name):
        for i in range(100):
            self.owner[f"extra{i}"] = i
        raise AttributeError(name)


def test_a_schema_dict_that_changes_while_read_is_refused_cleanly():
    """value-dict-changes-while-read: a schema item dict that grows while the binding reads
    it used to be a Rust panic ("dictionary changed size during iteration"); it is read from
    a snapshot, and the bad dtype is a TypeError naming it."""
    item = {"name": "x", "dtype": None}
    item["dtype"] = Mutating(item)
    with pytest.raises((TypeError, ValueError), match="dtype"):
        zerohop.Table([item], 4)
    assert "extra0" in item, "the dict did change during the read"


def test_a_columns_dict_that_changes_while_read_is_read_from_a_snapshot():
    """Table.from_columns reads its {name: array} dict from a snapshot: converting one array
    (which runs the producer's Python code) may change the dict without breaking the read."""
    columns = {}

    class Growing:
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            columns.update({f"late{i}": np.zeros(4) for i in range(50)})
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    columns["x"] = Growing(np.arange(4.0))
    table = zerohop.Table.from_columns(columns)
    assert [c[0] for c in table.schema] == ["x"] and len(columns) == 51


def test_a_rebound_exception_class_is_no_panic(monkeypatch):
    """errors-rebound-exception-class: with `zerohop.NoSuchColumnError` rebound to something
    that is not a class, a missing column used to be a Rust panic ("an exception class"); it
    is a ValueError naming the column."""
    table = zerohop.Table([("x", "float32")], 4)
    monkeypatch.setattr(zerohop, "NoSuchColumnError", 5)
    with pytest.raises(ValueError, match='no column named "zz"'):
        table["zz"]


# --- zerohop.pickling on threads ---------------------------------------------------------


@pytest.fixture
def shared():
    """Shared memory as the current resource, so that pickles carry handles by default."""
    try:
        resource = zm.Shared()
    except ValueError:
        pytest.skip("shared memory needs Linux")
    zm.set_current(resource)
    try:
        yield resource
    finally:
        zm.reset_current()


def carries_handle(tensor):
    return isinstance(tensor.__reduce_ex__(5)[1][2], dict)


def test_pickling_blocks_overlapping_on_two_threads(shared):
    """pickling-overlapping-threads: thread A opens a bytes block, B opens one, A closes while
    B's is still open, then B closes. Inside B's block pickles must still carry bytes (the
    old flag, restored by A, turned them back into handles), and once both have closed they
    must share again (B restored the "on" it found, leaving bytes on for good)."""
    t = zerohop.zeros((1000,), "float64")
    assert carries_handle(t)
    step = threading.Barrier(2, timeout=30)
    seen = {}
    errors = []

    def a():
        try:
            with zerohop.pickling(across_machines="bytes"):
                step.wait()  # 1: A open
                step.wait()  # 2: B open
            step.wait()  # 3: A closed
            step.wait()  # 4: B looked
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            step.abort()

    def b():
        try:
            step.wait()  # 1
            with zerohop.pickling(across_machines="bytes"):
                step.wait()  # 2
                step.wait()  # 3
                seen["inside B after A closed"] = carries_handle(t)
                data = pickle.dumps(t, protocol=4)
                seen["bytes travel"] = len(data) > 8000
                step.wait()  # 4
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            step.abort()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert seen == {"inside B after A closed": False, "bytes travel": True}
    assert carries_handle(t), "handles again once every block has closed"
    assert not zerohop._zerohop._pickling_across_machines()


def test_one_pickling_object_entered_on_two_threads(shared):
    """The same `pickling` object (a module-level one, say) used by two threads at once: each
    `with` opens its own block, and one thread leaving does not close the other's."""
    t = zerohop.zeros((10,), "float64")
    block = zerohop.pickling(across_machines="bytes")
    step = threading.Barrier(2, timeout=30)
    seen = []

    def first():
        with block:
            step.wait()  # both inside
        step.wait()  # first left

    def second():
        with block:
            step.wait()
            step.wait()
            seen.append(carries_handle(t))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [False], "bytes while the second thread's block is open"
    assert carries_handle(t), "handles again once both have left"


def test_a_block_that_is_collected_unclosed_closes():
    """A block object dropped without close() (a generator abandoned mid-block, a lost
    reference) closes: it cannot leave every later pickle copying."""
    block = zerohop._zerohop._AcrossMachinesBlock()
    assert zerohop._zerohop._pickling_across_machines()
    del block
    assert not zerohop._zerohop._pickling_across_machines()
    closed = zerohop._zerohop._AcrossMachinesBlock()
    closed.close()
    closed.close()  # closing again changes nothing
    assert not zerohop._zerohop._pickling_across_machines()


def test_a_none_block_does_not_switch_off_another_block():
    """`pickling(across_machines=None)` changes nothing: it cannot switch off a block that
    another thread (or an outer `with`) holds open."""
    with zerohop.pickling(across_machines="bytes"):
        with zerohop.pickling():
            assert zerohop._zerohop._pickling_across_machines()
        assert zerohop._zerohop._pickling_across_machines()
    assert not zerohop._zerohop._pickling_across_machines()


def all_case_ids():
    return set(LYING_LENGTHS) | {"value-dict-changes-while-read",
                                 "pickling-overlapping-threads",
                                 "errors-rebound-exception-class"}


def test_the_docs_page_lists_every_case():
    text = DOCS.read_text()
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.M))
    missing = all_case_ids() - listed
    assert not missing, f"docs/hostile-inputs.md lacks {sorted(missing)}"


@pytest.mark.parametrize("call, error, says", [
    (lambda: zerohop.Table([("x", "float32")], -1), ValueError, "rows must be an int from 0"),
    (lambda: zerohop.Table([("x", "float32")], 2**70), ValueError, "rows must be an int from 0"),
    (lambda: zerohop.Table([("x", "float32")], "4"), TypeError, "rows must be an int, got str"),
    (lambda: zerohop.Table([("x", "float32")], 4).column(3), TypeError, "name must be a column"),
    (lambda: zerohop.Table([("x", "float32")], 4).to(3), TypeError, "device must be a device"),
    (lambda: zerohop.zeros((2,)).to_framework(3), TypeError, "framework must be 'torch'"),
    (lambda: zerohop.zeros((2,)).set_stream(-1), ValueError, "stream must be an int from 0"),
    (lambda: zerohop.zeros((2,), device=1), TypeError, "device must be a device"),
])
def test_argument_errors_name_the_argument_and_what_it_takes(call, error, says):
    with pytest.raises(error, match=says):
        call()


def test_zeros_takes_the_dtypes_a_table_takes():
    np = pytest.importorskip("numpy")
    assert zerohop.zeros((2,), np.float64).dtype == "float64"
    assert zerohop.zeros((2,), np.dtype("int16")).dtype == "int16"
    assert zerohop.zeros((3,)).dtype == "float32"
