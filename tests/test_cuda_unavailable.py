"""What the CUDA surface does on a machine without a GPU (CI): clear answers, no crashes."""

import pytest

import zerohop
import zerohop.cuda

pytestmark = pytest.mark.skipif(zerohop.cuda.is_available(), reason="a GPU is present")


def test_cuda_reports_unavailable_and_refuses_cleanly():
    assert zerohop.cuda.is_available() is False
    assert zerohop.cuda.device_count() == 0
    with pytest.raises(ValueError, match=r"cuda:0 does not exist \(0 device\(s\) visible\)"):
        zerohop.zeros((4,), device="cuda:0")
    host = zerohop.zeros((4,))
    assert not hasattr(host, "__cuda_array_interface__")
    with pytest.raises(ValueError, match="only CUDA data"):
        host.set_stream(5)
    assert host.stream == 0


def test_a_foreign_cuda_array_interface_fails_clearly_without_a_driver():
    class FakeCuda:
        __cuda_array_interface__ = {
            "shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3,
        }

    with pytest.raises(ValueError, match="CUDA is not available"):
        zerohop.from_dlpack(FakeCuda())
    FakeCuda.__cuda_array_interface__ = dict(FakeCuda.__cuda_array_interface__, typestr=">f4")
    with pytest.raises(ValueError, match="native byte order"):
        zerohop.cuda.from_cuda_array_interface(FakeCuda())
    empty = type("Empty", (), {"__cuda_array_interface__": {
        "shape": (0,), "typestr": "<f4", "data": (0, False), "version": 3, "stream": 0}})()
    with pytest.raises(ValueError, match="stream 0"):
        zerohop.cuda.from_cuda_array_interface(empty)


def test_reading_a_csv_onto_a_missing_gpu_says_so(tmp_path):
    ecg = pytest.importorskip("zerohop_ecg")  # the ECG app (apps/ecg), when installed

    path = tmp_path / "t.csv"
    path.write_text("mv\n1.5\n2\n")
    with pytest.raises(ValueError, match="CUDA"):
        ecg.read_csv(path, device="cuda:0")
    with pytest.raises(ValueError, match='"tpu" is not a device name'):
        ecg.read_csv(path, device="tpu")
    table, report = ecg.read_csv(path, report=True)
    assert report["rows"] == 2 == len(table)
    assert report["bytes"] == path.stat().st_size
    assert report["fallback"] is None and report["host_lines"] == 0
    assert [name for name, _ in report["timings"]] == ["parse on host"]


@pytest.mark.parametrize("make", ["CudaDevice", "CudaVirtual", "CudaAsync", "CudaManaged", "CudaPinned"])
def test_every_cuda_resource_refuses_cleanly_without_a_gpu(make):
    import zerohop.memory as zm

    with pytest.raises(ValueError, match=r"cuda:0 does not exist \(0 device\(s\) visible\)"):
        getattr(zm, make)(0)
