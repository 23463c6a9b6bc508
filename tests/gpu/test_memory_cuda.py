"""CUDA memory on a GPU: stream-ordered reuse in the pool (a test that fails without the
event wait), the async/managed/pinned resources, managed oversubscription, SoA tables on the
device, and torch + CuPy + Numba allocating from one zerohop pool. Skipped without a GPU."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zerohop
import zerohop.cuda
import zerohop.memory as zm

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

from late_writer import written_late  # noqa: E402 - after the skips: it imports torch


class RawDevice:
    """A CUDA array interface over a raw device address, for wrapping pool blocks."""

    def __init__(self, address, n, typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": typestr, "data": (address, False), "version": 3,
            "strides": None, "stream": None,
        }


def as_torch(address, n):
    return torch.from_dlpack(zerohop.cuda.from_cuda_array_interface(RawDevice(address, n)))


def test_a_block_freed_on_one_stream_is_reused_on_another_only_after_its_work():
    n = 1 << 22
    nbytes = 4 * n
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    pool = zm.Pool(zm.CudaDevice(0), initial=64 << 20)

    def late_fill_on_a(address):
        x = as_torch(address, n)
        torch.cuda.synchronize()
        with torch.cuda.stream(a):
            torch.cuda._sleep(500_000_000)
            x.fill_(1.0)
        return x

    # The race exists: B writing at once is overtaken by A's late write.
    p = pool.allocate(nbytes, stream=a.cuda_stream)
    # Both kernels loaded first: CUDA loads a module lazily, at its first launch, and that load
    # waits for the device, which serialises the streams (the race then never shows when this
    # test is the process's first to fill or sleep).
    as_torch(p, n).fill_(0.0)
    torch.cuda._sleep(1)
    xa = late_fill_on_a(p)
    with torch.cuda.stream(b):
        xa.fill_(2.0)
    torch.cuda.synchronize()
    assert xa[0].item() == 1.0, "the race did not show, so the next check proves nothing"

    # Through the pool: freed on A, reused on B — B's write must come after A's.
    xa = late_fill_on_a(p)
    pool.deallocate(p, nbytes, stream=a.cuda_stream)
    q = pool.allocate(nbytes, stream=b.cuda_stream)
    assert q == p, "the pool reuses the block"
    xb = as_torch(q, n)
    with torch.cuda.stream(b):
        xb.fill_(2.0)
    torch.cuda.synchronize()
    assert xb.min().item() == 2.0 and xb.max().item() == 2.0
    pool.deallocate(q, nbytes, stream=b.cuda_stream)


@pytest.mark.parametrize("make, device", [
    (zm.CudaDevice, "cuda:0"), (zm.CudaAsync, "cuda:0"),
    (zm.CudaManaged, "cuda_managed"), (zm.CudaPinned, "cuda_host"),
])
def test_every_cuda_resource_allocates_usable_memory(make, device):
    resource = zm.Stats(make(0))
    assert resource.device == device
    n = 1 << 20
    stream = torch.cuda.current_stream().cuda_stream
    p = resource.allocate(4 * n, stream=stream)
    assert p % 256 == 0
    if device == "cuda_host":
        host = np.frombuffer((np.ctypeslib.as_ctypes_type(np.uint8) * (4 * n)).from_address(p), np.float32)
        host[:] = 3.0
        assert host.sum() == 3.0 * n
    else:
        x = as_torch(p, n)
        x.fill_(3.0)
        assert x.sum().item() == 3.0 * n
    assert zm.stats(resource)["current_bytes"] == 4 * n
    torch.cuda.synchronize()
    resource.deallocate(p, 4 * n, stream=stream)
    assert zm.stats(resource)["current_bytes"] == 0


def host_memory_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return 0


def test_managed_memory_oversubscribes_the_device():
    cupy = pytest.importorskip("cupy")
    free, total = torch.cuda.mem_get_info()
    nbytes = total + (4 << 30)
    # Pages beyond the device's are backed by host memory: on an H200 (141 GiB) beside
    # 128 GiB of RAM the kernel killed the whole suite here.
    if host_memory_available() < nbytes + (8 << 30):
        pytest.skip(f"{nbytes / 2**30:.0f} GiB of managed memory needs more host memory "
                    f"than the {host_memory_available() / 2**30:.0f} GiB available")
    managed = zm.CudaManaged(0)
    p = managed.allocate(nbytes)
    try:
        memory = cupy.cuda.memory.UnownedMemory(p, nbytes, managed, 0)
        arr = cupy.ndarray((nbytes,), cupy.uint8, cupy.cuda.memory.MemoryPointer(memory, 0))
        step = 2 << 20
        arr[::step] = 1  # one byte in every 2 MiB page: more pages than the device holds
        touched = (nbytes + step - 1) // step
        assert int(arr[::step].sum(dtype=cupy.int64)) == touched
        del arr, memory
        cupy.cuda.Device(0).synchronize()
    finally:
        managed.deallocate(p, nbytes)
    print(f"managed: {nbytes / 2**30:.1f} GiB on a {total / 2**30:.1f} GiB device")


def test_soa_tables_on_the_device_and_back():
    schema = [("x", "float32"), ("y", "float32"), ("p", "float64", 3)]
    host = zerohop.Table(schema, 1000, device="cuda_host")  # pinned: the copy is async
    assert host.device == "cuda_host"
    host["x"].numpy()[:] = np.arange(1000)
    host["p"].numpy()[:] = 2.0
    stream = torch.cuda.Stream()
    dev = host.to("cuda:0", stream=stream.cuda_stream)
    assert dev.device == "cuda:0"
    pos, p = dev.tensors({"pos": ["x", "y"], "p": ["p"]}, "torch")
    assert pos.is_cuda and pos.shape == (1000, 2)
    assert dev.data_ptr <= pos.data_ptr() < dev.data_ptr + dev.nbytes
    assert pos[:, 0].sum().item() == sum(range(1000))  # ordered after the copy's stream
    assert p.sum().item() == 6000.0
    pos.mul_(2)  # written in place on the device
    back = dev.to("cpu")
    assert back["x"].numpy()[10] == 20.0
    fresh = zerohop.Table(schema, 10, device="cuda:0")
    assert torch.from_dlpack(fresh["p"]).abs().sum().item() == 0.0  # zero-filled


def test_one_tensor_to_the_device_and_back_after_its_producer():
    values = np.arange(3 * 1000, dtype=np.float32).reshape(1000, 3)
    host = zerohop.from_dlpack(values[:, ::2])  # strided: the span travels, strides kept
    stream = torch.cuda.Stream()
    dev = host.to("cuda:0", stream=stream.cuda_stream)
    assert dev.device == "cuda:0" and dev.is_copied and dev.stream == stream.cuda_stream
    assert dev.strides == host.strides and dev.shape == host.shape
    t = torch.from_dlpack(dev)  # ordered after the copy's stream
    assert torch.equal(t.cpu(), torch.from_numpy(values[:, ::2].copy()))
    # A producer still writing on its own stream when the copy is asked for: the copy waits.
    source, *_ = written_late(1 << 20, 500_000_000)
    back = source.to("cpu")
    assert back.device == "cpu" and back.is_copied
    assert float(np.from_dlpack(back).min()) == 1.0
    with pytest.raises(ValueError, match="stream 0"):
        host.to("cuda:0", stream=0)


FRAMEWORKS_SCRIPT = textwrap.dedent(r"""
    import gc, threading
    import torch, cupy
    import zerohop.memory as zm

    base = zm.Tracking(zm.Limit(zm.Pool(zm.CudaDevice(0), initial=256 << 20), 1 << 30))
    installed = zm.install(torch=True, cupy=True, numba=NUMBA, resource=base, torch_mode=MODE)

    t = torch.ones(1 << 20, device="cuda")           # 4 MiB from the pool via the C symbols
    c = cupy.ones(1 << 20, dtype=cupy.float32)       # 4 MiB via cupy.cuda.set_allocator
    pool_usage = base.upstream.upstream.usage()
    assert pool_usage["in_use"] >= 8 << 20, pool_usage
    if NUMBA:
        from numba import cuda
        n = cuda.device_array(1 << 20, dtype="f4")   # 4 MiB via the EMM plugin
    stats = installed.stats()
    assert stats["torch"]["current_bytes"] >= 4 << 20, stats
    assert stats["cupy"]["current_bytes"] >= 4 << 20, stats
    if NUMBA:
        assert stats["numba"]["current_bytes"] >= 4 << 20, stats

    # torch and CuPy allocating at once from the shared pool.
    errors = []
    def churn(make):
        try:
            for _ in range(200):
                make()
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=churn, args=(lambda: torch.empty(1 << 16, device="cuda"),)),
               threading.Thread(target=churn, args=(lambda: cupy.empty(1 << 16, dtype=cupy.float32),))]
    for th in threads: th.start()
    for th in threads: th.join()
    assert not errors, errors

    # The limit covers every framework: a clean error from each, with zerohop's numbers.
    # "mempool": torch's own OutOfMemoryError (after freeing its cache and retrying), with
    # zerohop's reason as a note. "allocator": torch does not check for NULL; zerohop raises
    # the refusal in the calling thread, which Python reports as a SystemError caused by it.
    try:
        big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        raise SystemExit(f"torch went past the limit (data_ptr {big.data_ptr()})")
    except (torch.OutOfMemoryError, SystemError) as e:
        if MODE == "mempool":
            assert isinstance(e, torch.OutOfMemoryError), repr(e)
            said = " ".join(getattr(e, "__notes__", []))
        else:
            cause = e.__cause__ or e.__context__
            assert isinstance(cause, MemoryError), repr(e)
            said = str(cause)
        assert "requested 2147483648" in said and "of 1073741824 bytes" in said, said
        print("torch at the limit:", type(e).__name__, said)
    try:
        cupy.empty(2 << 30, dtype=cupy.uint8)
        raise SystemExit("cupy went past the limit")
    except MemoryError:
        pass

    del t, c
    if NUMBA:
        del n
        cuda.current_context().deallocations.clear()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # "mempool": torch's cached segments go back to zerohop
    leaks = zm.leaks(base)
    assert leaks == [], leaks
    print("ok", {k: v["peak_bytes"] for k, v in installed.stats().items()})
""")


@pytest.mark.parametrize("mode", ["mempool", "allocator"])
@pytest.mark.parametrize("numba", [False, True], ids=["torch+cupy", "torch+cupy+numba"])
def test_frameworks_share_one_pool_with_one_limit_and_no_leaks(numba, mode):
    pytest.importorskip("cupy")
    if numba:
        pytest.importorskip("numba.cuda")
    script = FRAMEWORKS_SCRIPT.replace("NUMBA", str(numba)).replace("MODE", repr(mode))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    print(run.stdout, run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ok" in run.stdout


MiB = 1 << 20


def fill_pool(pool, size, streams=(0,)):
    """Blocks of `size` bytes until the pool refuses; each written on its stream."""
    blocks = []
    while True:
        stream = streams[len(blocks) % len(streams)]
        try:
            p = pool.allocate(size, stream=stream)
        except MemoryError:
            return blocks
        blocks.append((p, size, stream))


def free_blocks(pool, blocks):
    for p, size, stream in blocks:
        pool.deallocate(p, size, stream=stream)


def test_a_growable_pool_reaches_every_byte_of_its_maximum_where_a_fixed_one_cannot():
    """rapidsai/rmm#1957's pattern: initial size, then growth to the maximum in chunks. Blocks
    of 320 MiB leave fragments at each chunk's end; over one reserved range they merge."""
    maximum, initial, block = 4096 * MiB, 1024 * MiB, 320 * MiB
    growable = zm.Pool(zm.CudaVirtual(0, reserve=maximum), initial=initial, maximum=maximum)
    blocks = fill_pool(growable, block)
    rest = maximum - len(blocks) * block
    last = growable.allocate(rest)
    assert growable.usage()["reserved"] == maximum
    # Writes reach every block, those across chunk boundaries too.
    for i, (p, size, _) in enumerate(blocks):
        as_torch(p, size // 4).fill_(float(i))
    torch.cuda.synchronize()
    assert all(as_torch(p, size // 4)[-1].item() == float(i) for i, (p, size, _) in enumerate(blocks))
    free_blocks(growable, blocks + [(last, rest, 0)])
    whole = growable.allocate(maximum)
    as_torch(whole, maximum // 4).fill_(1.0)
    torch.cuda.synchronize()
    growable.deallocate(whole, maximum)

    fixed = zm.Pool(zm.CudaDevice(0), initial=initial, maximum=maximum)
    blocks = fill_pool(fixed, block)
    with pytest.raises(MemoryError):
        fixed.allocate(rest)
    free_blocks(fixed, blocks)
    with pytest.raises(MemoryError):
        fixed.allocate(maximum)
    assert fixed.release() == maximum and growable.release() == maximum


def test_alternating_four_streams_up_to_95_percent_never_fail():
    """rapidsai/rmm#2039's pattern: sizes varying, 4 streams in turn, to 95 % of the maximum,
    freed crosswise and made again, with kernels writing each block on its stream."""
    maximum = 2048 * MiB
    pool = zm.Pool(zm.CudaVirtual(0, reserve=maximum), initial=256 * MiB, maximum=maximum)
    streams = [torch.cuda.Stream() for _ in range(4)]
    sizes = [37 * MiB + 4096, 3 * MiB, 101 * MiB, 12 * MiB + 256]
    for round_ in range(4):
        live, total, i = [], 0, round_
        while total + sizes[i % 4] <= maximum * 95 // 100:
            size, stream = sizes[i % 4], streams[i % 4]
            p = pool.allocate(size, stream=stream.cuda_stream)
            with torch.cuda.stream(stream):
                as_torch(p, size // 4).fill_(float(i))
            live.append((p, size, stream))
            total += size
            i += 1
        for k, (p, size, stream) in enumerate(live):
            on = stream if k % 2 == 0 else streams[(k + 1) % 4]
            on.wait_stream(stream)
            pool.deallocate(p, size, stream=on.cuda_stream)
    torch.cuda.synchronize()
    assert pool.usage()["in_use"] == 0


def test_release_gives_idle_chunks_back_to_the_driver():
    pool = zm.Pool(zm.CudaVirtual(0, reserve=8192 * MiB), initial=1024 * MiB, maximum=4096 * MiB)
    blocks = fill_pool(pool, 512 * MiB)
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    keep = blocks.pop(0)
    free_blocks(pool, blocks)
    released = pool.release()
    assert released >= 2048 * MiB, released
    free_after = torch.cuda.mem_get_info()[0]
    assert free_after - free_before >= released * 9 // 10, (free_before, free_after, released)
    # The kept block still works, and the pool grows back into the holes.
    as_torch(keep[0], keep[1] // 4).fill_(3.0)
    again = fill_pool(pool, 512 * MiB)
    assert len(again) == len(blocks)
    free_blocks(pool, again + [keep])


def test_a_pool_growing_while_torch_captures_a_graph_is_a_documented_outcome():
    """The pool maps a new chunk (cuMemCreate/cuMemMap, not stream work) while another stream
    captures: either it works and the graph replays, or the capture fails with torch's
    error; never a crash, and the pool stays usable."""
    pool = zm.Pool(zm.CudaVirtual(0, reserve=1024 * MiB), initial=64 * MiB, maximum=1024 * MiB)
    x = torch.zeros(1 << 20, device="cuda")
    graph = torch.cuda.CUDAGraph()
    outcome = "captured"
    try:
        with torch.cuda.graph(graph):
            y = x + 1
            grown = pool.allocate(256 * MiB)  # more than the first chunk: the pool grows
    except (RuntimeError, MemoryError) as e:
        outcome = f"capture failed: {type(e).__name__}: {e}"
        grown = None
    print("growth during capture:", outcome)
    if grown is None:
        grown = pool.allocate(256 * MiB)
    else:
        graph.replay()
        torch.cuda.synchronize()
        assert y[0].item() == 1.0
    as_torch(grown, 256 * MiB // 4).fill_(2.0)
    torch.cuda.synchronize()
    pool.deallocate(grown, 256 * MiB)
    assert pool.usage()["in_use"] == 0


CLOSE_SCRIPT = r"""
import gc
import torch
import zerohop.memory as zm

pool = zm.Pool(zm.CudaDevice(0))
tracking = zm.Tracking(pool)
installed = zm.install(torch=True, resource=tracking)
a = torch.randn(512, 512, device="cuda")
(a @ a).sum().item()  # cuBLAS makes its workspace, from the route
del a
gc.collect()
during = [block["bytes"] for block in zm.leaks(tracking)]
installed.close()
torch.cuda.empty_cache()
after = [block["bytes"] for block in zm.leaks(tracking)]
assert after == [], (during, after)
b = torch.randn(512, 512, device="cuda")
(b @ b).sum().item()  # cuBLAS makes a new workspace, from torch's own allocator
assert zm.leaks(tracking) == [], zm.leaks(tracking)
print("ok: held while installed", during)
"""


def test_closing_the_installation_leaves_nothing_of_torch_in_the_pool():
    """cuBLAS's workspaces come from the route and never die on their own: close() drops
    them (torch makes new ones from its own allocator), so the pool ends empty."""
    run = subprocess.run([sys.executable, "-c", CLOSE_SCRIPT], capture_output=True, text=True,
                         timeout=300)
    print(run.stdout, run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ok" in run.stdout


GRAPH_AFTER_CLOSE_SCRIPT = r"""
import gc
import torch
import zerohop.memory as zm

pool = zm.Pool(zm.CudaDevice(0))
tracking = zm.Tracking(pool)
installed = zm.install(torch=True, resource=tracking)
torch.manual_seed(0)
w = torch.randn(256, 256, device="cuda")
graphs = {}
for name, graph_pool in (("torch's private pool", None), ("zerohop's graph pool", installed.graph_pool().id)):
    x = torch.randn(64, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # cuBLAS's warm-up on the side stream, as torch's docs ask
            torch.relu(x @ w)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=graph_pool):
        y = torch.relu(x @ w) @ w
    graphs[name] = (g, x, y)
installed.close()
torch.cuda.empty_cache()
# Memory the route held is reused now: a replay that wrote into freed memory shows here.
noise = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(32)]
for name, (g, x, y) in graphs.items():
    for _ in range(3):
        x.copy_(torch.randn(64, 256, device="cuda"))
        g.replay()
        want = torch.relu(x @ w) @ w
        assert torch.allclose(y, want, rtol=1e-3, atol=1e-3), name
assert all(bool((n == 7.0).all()) for n in noise)
held_with_graphs = sum(block["bytes"] for block in zm.leaks(tracking))
del graphs, g, x, y, noise, w
gc.collect()
torch.cuda.synchronize()
torch.cuda.empty_cache()
assert zm.leaks(tracking) == [], zm.leaks(tracking)
print("ok: held while the graphs lived", held_with_graphs)
"""


def test_graphs_captured_while_installed_replay_after_close():
    """close() drops cuBLAS's workspaces and ends the route: a graph captured before,
    in torch's private pool or in zerohop's graph pool, still replays right after it (its
    memory stays with its graph, not with the route), and the pool is empty once the graphs
    are gone."""
    run = subprocess.run([sys.executable, "-c", GRAPH_AFTER_CLOSE_SCRIPT], capture_output=True,
                         text=True, timeout=300)
    print(run.stdout, run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ok" in run.stdout
