"""Many threads at once: hand-offs zerohop -> NumPy/torch -> zerohop, tensor maps of one shared
Table, allocations through one shared zerohop.memory stack, and producers made on one thread
and dropped on another. A Tracking adaptor under everything proves that every allocation was
freed exactly once: no leak, and no double or foreign free (the tracker records and refuses
those instead of passing them to the pool)."""

import queue
import threading

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm
from conftest import address, assert_all_freed_once, requires_torch, torch

THREADS = 8
ROUNDS = 150
N = 256




def run_threads(target, count=THREADS):
    """Starts `count` threads released together by a barrier; returns the errors they raised."""
    barrier = threading.Barrier(count)
    errors = []

    def body(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # reported to the main thread, with the thread index
            errors.append((i, repr(exc)))
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a worker hung"
    return errors


@requires_torch
def test_eight_threads_of_hand_offs_through_one_tracked_pool(tracking):
    table = zerohop.Table([("x", "float32"), ("y", "float32"), ("z", "float32"), ("id", "int64")], 64)
    for c, name in enumerate("xyz"):
        table[name].numpy()[:] = np.arange(64) + 1000 * c
    table_ptr = table["x"].data_ptr
    # Thread i hands its producers to thread i + 1, which checks and drops them.
    mailboxes = [queue.Queue() for _ in range(THREADS)]
    received = [0] * THREADS
    done = object()

    def drain(i, block):
        while True:
            try:
                item = mailboxes[i].get(block=block, timeout=30 if block else None)
            except queue.Empty:
                return False
            if item is done:
                return True
            producer, views, value, ptr = item
            assert producer.data_ptr == ptr
            assert all(address(v) == ptr for v in views)
            assert np.from_dlpack(producer)[N - 1] == value
            received[i] += 1
            del producer, views, item  # the last references: deleters run on this thread

    def worker(i):
        out = mailboxes[(i + 1) % THREADS]
        sender_done = False
        for k in range(ROUNDS):
            value = float(i * 10_000 + k)
            t = zerohop.zeros((N,), "float32")
            assert t.data_ptr % 128 == 0
            n = np.from_dlpack(t)
            assert address(n) == t.data_ptr
            n[:] = value - 1
            x = torch.from_dlpack(t)
            assert x.data_ptr() == t.data_ptr
            x.add_(1)  # releases the GIL while it writes through the shared pointer
            back = zerohop.from_dlpack(x)
            assert back.data_ptr == t.data_ptr and n[0] == value
            again = torch.from_dlpack(zerohop.from_dlpack(n))
            assert again.data_ptr() == t.data_ptr
            pos, ids = table.tensors({"pos": ["x", "y", "z"], "id": ["id"]}, "torch")
            assert pos.data_ptr() == table_ptr and pos[5, 2].item() == 2005.0
            assert ids.shape[0] == 64 and ids.data_ptr() == table["id"].data_ptr
            out.put((back, [n, x, again], value, t.data_ptr))
            del t, n, x, back, again, pos, ids
            sender_done = sender_done or drain(i, block=False)
        out.put(done)
        assert sender_done or drain(i, block=True)

    errors = run_threads(worker)
    assert errors == []
    assert sum(received) == THREADS * ROUNDS
    assert all(q.empty() for q in mailboxes)
    assert zm.leaks(tracking) != [], "the table is still alive, so something is outstanding"
    del table
    assert_all_freed_once(tracking)


def test_allocations_and_frees_race_on_one_shared_stack(tracking):
    """zerohop.zeros from 8 threads, each freeing another thread's tensors, plus direct
    allocate/deallocate calls on the same tracker."""
    handoff = queue.Queue()
    pointers = set()
    lock = threading.Lock()

    def worker(i):
        mine = []
        for k in range(300):
            size = 16 + (k * 37 + i) % 4000
            t = zerohop.zeros((size,), "uint8")
            raw = tracking.allocate(size)
            with lock:
                assert raw not in pointers and t.data_ptr not in pointers, "handed out twice"
                pointers.update((raw, t.data_ptr))
            t.numpy()[:] = i
            mine.append((t, i))
            with lock:
                pointers.discard(raw)
            tracking.deallocate(raw, size)
            if len(mine) == 10:
                handoff.put(mine)
                mine = []
            try:
                batch = handoff.get_nowait()
            except queue.Empty:
                continue
            assert all((tensor.numpy() == owner).all() for tensor, owner in batch)
            with lock:
                pointers.difference_update(tensor.data_ptr for tensor, _ in batch)
            del batch  # freed here, maybe on another thread than its allocation
        handoff.put(mine)

    errors = run_threads(worker)
    assert errors == []
    while not handoff.empty():
        handoff.get_nowait()
    assert_all_freed_once(tracking)


def test_numpy_hook_shared_by_threads(tracking):
    """NumPy allocating through the tracked stack from 8 threads; arrays die on other threads."""
    handoff = queue.Queue()

    def worker(i):
        for k in range(200):
            a = np.full(100 + k, i, dtype=np.int32)
            t = zerohop.from_dlpack(a)
            assert t.data_ptr == address(a)
            handoff.put(a)
            b = handoff.get()
            assert (b == b[0]).all()
            del a, b, t

    with zm.use_for_numpy(tracking):
        errors = run_threads(worker)
    assert errors == []
    assert handoff.empty()
    assert_all_freed_once(tracking)


def test_arrow_from_several_threads(tracking):
    pa = pytest.importorskip("pyarrow")
    source = pa.table({"a": np.arange(1000, dtype=np.float64), "b": np.arange(1000, dtype=np.int32)})
    a_ptr = source.column("a").chunks[0].buffers()[1].address
    shared = zerohop.from_arrow(source)

    def worker(i):
        for k in range(100):
            mine = zerohop.from_arrow(source)
            assert mine["a"].data_ptr == a_ptr == shared["a"].data_ptr
            back = pa.table(mine)
            assert back.column("a").chunks[0].buffers()[1].address == a_ptr
            assert back.column("b").to_pylist()[k] == k
            own = zerohop.zeros((16,), "int64")
            own.numpy()[:] = i
            arr = pa.array(own)
            assert arr.buffers()[1].address == own.data_ptr
            round_trip = zerohop.from_arrow(arr)["values"]
            assert round_trip.data_ptr == own.data_ptr
            del own  # pyarrow's and zerohop's views keep the memory alive
            assert arr.to_pylist() == [i] * 16
            assert np.from_dlpack(round_trip).sum() == 16 * i
            out = pa.table(shared)
            assert out.num_rows == 1000

    errors = run_threads(worker)
    assert errors == []
    del shared
    assert_all_freed_once(tracking)


def test_rust_threads_with_the_gil_released_beside_python_hand_offs(tracking, tmp_path):
    """read_csv and segment release the GIL and run on Rust's worker threads, allocating from
    the same tracked pool the Python threads hand tensors through meanwhile; tables die on
    threads other than the one that made them."""
    ecg = pytest.importorskip("zerohop_ecg")  # the ECG app (apps/ecg), when installed

    rate = 250.0
    csv = tmp_path / "ecg.csv"
    ecg.synthesize(20.0, rate=rate, seed=3, csv=str(csv))
    expected = np.from_dlpack(ecg.segment(ecg.read_csv(str(csv))["mv"], rate)["beats"]).copy()
    handoff = queue.Queue()

    def worker(i):
        for k in range(6):
            if i % 2 == 0:
                table = ecg.read_csv(str(csv))  # GIL released, parsed on Rust threads
                column = table["mv"]
                result = ecg.segment(column, rate)  # GIL released
                beats = np.from_dlpack(result["beats"])
                assert beats.shape == expected.shape and (beats == expected).all()
                handoff.put((table, column))
            else:
                t = zerohop.zeros((1000 + k,), "float32")
                np.from_dlpack(t)[:] = i
                handoff.put((t, t))
            try:
                other = handoff.get_nowait()
            except queue.Empty:
                continue
            assert address(np.from_dlpack(other[1])) == other[1].data_ptr
            del other  # maybe another thread's table: freed here

    errors = run_threads(worker)
    assert errors == []
    while not handoff.empty():
        handoff.get_nowait()
    assert_all_freed_once(tracking)
