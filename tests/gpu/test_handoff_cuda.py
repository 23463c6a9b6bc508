"""The hand-off on a GPU (#41): a block handed to a consumer's stream is reused only after the
consumer's work (the control shows the race without the consumer's stream), hand-offs inside
`torch.cuda.graph` capture replay like eager, and a dependency that would cross a capture is
refused by name without breaking the capture. Skipped without a GPU."""

import pytest

import zerohop
import zerohop.cuda
import zerohop.memory as zm

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

N = 1 << 20
SLEEP = 2_000_000  # cycles: about a millisecond, so the consumer still reads after the free


@pytest.fixture
def pool():
    pool = zm.Pool(zm.CudaDevice(0), initial=64 << 20)
    zm.set_current(pool)
    try:
        yield pool
    finally:
        zm.reset_current("cuda:0")


def trial(consumer, value, named):
    """One hand-off: a pool block filled with `value` on the legacy stream, read late on
    `consumer`, dropped, reused at once by a writer. Returns the sum the consumer read and
    whether the block was reused."""
    z = zerohop.zeros((N,), "float32", device="cuda:0")
    torch.from_dlpack(z).fill_(value)
    if named:
        with torch.cuda.stream(consumer):
            x = torch.from_dlpack(z)  # the consumer names its stream: the block notes it
            torch.cuda._sleep(SLEEP)
            total = x.sum()
    else:
        torch.cuda.synchronize()
        capsule = z.__dlpack__(stream=-1)  # the consumer orders itself: nothing noted
        with torch.cuda.stream(consumer):
            x = torch.from_dlpack(capsule)
            del capsule
            torch.cuda._sleep(SLEEP)
            total = x.sum()
    address = z.data_ptr
    del x, z
    writer = zerohop.zeros((N,), "float32", device="cuda:0")  # the same block, zeroed
    torch.from_dlpack(writer).fill_(-1.0)
    reused = writer.data_ptr == address
    torch.cuda.synchronize()
    return total.item(), reused


def test_a_block_is_reused_only_after_its_consumers_work(pool):
    consumer = torch.cuda.Stream()
    torch.cuda._sleep(1)
    torch.zeros(1, device="cuda").sum()  # kernels loaded before the races
    # Control: without the consumer's stream the writer overtakes the late read.
    raced = 0
    for value in range(1, 21):
        read, reused = trial(consumer, float(value), named=False)
        assert reused, "the pool reuses the block at once"
        raced += read != value * N
    assert raced > 0, "the race did not show, so the next check proves nothing"
    for value in range(1, 1001):
        read, reused = trial(consumer, float(value % 97 + 1), named=True)
        assert reused
        assert read == (value % 97 + 1) * N, f"trial {value}: the consumer read a reused block"


def test_hand_offs_inside_graph_capture_replay_like_eager():
    source = torch.arange(1024, dtype=torch.float32, device="cuda")
    z = zerohop.from_dlpack(source.clone())
    table = zerohop.Table([("x", "float32")], 1024).to("cuda:0")
    (column,) = table.tensors(["x"], "torch")
    column.copy_(source.view(-1, 1))
    torch.cuda.synchronize()

    def step():
        a = torch.from_dlpack(z) * 2
        b = z.to_framework("torch") + 1
        (c,) = table.tensors(["x"], "torch")
        return a, b, c * 3

    eager = step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up off the default stream, as torch's capture recipe asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(100):
        graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, eager):
        assert torch.equal(got, want)


def test_a_dependency_across_a_capture_is_refused_and_the_capture_survives():
    z = zerohop.zeros((256,), "float32", device="cuda:0")
    outside = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture = torch.cuda.current_stream()
        z.set_stream(capture.cuda_stream)  # now produced inside the capture
        with pytest.raises(zerohop.StreamError, match="inside a CUDA graph capture"):
            z.__dlpack__(stream=outside.cuda_stream)
        y = torch.from_dlpack(z) + 1  # the capture is intact
    graph.replay()
    torch.cuda.synchronize()
    assert y.sum().item() == 256


def test_the_c_exchange_api_hands_cuda_tensors_to_torch_ready_on_the_work_stream():
    import ctypes
    from ctypes import POINTER, c_int, c_void_p, py_object

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = c_void_p, [py_object, ctypes.c_char_p]

    def table(cls):
        addr = get(cls.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
        return [c_void_p.from_address(addr + 16 + 8 * i).value for i in range(5)]

    ours, theirs = table(zerohop.Tensor), table(torch.Tensor)
    from_py = ctypes.PYFUNCTYPE(c_int, py_object, POINTER(c_void_p))(ours[1])
    to_torch = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))(theirs[2])
    stream = ctypes.CFUNCTYPE(c_int, c_int, ctypes.c_int32, POINTER(c_void_p))(ours[4])

    producer = torch.cuda.Stream()
    z = zerohop.zeros((N,), "float32", device="cuda:0")
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP)
        torch.from_dlpack(z).fill_(3.0)  # late: only ordering makes it visible
    z.set_stream(producer.cuda_stream)
    work = c_void_p()
    assert stream(2, 0, ctypes.byref(work)) == 0 and work.value == 1
    managed = c_void_p()
    assert from_py(z, ctypes.byref(managed)) == 0  # ready on the legacy stream, no host wait
    out = c_void_p()
    assert to_torch(managed.value, ctypes.byref(out)) == 0
    x = ctypes.cast(out.value, py_object).value
    ctypes.pythonapi.Py_DecRef(py_object(x))
    assert x.data_ptr() == z.data_ptr
    with torch.cuda.stream(torch.cuda.default_stream()):
        total = x.sum()  # torch's default stream is the legacy one: zerohop's work stream
    assert total.item() == 3.0 * N
