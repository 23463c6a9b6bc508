"""zerohop.memory.Shared: tensors and tables in it pickle as a handle (never the bytes), other
processes on the machine map the same memory (a write after the hand-off shows on both sides),
and the kernel frees a segment once no process holds it, even when the producer is killed."""

import gc
import multiprocessing as mp
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="zerohop's shared memory is Linux-only")

DOCS = Path(__file__).resolve().parent.parent / "docs" / "processes.md"


@pytest.fixture
def shared():
    resource = zm.Shared()
    zm.set_current(resource)
    try:
        yield resource
    finally:
        zm.reset_current()


def handle_of(obj):
    """The shared-memory handle an object pickles as (a dict), or what it pickles as."""
    return obj.__reduce_ex__(4)[1][2]


def holders(name):
    """Pids of this user's processes that hold segment `name` (a descriptor or a mapping)."""
    mark = f"/memfd:{name} (deleted)"
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                if any(mark in line for line in maps):
                    found.add(int(pid))
                    continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == mark:
                    found.add(int(pid))
                    break
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def test_shared_tensors_pickle_as_a_handle_at_every_protocol(shared):
    t = zerohop.zeros((100_000,), "float64")
    t.numpy()[:] = 1234.5678
    handle = handle_of(t)
    assert handle["shared"].startswith(f"zerohop-{os.getpid()}-")
    assert (handle["offset"], handle["nbytes"]) == (0, t.nbytes)
    assert handle["segment_bytes"] % os.sysconf("SC_PAGE_SIZE") == 0
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        buffers = []
        data = pickle.dumps(t, protocol=protocol, buffer_callback=buffers.append
                            if protocol >= 5 else None)
        assert len(data) < 1000 and not buffers
        assert np.float64(1234.5678).tobytes() not in data, "no data bytes in the pickle"
        u = pickle.loads(data)
        assert u.data_ptr == t.data_ptr          # this process maps the segment once
    assert holders(handle["shared"]) == {os.getpid()}


def test_tables_read_only_views_and_numpy_arrays_in_shared_memory(shared):
    table = zerohop.Table([("x", "float32"), ("v", "float64", 3)], 50)
    assert "shared" in handle_of(table)
    u = pickle.loads(pickle.dumps(table))
    assert u.data_ptr == table.data_ptr and u.schema == table.schema
    ro = zerohop.from_dlpack(zerohop.zeros((10,), "int32"), readonly=True)
    assert pickle.loads(pickle.dumps(ro)).readonly
    with zm.use_for_numpy(shared):
        a = np.arange(1000.0)
    assert "shared" in handle_of(zerohop.from_dlpack(a))
    assert pickle.loads(pickle.dumps(zerohop.from_dlpack(a[10:20]))).data_ptr == a[10:].ctypes.data


def test_pooled_shared_memory_puts_many_tensors_in_one_segment():
    zm.set_current(zm.Pool(zm.Shared(), initial=1 << 20))
    try:
        a, b = zerohop.zeros((100,), "float32"), zerohop.zeros((100,), "float32")
        ha, hb = handle_of(a), handle_of(b)
        assert ha["shared"] == hb["shared"] and ha["offset"] != hb["offset"]
        assert pickle.loads(pickle.dumps(b)).data_ptr == b.data_ptr
    finally:
        zm.reset_current()


def test_monotonic_shared_memory_keeps_a_freed_result_for_whoever_mapped_it():
    """Monotonic over Shared: many results in one segment, and a block freed by the producer
    is never handed out again, so a consumer's view of it keeps its values."""
    mono = zm.Monotonic(zm.Shared(), chunk=1 << 20)
    zm.set_current(mono)
    try:
        results = [zerohop.zeros((1000,), "float32") for _ in range(50)]
        handles = [handle_of(t) for t in results]
        assert len({h["shared"] for h in handles}) == 1, "one segment for all 50"
        results[7].numpy()[:] = 7.0
        mapped = pickle.loads(pickle.dumps(results[7]))  # as a consumer would, by handle
        del results[7]
        gc.collect()
        fresh = [zerohop.zeros((1000,), "float32") for _ in range(5)]
        for f in fresh:
            f.numpy()[:] = -1.0
        assert (mapped.numpy() == 7.0).all(), "the freed block was not reused"
        assert mono.usage() == {"chunks": 1, "live_blocks": 54}
    finally:
        zm.reset_current()


def consume(conn):
    """Runs in another process: loads what arrives, reports, and writes back."""
    obj = conn.recv()
    column = obj.numpy() if isinstance(obj, zerohop.Tensor) else obj["x"].numpy()
    conn.send(float(column[0]))
    conn.recv()                       # the producer wrote after the hand-off
    conn.send(float(column[1]))
    column[2] = -7.0
    conn.send("written")
    conn.recv()


@pytest.mark.parametrize("method", ["spawn", "fork"])
@pytest.mark.parametrize("kind", ["tensor", "table"])
def test_another_process_shares_the_memory(shared, method, kind):
    if kind == "tensor":
        obj = zerohop.zeros((1000,), "float64")
        column = obj.numpy()
    else:
        obj = zerohop.Table([("x", "float64"), ("v", "float32", 2)], 1000)
        column = obj["x"].numpy()
    column[:] = 1.5
    ctx = mp.get_context(method)
    parent, child = ctx.Pipe()
    worker = ctx.Process(target=consume, args=(child,))
    worker.start()

    def answer():
        # A child that never answers (a forked child can deadlock on a lock another
        # library's thread held at the fork) fails the test instead of hanging the suite.
        assert parent.poll(120), f"the {method} child did not answer within 120 s"
        return parent.recv()

    try:
        parent.send(obj)              # multiprocessing pickles it: a handle, no bytes
        assert answer() == 1.5
        column[1] = 42.0              # after the hand-off
        parent.send("wrote")
        assert answer() == 42.0
        assert answer() == "written"
        assert column[2] == -7.0      # and the other way round
        parent.send("done")
        worker.join(60)
        assert worker.exitcode == 0
    finally:
        if worker.is_alive():
            worker.kill()


PRODUCER = textwrap.dedent("""
    import pickle, sys, time
    import zerohop, zerohop.memory as zm
    zm.set_current(zm.Shared())
    t = zerohop.zeros((1 << 20,), "float32")
    t.numpy()[:] = 3.0
    print(t.__reduce_ex__(4)[1][2]["shared"])
    print(pickle.dumps(t).hex(), flush=True)
    time.sleep(600)
""")


def start_producer():
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE)
    name = proc.stdout.readline().decode().strip()
    data = bytes.fromhex(proc.stdout.readline().decode().strip())
    return proc, name, data


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()


def test_a_killed_producer_leaves_nothing_once_its_consumers_detach():
    proc, name, data = start_producer()
    try:
        assert holders(name) == {proc.pid}           # the segment exists (the control)
        t = pickle.loads(data)
        assert holders(name) == {proc.pid, os.getpid()}
        kill(proc)
        assert t.numpy()[12345] == 3.0               # the memory outlives the producer
        assert holders(name) == {os.getpid()}
        del t
        gc.collect()
        assert holders(name) == set()                # no process holds it: the kernel freed it
        assert not [f for f in os.listdir("/dev/shm") if name in f]
    finally:
        if proc.poll() is None:
            kill(proc)


def test_a_producer_killed_before_anyone_attached_leaves_nothing_and_a_stale_handle():
    proc, name, data = start_producer()
    kill(proc)
    assert holders(name) == set()
    with pytest.raises(ValueError, match="stale handle.*exited or freed it"):
        pickle.loads(data)


def test_stale_and_mismatched_handles_are_refused(shared):
    t = zerohop.zeros((1000,), "float64")
    rebuild, (fmt, state, handle) = t.__reduce_ex__(5)
    for change, error, match in [
        (dict(segment_bytes=handle["segment_bytes"] + 4096), ValueError, "the handle says"),
        (dict(nbytes=handle["nbytes"] + 8), ValueError, "the buffer holds"),
        (dict(offset=handle["segment_bytes"]), ValueError, "outside segment"),
        (dict(boot_id="0" * 36), ValueError, "another machine"),
        (dict(pid="me"), TypeError, '"pid" must be'),
        # (A handle whose file this process maps already is served from that mapping,
        # whatever pid it names; these name files this process does not have.)
        (dict(ino=handle["ino"] + 1, pid=2 ** 22 + 1), ValueError, "stale handle"),
        (dict(ino=handle["ino"] + 1, pid=os.getppid()), ValueError, "stale handle"),
        (dict(ino=handle["ino"] + 1), ValueError, "stale handle"),
    ]:
        with pytest.raises(error, match=match):
            rebuild(fmt, state, dict(handle, **change))
    data = pickle.dumps(t)
    del t
    gc.collect()
    with pytest.raises(ValueError, match="stale handle"):
        pickle.loads(data)
    # A new segment may take the freed descriptor number: its identity tells them apart.
    other = zerohop.zeros((1000,), "float64")
    with pytest.raises(ValueError, match="stale handle"):
        pickle.loads(data)
    del other


def forged(handle, fd):
    """`handle` pointed at another file this process has open: its descriptor and identity."""
    st = os.fstat(fd)
    return dict(handle, pid=os.getpid(), fd=fd, dev=st.st_dev, ino=st.st_ino)


def test_handles_naming_a_fifo_socket_or_directory_are_refused_before_opening(shared, tmp_path):
    import socket

    t = zerohop.zeros((1000,), "float64")
    rebuild, (fmt, state, handle) = t.__reduce_ex__(5)
    os.mkfifo(tmp_path / "fifo")
    fifo = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    directory = os.open(tmp_path, os.O_RDONLY)
    sock = socket.socket(socket.AF_UNIX)
    try:
        for fd, what in [(fifo, "a FIFO"), (directory, "a directory"),
                         (sock.fileno(), "a socket")]:
            with pytest.raises(ValueError, match=f"is {what}, not shared memory"):
                rebuild(fmt, state, forged(handle, fd))
    finally:
        os.close(fifo)
        os.close(directory)
        sock.close()


NOBODY = 65534


def as_nobody(body):
    """Forks a child that becomes user `nobody` (dumpable, so a process of the same user may
    open its /proc/<pid>/fd) and runs `body(write)`; returns (pid, read end of its pipe)."""
    import ctypes

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no exceptions past this frame
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
            body(write)
        finally:
            os._exit(0)
    os.close(write)
    return pid, read


def answer(read, seconds):
    import select

    ready, _, _ = select.select([read], [], [], seconds)
    return os.read(read, 4096).decode() if ready else None


@pytest.mark.skipif(os.geteuid() != 0, reason="drops privileges to user nobody: needs root")
def test_a_fifo_held_by_another_process_is_refused_at_once_for_a_non_root_user(shared):
    """The hang the handle check prevents: as a user other than root, a FIFO the user cannot
    write is opened read-only, and a blocking read-only open of a FIFO waits for a writer."""
    import tempfile

    t = zerohop.zeros((1000,), "float64")
    rebuild, (fmt, state, handle) = t.__reduce_ex__(5)
    room = tempfile.mkdtemp(prefix="zerohop-fifo-")
    os.chmod(room, 0o777)

    def hold(write):
        path = os.path.join(room, "fifo")
        os.mkfifo(path, 0o444)  # nobody may write it: the read-write open is refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        os.write(write, f"{fd} {st.st_dev} {st.st_ino}".encode())
        time.sleep(300)  # holds the FIFO open until the test kills it

    holder, from_holder = as_nobody(hold)
    consumer = None
    try:
        fd, dev, ino = map(int, answer(from_holder, 60).split())

        def attach(write):
            try:
                rebuild(fmt, state, dict(handle, pid=holder, fd=fd, dev=dev, ino=ino))
                os.write(write, b"attached")
            except ValueError as error:
                os.write(write, f"ValueError: {error}".encode())
            except BaseException as error:  # noqa: BLE001 - reported to the parent
                os.write(write, f"{type(error).__name__}: {error}".encode())

        consumer, from_consumer = as_nobody(attach)
        said = answer(from_consumer, 30)
        assert said is not None, "the consumer hung opening a FIFO"
        assert said.startswith("ValueError") and "a FIFO" in said, said
    finally:
        for pid in (holder, consumer):
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        import shutil

        shutil.rmtree(room, ignore_errors=True)


def example(title):
    """The code block that follows `title` in docs/processes.md."""
    text = DOCS.read_text()
    match = re.search(re.escape(title) + r".*?```python\n(.*?)```", text, re.S)
    assert match, f"no example after {title!r} in {DOCS}"
    return match.group(1)


def test_the_documented_multiprocessing_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example("Example: multiprocessing"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1000000.0", "True"]


@pytest.mark.skipif(zerohop.cuda.is_available(), reason="tests a receiver without a GPU")
def test_cuda_data_staged_for_another_machine_needs_a_gpu_there():
    """A staged CUDA tensor or table (`staged_from` in its state) rebuilt where there is no
    GPU is a ValueError naming the device it left; the GPU suite tests the round trip."""
    with zerohop.pickling(across_machines="bytes"):
        rebuild, (fmt, state, data) = zerohop.zeros((10,), "float32").__reduce_ex__(5)
        table = zerohop.Table([("x", "float64")], 10)
        table_rebuild, (_, table_state, table_data) = table.__reduce_ex__(5)
    for call, state_, data_ in ((rebuild, state, data), (table_rebuild, table_state, table_data)):
        with pytest.raises(ValueError, match="left cuda:1 and this machine has no CUDA device"):
            call(fmt, dict(state_, staged_from=1), data_)
        with pytest.raises(TypeError, match="staged_from"):
            call(fmt, dict(state_, staged_from="gpu"), data_)


def test_pickling_across_machines_sends_bytes_instead_of_a_handle(shared):
    """A handle opens on this machine only (a faked boot id is refused by name); pickled
    inside `zerohop.pickling(across_machines="bytes")` the same tensor and table carry their
    bytes and load anywhere."""
    t = zerohop.zeros((1000,), "float64")
    t.numpy()[:] = 4.5
    rebuild, (fmt, state, handle) = t.__reduce_ex__(4)
    assert isinstance(handle, dict) and "shared" in handle
    with pytest.raises(ValueError, match="another machine"):
        rebuild(fmt, state, dict(handle, boot_id="0" * 36))
    table = zerohop.Table([("x", "float64"), ("v", "float32", 2)], 100)
    table["x"].numpy()[:] = 1.5
    with zerohop.pickling(across_machines="bytes"):
        for protocol in (4, 5):
            data = pickle.dumps(t, protocol=protocol)
            assert len(data) > 8000, "the bytes travel in the pickle"
            back = pickle.loads(data)
            assert back.data_ptr != t.data_ptr and (back.numpy() == 4.5).all()
        buffers = []
        data = pickle.dumps(table, protocol=5, buffer_callback=buffers.append)
        assert len(buffers) == 1 and buffers[0].raw().nbytes >= 100 * 8
        assert (pickle.loads(data, buffers=buffers)["x"].numpy() == 1.5).all()
    assert isinstance(t.__reduce_ex__(4)[1][2], dict), "handles again after the block"
    with pytest.raises(ValueError, match='across_machines=.*use "bytes"'):
        zerohop.pickling(across_machines="ftp")
