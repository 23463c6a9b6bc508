"""The ECG job over a Ray cluster of three nodes on this host (`ray.cluster_utils.Cluster`:
three raylets, three object stores): records spread over every node, the report says which
node made each record's rows and how many bytes Ray moved between nodes, rows made on the
job's own node reach PyTorch without a copy, and a node removed mid-run costs only its
records."""

import os
import signal
from contextlib import contextmanager
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import zerohop_ecg as ecg
from conftest import requires_torch
from zerohop_ecg.batch import run_batch
from zerohop_ecg.pipeline import Config
from zerohop_ecg.records import STOP_SWITCH
from zerohop_ecg.workers import _node_cycle

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

#: The record whose worker stops itself (SIGSTOP) in the node-removal run.
STOPPED = "a-stops"


def _write_records(root, names):
    root.mkdir()
    for seed, name in enumerate(names):
        signal_, _, _ = ecg.synthesize(150.0, rate=360.0, heart_rate=60 + 10 * seed, seed=seed)
        np.savetxt(root / f"{name}.csv", np.from_dlpack(signal_), fmt="%.4f", header="mV",
                   comments="")
    return root


@contextmanager
def cluster(head_cpus):
    """A head node (this test's driver) with `head_cpus` CPUs and two worker nodes of one CPU
    each, every node its own raylet and object store. Node deaths are noticed within about a
    second instead of Ray's default of tens of seconds."""
    os.environ[STOP_SWITCH] = STOPPED  # the raylets' workers inherit it
    c = None
    try:
        c = cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": head_cpus, "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 200,
                               "health_check_failure_threshold": 3,
                               "health_check_initial_delay_ms": 0}})
        workers = [c.add_node(num_cpus=1) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c, workers
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()
        os.environ.pop(STOP_SWITCH, None)


def job(folder, out):
    config = Config(out=out, records=str(folder), rate=360.0, epochs=1, progress=False,
                    plots=False, ray="cluster")
    return run_batch(config, say=lambda *_: None)


@requires_torch
def test_records_spread_over_every_node_and_the_report_counts_what_ray_moved(tmp_path):
    folder = _write_records(tmp_path / "records", [f"r{i}" for i in range(9)])
    with cluster(head_cpus=1):
        result = job(folder, tmp_path / "out")
        here = ray.get_runtime_context().get_node_id()
    assert not result.failures
    # Round the nodes in proportion to their CPUs (one each): three records on each.
    assert sorted(Counter(r.node for r in result.records).values()) == [3, 3, 3]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Ray: 3 node(s) made rows" in report
    for r, h in zip(result.records, result.hand_offs):
        assert f"Ray node {r.node[:8]}" in r.worker
        # Rows are read where they arrived, in the job node's object store: no copy by us.
        assert h["same"] and h["place"] == "Ray object store" and h["copied"] == 0, h
        if r.node == here:
            assert r.transferred == 0, r.name
        else:  # Ray copied the task's result (the rows and the rest) between nodes
            assert r.transferred >= h["bytes"], (r.name, r.transferred, h["bytes"])
        assert f"| {h['copied']:,} | {r.transferred:,} | {r.seconds:.2f} | {r.worker} |" \
            in report, r.name
    assert any(r.transferred for r in result.records)
    assert any(r.node == here for r in result.records)


def _stopped_worker_node(workers, timeout=60.0):
    """The worker node whose raylet started the process that stopped itself, and its pid."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in workers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            state, parent = fields[0], int(fields[1])
            if state == "T" and parent in raylets:
                return raylets[parent], int(stat.parent.name)
        time.sleep(0.2)
    raise AssertionError("no worker stopped itself on a worker node")


@requires_torch
def test_a_node_removed_mid_run_costs_only_its_records(tmp_path):
    names = [STOPPED] + [f"r{i}" for i in range(7)]
    folder = _write_records(tmp_path / "records", names)
    done = {}
    # No task on the head: the record that stops itself is on a node the test can remove.
    with cluster(head_cpus=0) as (c, workers):
        thread = threading.Thread(
            target=lambda: done.update(result=job(folder, tmp_path / "out")))
        thread.start()
        node, pid = _stopped_worker_node(workers)
        lost = node.node_id
        cycle = _node_cycle(ray)  # the job's placement: record i on cycle[i % len(cycle)]
        placed_there = {n for i, n in enumerate(names) if cycle[i % len(cycle)] == lost}
        c.remove_node(node, allow_graceful=False)
        os.kill(pid, signal.SIGKILL)  # a stopped process would outlive its raylet
        thread.join(timeout=240)
        assert not thread.is_alive(), "the job did not finish after the node was removed"
    result = done["result"]
    failed = {f.name: f.error for f in result.failures}
    assert STOPPED in failed, failed
    assert set(failed) <= placed_there, (sorted(failed), sorted(placed_there))
    assert len(placed_there) == len(names) // 2  # one of two nodes' share
    assert len(result.records) + len(failed) == len(names)
    # Every failure is the loss of that node's work (its tasks, or rows only it held), never
    # a record's own error; every record made elsewhere arrived whole.
    for name, error in failed.items():
        assert any(w in error.lower() for w in ("died", "lost", "crash", "unavailable")), \
            (name, error)
    assert any(r.node != lost for r in result.records)
    assert all(h["same"] for h in result.hand_offs)
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"| {STOPPED} |" in report and "## Failed records" in report
