"""CUDA tensors across processes by CUDA IPC: the pickle carries a handle (never the bytes),
the consumer maps the producer's memory (writes are seen both ways), ordered after the
producer's stream by an interprocess event; bad handles are clear errors. Skipped without a
GPU."""

import pickle
import subprocess
import sys
import textwrap

import pytest

import zerohop
import zerohop.cuda

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

CONSUMER = textwrap.dedent("""
    import pickle, sys, torch, zerohop
    z = pickle.loads(open(sys.argv[1], "rb").read())
    if sys.argv[2] == "cai":                  # the CUDA array interface (docs/processes.md)
        x = torch.as_tensor(z, device="cuda")
    else:                                     # torch's stream waits for the import's
        x = torch.from_dlpack(z)
    print(z.device, int(x.sum().item()), x.data_ptr() == z.data_ptr)
    x[0] = -1                                 # the producer sees this
    torch.cuda.synchronize()
""")


def consume(tmp_path, data, view="dlpack"):
    path = tmp_path / "tensor.pickle"
    path.write_bytes(data)
    out = subprocess.run([sys.executable, "-c", CONSUMER, str(path), view],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


class ReadyConsumer:
    """A consumer started (torch imported, CUDA up) before the producer queues its work, so
    that it unpickles within milliseconds of the pickle: a consumer started afterwards takes
    longer to start than the producer's late work takes to finish, and would read complete
    data even if nothing ordered it."""

    def __init__(self, tmp_path, view="dlpack"):
        self.path = tmp_path / "tensor.pickle"
        script = ("import sys, torch\ntorch.zeros(1, device='cuda')\nprint('ready', flush=True)\n"
                  "sys.argv[1:] = [sys.stdin.readline().strip(), sys.argv[1]]\n" + CONSUMER)
        self.process = subprocess.Popen([sys.executable, "-c", script, view], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        assert self.process.stdout.readline().strip() == "ready", self.process.stderr.read()

    def consume(self, data):
        self.path.write_bytes(data)
        out, err = self.process.communicate(f"{self.path}\n", timeout=120)
        assert self.process.returncode == 0, err
        return out.split()


@pytest.mark.parametrize("protocol,view", [(2, "dlpack"), (5, "dlpack"), (5, "cai")])
def test_another_process_maps_the_same_device_memory(tmp_path, protocol, view):
    n = 1 << 20
    t = torch.arange(n, dtype=torch.int64, device="cuda")
    z = zerohop.from_dlpack(t)
    data = pickle.dumps(z, protocol=protocol)
    assert len(data) < 2048, "the pickle holds a handle, not the 8 MiB of data"
    device, total, same = consume(tmp_path, data, view)
    assert device == "cuda:0" and int(total) == n * (n - 1) // 2 and same == "True"
    assert t[0].item() == -1, "the consumer's write is in the producer's memory"


@pytest.mark.parametrize("view", ["dlpack", "cai"])
def test_the_consumer_waits_for_the_producers_stream(tmp_path, view):
    n = 1 << 22
    t = torch.zeros(n, dtype=torch.int64, device="cuda")
    consumer = ReadyConsumer(tmp_path, view)
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(2_000_000_000)      # ~1 s of GPU time before the data is written
        t.fill_(3)
    z = zerohop.from_dlpack(t)
    z.set_stream(producer.cuda_stream)        # the data is produced on `producer`
    data = pickle.dumps(z, protocol=5)
    assert z.__reduce_ex__(5)[1][1]["cuda_ipc"]["event"] is not None, "work left: an event"
    device, total, _ = consumer.consume(data)
    assert int(total) == 3 * n, "the consumer read before the producer's stream was done"


def test_a_finished_stream_sends_no_event(tmp_path):
    """Nothing left on the producer's stream: the handle carries no event (neither side
    makes, opens or waits on one), and the data is complete."""
    n = 1 << 20
    t = torch.full((n,), 2, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    z = zerohop.from_dlpack(t)
    state = z.__reduce_ex__(5)[1][1]
    assert state["cuda_ipc"]["event"] is None
    device, total, same = consume(tmp_path, pickle.dumps(z, protocol=5))
    assert int(total) == 2 * n and same == "True"


def test_the_legacy_stream_covers_blocking_streams_it_was_not_told_about(tmp_path):
    """Data written late on a blocking stream (CuPy's default kind) that the tensor does not
    name, its stream the legacy default one: work on that stream waits for blocking streams,
    so the export must too, event or not."""
    cupy = pytest.importorskip("cupy")
    n = 1 << 22
    t = torch.zeros(n, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    consumer = ReadyConsumer(tmp_path)
    blocking = cupy.cuda.Stream(non_blocking=False)
    with torch.cuda.stream(torch.cuda.ExternalStream(blocking.ptr)):
        torch.cuda._sleep(2_000_000_000)      # ~1 s of GPU time before the data is written
        t.fill_(5)
    z = zerohop.from_dlpack(t)                # ordered on the legacy stream, not `blocking`
    device, total, _ = consumer.consume(pickle.dumps(z, protocol=5))
    assert int(total) == 5 * n, "the consumer read before the blocking stream was done"


def test_views_keep_their_offset_and_strides(tmp_path):
    base = torch.arange(4096, dtype=torch.int64, device="cuda").reshape(64, 64)
    view = zerohop.from_dlpack(base[8:, ::2])  # an offset into the allocation, strided
    expected = int(base[8:, ::2].sum().item())
    device, total, _ = consume(tmp_path, pickle.dumps(view, protocol=5))
    assert int(total) == expected
    # The consumer set the view's first row: base's row 8, every other element.
    assert (base[8, ::2] == -1).all() and (base[8, 1::2] != -1).all()


def test_bad_handles_are_clear_errors(tmp_path):
    z = zerohop.from_dlpack(torch.ones(1024, device="cuda"))
    with pytest.raises(ValueError, match="made by this process"):
        pickle.loads(pickle.dumps(z))
    # A producer that exited: its memory is gone.
    path = tmp_path / "orphan.pickle"
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import pickle, torch, zerohop
        z = zerohop.from_dlpack(torch.ones(1024, device="cuda"))
        open({str(path)!r}, "wb").write(pickle.dumps(z))
    """)], check=True, timeout=120)
    with pytest.raises(ValueError, match="could not be opened|exited"):
        pickle.loads(path.read_bytes())
    # A GPU this process cannot see, and a size that disagrees with the layout.
    rebuild, (fmt, state, data) = z.__reduce_ex__(5)
    foreign = dict(state, cuda_ipc=dict(state["cuda_ipc"], device_uuid=b"\0" * 16, pid=1))
    with pytest.raises(ValueError, match="cannot see"):
        rebuild(fmt, foreign, data)
    wrong = dict(state, cuda_ipc=dict(state["cuda_ipc"], bytes=8, pid=1))
    with pytest.raises(ValueError, match="maps 8 bytes"):
        rebuild(fmt, wrong, data)
    short = dict(state, cuda_ipc=dict(state["cuda_ipc"], memory=b"x"))
    with pytest.raises(ValueError, match="has 1 bytes"):
        rebuild(fmt, short, data)


REFUSING_CONSUMER = textwrap.dedent("""
    import pickle, sys, zerohop
    try:
        pickle.loads(open(sys.argv[1], "rb").read())
    except ValueError as e:
        print("refused:", e)
    else:
        print("accepted")
""")


class Reduced:
    """Pickles as the given (callable, args): a state tampered with on its way."""

    def __init__(self, reduced):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


def test_a_tampered_range_past_the_allocation_is_refused(tmp_path):
    """The state's offset is the sender's word; the receiver holds offset + bytes to the size
    of the allocation the driver mapped, and refuses a range past it (closing the handle)."""
    t = torch.ones(1024, device="cuda")       # kept alive while the consumer runs
    rebuild, (fmt, state, data) = zerohop.from_dlpack(t).__reduce_ex__(5)
    ipc = state["cuda_ipc"]
    tampered = dict(state, cuda_ipc=dict(ipc, offset=ipc["offset"] + (1 << 40)))
    path = tmp_path / "tampered.pickle"
    path.write_bytes(pickle.dumps(Reduced((rebuild, (fmt, tampered, data))), protocol=5))
    out = subprocess.run([sys.executable, "-c", REFUSING_CONSUMER, str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:"), out.stdout
    assert "runs past the allocation it maps" in out.stdout, out.stdout
    assert str(ipc["offset"] + (1 << 40)) in out.stdout, "the message names the offset"


TABLE_CONSUMER = textwrap.dedent("""
    import pickle, sys, torch, zerohop
    t = pickle.loads(open(sys.argv[1], "rb").read())
    x, v = t.column("x", "torch"), t.column("v", "torch")
    print(t.device, len(t), int(x.sum().item()), int(v.sum().item()),
          x.data_ptr() == t["x"].data_ptr)
    x[0] = -1                                 # the producer sees this
    torch.cuda.synchronize()
""")


def test_a_device_table_travels_by_cuda_ipc(tmp_path):
    host = zerohop.Table([("x", "int64"), ("v", "float32", 3)], 10_000)
    torch.from_dlpack(host["x"]).copy_(torch.arange(10_000))
    torch.from_dlpack(host["v"]).fill_(2.0)
    table = host.to("cuda:0")
    data = pickle.dumps(table, protocol=5)
    assert len(data) < 4096, "the pickle holds a handle and the schema, not the table"
    path = tmp_path / "table.pickle"
    path.write_bytes(data)
    out = subprocess.run([sys.executable, "-c", TABLE_CONSUMER, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    device, rows, xs, vs, same = out.stdout.split()
    assert (device, rows, same) == ("cuda:0", "10000", "True")
    assert int(xs) == 10_000 * 9_999 // 2 and int(vs) == 60_000
    assert table.column("x", "torch")[0].item() == -1, "the consumer wrote the same memory"


STAGED_CONSUMER = textwrap.dedent("""
    import pickle, sys, torch, zerohop
    data = open(sys.argv[1], "rb").read()
    z = pickle.loads(data)
    x = torch.from_dlpack(z if isinstance(z, zerohop.Tensor) else z["x"])
    print(str(x.device), int(x.sum().item()), getattr(z, "is_copied", "table"))
""")


@pytest.mark.parametrize("protocol", [2, 5])
def test_across_machines_cuda_data_is_staged_through_the_host_and_restored_on_a_gpu(
        tmp_path, protocol):
    """Inside pickling(across_machines="bytes") a CUDA tensor (a strided view written on a
    stream of its own) and a CUDA table carry their bytes, not an IPC handle, and come back
    on the receiver's GPU as copies."""
    base = torch.zeros(256, 64, dtype=torch.int64, device="cuda")
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(1_000_000_000)      # the bytes are written late on `producer`
        base.copy_(torch.arange(256 * 64, device="cuda").reshape(256, 64))
    view = zerohop.from_dlpack(base[8:, ::2])
    view.set_stream(producer.cuda_stream)
    host = zerohop.Table([("x", "int64"), ("v", "float32", 3)], 1000)
    torch.from_dlpack(host["x"]).copy_(torch.arange(1000))
    table = host.to("cuda:0")
    with zerohop.pickling(across_machines="bytes"):
        tensor_data = pickle.dumps(view, protocol=protocol)
        table_data = pickle.dumps(table, protocol=protocol)
        _, (_, state, _) = view.__reduce_ex__(protocol)
    assert state["staged_from"] == 0 and "cuda_ipc" not in state
    assert len(tensor_data) > 248 * 32 * 8, "the bytes travel in the pickle"
    expected = int(base[8:, ::2].sum().item())
    for data, total, copied in ((tensor_data, expected, "True"),
                                (table_data, 1000 * 999 // 2, "table")):
        path = tmp_path / "staged.pickle"
        path.write_bytes(data)
        out = subprocess.run([sys.executable, "-c", STAGED_CONSUMER, str(path)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["cuda:0", str(total), copied]
    back = pickle.loads(tensor_data)
    assert back.device == "cuda:0" and back.is_copied and back.data_ptr != view.data_ptr
    assert torch.equal(torch.from_dlpack(back), base[8:, ::2])
