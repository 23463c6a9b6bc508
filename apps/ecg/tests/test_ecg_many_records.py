"""Thousands of records in one job: the rows of every record come back in shared memory, but
the job holds a few descriptors per worker however many records there are (a descriptor per
record ran into the common limit of 1024, and into 256 with 300 records)."""

import os
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import zerohop_ecg as ecg
from conftest import requires_torch
from zerohop_ecg.batch import raise_descriptor_limit

RECORDS = 2000
LIMIT = 128


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """2,000 20-second recordings: names of one synthetic CSV (the job reads each anew)."""
    root = tmp_path_factory.mktemp("many")
    signal, _, _ = ecg.synthesize(20.0, rate=360.0, heart_rate=75, ectopic=0.0, seed=1)
    np.savetxt(root / "one.csv", np.from_dlpack(signal), fmt="%.4f", header="mV", comments="")
    (root / "records").mkdir()
    for i in range(RECORDS):
        os.symlink(root / "one.csv", root / "records" / f"r{i:04d}.csv")
    return root / "records"


def descriptors(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def run_limited(args, out):
    """The job in a process limited to LIMIT descriptors (soft and hard); its peak count."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

    proc = subprocess.Popen(
        [sys.executable, "-m", "zerohop_ecg", *args, "--rate", "360", "--epochs", "1",
         "--no-plots", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak = [0]

    def watch():
        while proc.poll() is None:
            peak[0] = max(peak[0], descriptors(proc.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    watcher.join()
    return proc.returncode, stdout, stderr, peak[0]


@requires_torch
@pytest.mark.parametrize("engine", [["--workers", "2"], ["--dask", "local", "--workers", "2"]],
                         ids=["workers", "dask"])
def test_two_thousand_records_under_a_limit_of_128_descriptors(folder, tmp_path, engine):
    if engine[0] == "--dask":
        pytest.importorskip("distributed")
    code, stdout, stderr, peak = run_limited(["--records", str(folder), *engine],
                                             tmp_path / "out")
    assert code == 0, stderr[-3000:]
    assert f"{RECORDS} record(s) trained on, 0 failed" in stdout, stdout[-2000:]
    assert f"same pointer: {RECORDS}/{RECORDS}, bytes copied: 0" in stdout
    print(f"peak descriptors of the job: {peak}")
    assert peak < LIMIT, f"the job held {peak} descriptors"


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 256) if hard == resource.RLIM_INFINITY else min(soft, hard, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lower // 2, hard))
    try:
        raised = raise_descriptor_limit()
        now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert raised == now and now > lower // 2
        assert hard == resource.RLIM_INFINITY or now == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
