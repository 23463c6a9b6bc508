"""zerohop.memory from Python: stacks, the current resource, limits, leaks, logs, NumPy."""

import csv
import ctypes
import gc
import threading

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm


@pytest.fixture(autouse=True)
def restore_default_resource():
    yield
    zm.reset_current()


def test_a_stack_reports_what_passes_through_it():
    pool = zm.Pool(zm.System(), initial=1 << 20)
    top = zm.Stats(pool)
    zm.set_current(top)
    assert zm.get_current() is top
    t = zerohop.zeros((1000,), "float64")
    s = zm.stats()
    assert s["current_bytes"] == 8000 and s["current_count"] == 1
    assert pool.usage()["in_use"] >= 8000
    assert t.data_ptr % 128 == 0
    del t
    gc.collect()
    s = zm.stats()
    assert s["current_bytes"] == 0 and s["total_count"] == 1 and s["peak_bytes"] == 8000
    assert dict(s["histogram"]) == {8192: 1}
    assert repr(top) == "Stats(Pool(System()))"
    reserved = pool.usage()["reserved"]
    assert reserved >= 1 << 20
    assert pool.release() == reserved


def test_pool_release_gives_idle_chunks_back():
    pool = zm.Pool(zm.System())
    addrs = [pool.allocate(300_000) for _ in range(3)]
    assert pool.usage()["chunks"] >= 1
    for a in addrs:
        pool.deallocate(a, 300_000)
    reserved = pool.usage()["reserved"]
    assert pool.release() == reserved
    assert pool.usage() == {"reserved": 0, "in_use": 0, "chunks": 0, "free_blocks": 0}


def test_limit_raises_memory_error_with_the_numbers():
    zm.set_current(zm.Limit(zm.System(), 10_000))
    held = zerohop.zeros((1000,), "float64")
    with pytest.raises(MemoryError) as info:
        zerohop.zeros((1000,), "float64")
    err = info.value
    assert isinstance(err, zm.OutOfMemoryError)
    assert (err.requested, err.in_use, err.limit) == (8000, 8000, 10_000)
    assert "8000" in str(err) and "10000" in str(err)
    del held
    gc.collect()
    zerohop.zeros((1000,), "float64")  # room again


def test_tracking_reports_a_planted_leak_with_its_backtrace():
    tracker = zm.Tracking(zm.System(), backtraces=True)

    def plant_leak():
        return tracker.allocate(4096)

    leaked = plant_leak()
    freed = tracker.allocate(64)
    tracker.deallocate(freed, 64)
    leaks = zm.leaks(tracker)
    assert [(l["address"], l["bytes"]) for l in leaks] == [(leaked, 4096)]
    # The Python lines name where it was made, the Rust frames which function allocated: the
    # extension keeps its symbol table (release builds drop only debug info).
    assert "in plant_leak" in leaks[0]["python_stack"].splitlines()[0], leaks[0]["python_stack"]
    assert "TrackingResource as zerohop::memory::MemoryResource>::allocate" in \
        leaks[0]["backtrace"].splitlines()[0], leaks[0]["backtrace"]
    assert "1 allocation(s) outstanding, 4096 bytes" in tracker.report()
    tracker.deallocate(leaked, 4096)
    assert zm.leaks(tracker) == [] and tracker.report() == ""


def test_a_leak_report_names_the_rust_call_that_allocated():
    tracker = zm.Tracking(zm.System(), backtraces=True)
    zm.set_current(tracker)
    try:
        kept = zerohop.zeros((1000,), "float32")
    finally:
        zm.reset_current()
    (leak,) = zm.leaks(tracker)
    assert "zerohop::buffer::Buffer::allocate" in leak["backtrace"], leak["backtrace"]
    del kept


def test_log_is_csv_that_parses(tmp_path):
    path = tmp_path / "alloc.csv"
    logged = zm.Log(zm.System(), path)
    a = logged.allocate(123)
    logged.deallocate(a, 123)
    logged.flush()
    rows = list(csv.DictReader(path.open()))
    assert [r["action"] for r in rows] == ["allocate", "free"]
    assert all(int(r["pointer"], 16) == a and r["size"] == "123" for r in rows)
    assert all(int(r["time_us"]) >= 0 for r in rows)
    with pytest.raises(ValueError, match="log path"):
        zm.Log(zm.System(), tmp_path / "missing" / "dir" / "x.csv")


def test_stats_and_leaks_say_what_to_wrap_when_missing():
    zm.set_current(zm.Pool(zm.System()))
    with pytest.raises(TypeError, match="Stats"):
        zm.stats()
    with pytest.raises(TypeError, match="Tracking"):
        zm.leaks()


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="maximum"):
        zm.Pool(zm.System(), initial=100, maximum=10)
    with pytest.raises(TypeError):
        zm.Pool("not a resource")
    with pytest.raises(MemoryError, match="pool maximum"):
        zm.Pool(zm.System(), maximum=1 << 20).allocate(2 << 20)


def test_numpy_arrays_allocate_from_the_pool_and_outlive_the_hook():
    top = zm.Stats(zm.Pool(zm.System()))
    with zm.use_for_numpy(top):
        a = np.ones(100_000)
        b = np.zeros((10, 10), np.int32)
        c = np.empty(0)
        grown = np.resize(np.arange(10.0), 50_000)
    s = top.stats()
    assert s["current_count"] >= 3
    assert s["current_bytes"] >= 800_000 + 400
    assert a.ctypes.data % 128 == 0
    assert a.sum() == 100_000 and b.sum() == 0 and c.size == 0 and grown[-1] == 9.0
    after = np.ones(10)  # allocated by NumPy's default handler again
    assert top.stats()["current_count"] == s["current_count"]
    del a, b, c, grown, after
    gc.collect()
    assert top.stats()["current_bytes"] == 0


def test_numpy_hook_can_be_restored_by_hand_and_reports_its_name():
    handle = zm.use_for_numpy(zm.System())
    names = []
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # NumPy 1.x
        from numpy.core.multiarray import get_handler_name
    names.append(get_handler_name())
    handle.restore()
    handle.restore()  # idempotent
    names.append(get_handler_name())
    assert names == ["zerohop", "default_allocator"]


def c_symbols(malloc_symbol=zm.C_MALLOC_SYMBOL):
    """The extension's C allocator as ctypes functions: (malloc, free), with the signatures
    torch's pluggable allocator loads."""
    lib = ctypes.CDLL(zm.library_path())
    malloc = getattr(lib, malloc_symbol)
    malloc.restype = ctypes.c_void_p
    malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free = getattr(lib, zm.C_FREE_SYMBOL)
    free.restype = None
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    return malloc, free


def test_c_allocator_symbols_serve_the_current_host_resource():
    top = zm.Stats(zm.Pool(zm.System()))
    zm.set_current(top)
    malloc, free = c_symbols()
    p = malloc(1 << 16, -1, None)
    assert p and p % 256 == 0
    ctypes.memset(p, 7, 1 << 16)
    assert top.stats()["current_bytes"] == 1 << 16
    free(p, 1 << 16, -1, None)
    assert top.stats()["current_bytes"] == 0
    # Refusals come back as NULL to C, and are raised on the calling Python thread (a
    # SystemError from ctypes, caused by zerohop's error), as for a resource that refuses.
    for size, device, reason in ((-5, -1, "-5 is negative"), (64, 3, "cuda:3")):
        with pytest.raises(SystemError) as caught:
            malloc(size, device, None)
        assert isinstance(caught.value.__cause__, ValueError)
        assert reason in str(caught.value.__cause__)
    free(None, 0, -1, None)  # freeing NULL is a no-op
    free(p, -5, -1, None)  # a refused free is dropped: nothing raised, nothing freed


def test_a_framework_resource_takes_the_c_symbols_until_it_is_ended():
    # `install` puts torch's share there; once ended, the symbols serve the current resource
    # again (another extension following zerohop's current resource was served from an
    # ended installation's share), and a block still goes back to the resource that made it.
    current, framework = zm.Stats(zm.System()), zm.Stats(zm.System())
    zm.set_current(current)
    malloc, free = c_symbols()
    try:
        zm.set_framework_resource(framework)
        early = malloc(4096, -1, None)
        assert framework.stats()["current_bytes"] == 4096
        assert current.stats()["current_bytes"] == 0
        zm.set_framework_resource(None, "cpu")
        late = malloc(512, -1, None)
        assert current.stats()["current_bytes"] == 512
        free(early, 4096, -1, None)
        free(late, 512, -1, None)
        assert framework.stats()["current_bytes"] == current.stats()["current_bytes"] == 0
        with pytest.raises(ValueError, match="gpu:7"):
            zm.set_framework_resource(None, "gpu:7")
    finally:
        zm.set_framework_resource(None, "cpu")
        zm.reset_current()


def test_a_refusal_through_the_c_symbols_is_also_raised_in_python():
    # torch's pluggable allocator ignores NULL; the refusal must surface in Python anyway.
    zm.set_current(zm.Limit(zm.System(), 1 << 20))
    try:
        malloc, _ = c_symbols()
        with pytest.raises(SystemError) as caught:
            malloc(2 << 20, -1, None)
        assert isinstance(caught.value.__cause__, zm.OutOfMemoryError)
        assert caught.value.__cause__.requested == 2 << 20
    finally:
        zm.reset_current()


def test_the_quiet_c_symbol_returns_null_and_keeps_the_reason_for_this_thread():
    # torch's caching allocator over a MemPool checks for NULL, frees its cache, retries and
    # raises its own error: nothing may be left raised behind it, and the reason waits.
    zm.set_current(zm.Limit(zm.System(), 1 << 20))
    try:
        malloc, free = c_symbols(zm.C_QUIET_MALLOC_SYMBOL)
        assert malloc(2 << 20, -1, None) is None
        seen = []
        other = threading.Thread(target=lambda: seen.append(zm.take_refusal()))
        other.start()
        other.join()
        assert seen == [None], "another thread's refusal is not this one's"
        reason = zm.take_refusal()
        assert reason is not None and str(2 << 20) in reason and str(1 << 20) in reason
        assert zm.take_refusal() is None
        assert malloc(2 << 20, -1, None) is None
        p = malloc(64, -1, None)
        assert p, "within the limit"
        assert zm.take_refusal() is None, "a later success clears a recovered refusal"
        free(p, 64, -1, None)
    finally:
        zm.reset_current()


def test_install_refuses_an_unknown_torch_mode_before_touching_anything():
    with pytest.raises(ValueError, match="torch_mode must be one of"):
        zm.install(torch=True, torch_mode="caching")


def test_many_threads_share_one_pool_without_losing_blocks():
    tracker = zm.Tracking(zm.System())
    pool = zm.Pool(tracker)
    arena = zm.Arena(pool)
    top = zm.Stats(arena)
    zm.set_current(top)
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            live = []
            for _ in range(300):
                live.append(zerohop.zeros((int(rng.integers(1, 20_000)),), "uint8"))
                if len(live) > 10:
                    live.pop(int(rng.integers(0, len(live))))
            live.clear()
            arena.release()  # flush this thread's cache
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not errors
    assert top.stats()["current_count"] == 0
    assert pool.usage()["in_use"] == 0
    zm.reset_current()
    pool.release()
    assert tracker.leaks() == []


def test_on_failure_frees_then_retries_once_and_survives_a_bad_callback(monkeypatch):
    limit = zm.Limit(zm.System(), 1 << 20)
    hog = [zm.Block(limit, 900 << 10)]
    asked = []

    def spill(nbytes):
        asked.append(nbytes)
        hog.clear()  # the Block's death frees its memory
        return True

    guarded = zm.OnFailure(limit, spill)
    block = zm.Block(guarded, 512 << 10)
    assert asked == [512 << 10] and block.ptr
    assert repr(guarded).startswith("OnFailure")

    # Asked to retry with nothing freed: one retry, then zerohop's numbers.
    with pytest.raises(zm.OutOfMemoryError, match="requested 2097152"):
        zm.Block(guarded, 2 << 20)
    assert asked == [512 << 10, 2 << 20]

    # A callback that raises: reported to sys.unraisablehook, counted as giving up.
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    failing = zm.OnFailure(limit, lambda n: 1 / 0)
    with pytest.raises(zm.OutOfMemoryError):
        zm.Block(failing, 2 << 20)
    assert len(unraisable) == 1 and unraisable[0].exc_type is ZeroDivisionError

    # A callback allocating through the same resource gets a plain refusal, no recursion.
    inner = []

    def greedy(nbytes):
        try:
            zm.Block(reentrant, nbytes)
        except zm.OutOfMemoryError as e:
            inner.append(e)
        return False

    reentrant = zm.OnFailure(limit, greedy)
    with pytest.raises(zm.OutOfMemoryError):
        zm.Block(reentrant, 2 << 20)
    assert len(inner) == 1
    assert zm.Block(reentrant, 1024).nbytes == 1024, "still usable"
