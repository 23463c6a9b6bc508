"""zerohop tensors and tables through Ray and Dask distributed, locally.

Ray: what `ray.get` returns is a read-only zerohop view into the object store's shared memory
(the same mapping NumPy arrays from the store live in), and every `ray.get` of one object gives
the same pointer. Dask: tasks take and return tensors and tables, which arrive intact (Dask
copies between processes over TCP)."""

import re
from pathlib import Path

import numpy as np
import pytest

import zerohop

DOCS = Path(__file__).resolve().parent.parent / "docs" / "processes.md"


def mapping_of(address):
    """The /proc/self/maps line of the mapping holding `address`: (range, path)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if low <= address < high:
                return fields[0], fields[5].strip() if len(fields) > 5 else ""
    raise AssertionError(f"0x{address:x} is not mapped")


def documented_example(title):
    text = DOCS.read_text()
    match = re.search(re.escape(title) + r".*?```python\n(.*?)```", text, re.S)
    assert match, f"no example after {title!r} in {DOCS}"
    return match.group(1)


# --------------------------------------------------------------------------------- Ray

def test_the_documented_ray_example_runs(capsys):
    pytest.importorskip("ray")
    # Its own ray.init/ray.shutdown: it runs before the module's session starts.
    exec(compile(documented_example("Example: Ray"), "docs/processes.md", "exec"),
         {"__name__": "docs_example"})
    assert capsys.readouterr().out.split()[-3:] == ["[100000.", "100000.", "100000.]"]


def test_the_documented_ray_data_example_runs(capsys):
    pytest.importorskip("ray")
    pytest.importorskip("pandas")
    exec(compile(documented_example("Example: Ray Data"), "docs/processes.md", "exec"),
         {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip().endswith(
        "1000 [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]")


def test_the_documented_dask_dataframe_example_runs(capsys):
    pytest.importorskip("dask.dataframe")
    exec(compile(documented_example("Example: Dask DataFrame"), "docs/processes.md", "exec"),
         {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip().endswith("[1.7321]")


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_get_is_a_read_only_view_of_the_object_store(ray):
    a = np.arange(1 << 20, dtype=np.float64)       # 8 MiB: stored in shared memory, not inline
    t = zerohop.from_dlpack(a)
    ref = ray.put(t)
    first, second = ray.get(ref), ray.get(ref)
    assert first.readonly and second.readonly
    assert first.data_ptr == second.data_ptr != t.data_ptr   # zero-copy from the store
    assert np.array_equal(first.numpy(), a)
    store = mapping_of(ray.get(ray.put(a)).ctypes.data)      # where NumPy arrays from it live
    assert mapping_of(first.data_ptr) == store and "plasma" in store[1]


def test_ray_tasks_take_and_return_tensors_and_tables(ray):
    @ray.remote
    def make(n):
        import numpy as np
        import zerohop

        return zerohop.from_dlpack(np.arange(float(n)))

    @ray.remote
    def describe(x):          # x arrives as a read-only view of the store
        column = x.numpy() if isinstance(x, zerohop.Tensor) else x["v"].numpy()
        return x.readonly, float(column.sum())

    made = ray.get(make.remote(300_000))
    assert made.readonly and np.array_equal(made.numpy(), np.arange(300_000.0))
    assert ray.get(describe.remote(made)) == (True, float(np.arange(300_000.0).sum()))

    table = zerohop.Table([("x", "float32"), ("v", "float64", 3)], 100_000)
    table["v"].numpy()[:] = 2.0
    ref = ray.put(table)
    back = ray.get(ref)
    assert back.readonly and back.schema == table.schema and len(back) == len(table)
    assert back.data_ptr == ray.get(ref).data_ptr != table.data_ptr
    assert "plasma" in mapping_of(back.data_ptr)[1]
    assert back.alignment >= 64                   # Ray aligns buffers to 64 bytes
    assert ray.get(describe.remote(ref)) == (True, 600_000.0)


# -------------------------------------------------------------------------------- Dask

@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


# Dask merges small frames, so the small tensor may arrive misaligned: a reported copy.
@pytest.mark.filterwarnings("ignore::zerohop.CopyWarning")
def test_dask_tasks_take_and_return_tensors(dask_client):
    def make(n):
        import numpy as np
        import zerohop

        return zerohop.from_dlpack(np.arange(float(n)))

    def double(t):
        import zerohop

        return zerohop.from_dlpack(t.numpy() * 2)

    made = dask_client.submit(make, 1_000_000)
    doubled = dask_client.submit(double, made).result()     # worker to worker to here
    assert isinstance(doubled, zerohop.Tensor)
    assert np.array_equal(doubled.numpy(), np.arange(1_000_000.0) * 2)
    mine = zerohop.from_dlpack(np.arange(10.0))
    assert np.array_equal(dask_client.submit(double, mine).result().numpy(), np.arange(10.0) * 2)


def test_dask_tasks_take_and_return_tables(dask_client):
    def scale(table):
        import zerohop

        out = zerohop.Table(table.schema, len(table))
        out["x"].numpy()[:] = table["x"].numpy() * 10
        out["m"].numpy()[:] = table["m"].numpy()
        return out

    table = zerohop.Table([("x", "float32"), ("m", "float64", (2, 2), "col")], 5000)
    table["x"].numpy()[:] = np.arange(5000)
    table["m"].numpy()[:] = np.arange(5000 * 4).reshape(5000, 2, 2)
    back = dask_client.submit(scale, table).result()
    assert back.schema == table.schema and len(back) == 5000
    assert np.array_equal(back["x"].numpy(), np.arange(5000, dtype=np.float32) * 10)
    assert np.array_equal(back["m"].numpy(), table["m"].numpy())
