"""Where the records are processed: in this process, in local worker processes, or on an
existing Ray or Dask cluster. Each backend is a context manager whose `results()` yields a
`RecordBeats` or a `RecordFailure` per record as they finish; the memory the rows arrived in
stays valid until the backend is closed.

zerohop brings no cluster or transport of its own: local processes talk through a pipe
(`multiprocessing`), Ray through its object store, Dask through its own comms.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from multiprocessing.connection import wait
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from .config import RecordOptions
from .errors import EcgInputError
from .records import RecordBeats, RecordFailure, boot_id, process_record, record_name

if TYPE_CHECKING:
    import logging
    from multiprocessing.connection import Connection, _ConnectionBase
    from multiprocessing.context import SpawnContext
    from multiprocessing.process import BaseProcess
    from socket import socket

    from distributed import LocalCluster
    from ray import ObjectRef
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # What the job uses of distributed.Client and distributed.Future, whose close() and
    # release() are not annotated (a call to either would be an untyped call).
    class _DaskFuture(Protocol):
        def result(self) -> RecordBeats: ...
        def release(self) -> object: ...

    class _DaskClient(Protocol):
        def submit(self, func: Callable[..., RecordBeats], /, *args: object, pure: bool,
                   retries: int) -> _DaskFuture: ...
        def close(self) -> object: ...

#: What a backend's `results()` yields for each record.
RecordResult: TypeAlias = RecordBeats | RecordFailure


def _error_text(error: BaseException) -> str:
    return str(error) if isinstance(error, (EcgInputError, OSError)) else \
        f"{type(error).__name__}: {error}"


class InProcess:
    """One record after another in this process (`--workers 1`)."""

    label = "this process"

    def __init__(self, paths: Sequence[Path], options: RecordOptions) -> None:
        self.paths, self.options = paths, options

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

    def results(self) -> Iterator[RecordResult]:
        for index, path in enumerate(self.paths):
            try:
                yield process_record(index, str(path), self.options)
            except (EcgInputError, OSError, ValueError) as error:
                yield RecordFailure(index, record_name(path), _error_text(error))


def _worker_main(conn: Connection, options: RecordOptions, threads: int) -> None:
    """A local worker: records in, rows out. The parent maps a result's rows through this
    process while unpickling it, before it gives this worker its next task: so the results sent
    so far may go when the next task comes (their memory is never reused: see records.py)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _failing_start()
    # The workers share the cores: each gets its part for zerohop's parallel stages (read
    # before zerohop's thread pool first starts, which is at the first record).
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    conn.send(("ready", os.getpid()))
    sent: list[RecordBeats] = []
    while True:
        task = conn.recv()
        sent.clear()  # the parent has mapped every result sent before this message
        if task is None:
            return
        index, path = task
        try:
            result = process_record(index, path, options)
        except Exception as error:  # reported per record; the worker goes on
            conn.send(RecordFailure(index, record_name(Path(path)), _error_text(error)))
            continue
        sent.append(result)
        conn.send(result)


#: Fault injection for the tests: "N:FILE" makes the first N worker starts fail (exit code 3),
#: counted in FILE across processes.
START_FAULT = "ZEROHOP_ECG_FAIL_WORKER_STARTS"


def _failing_start() -> None:
    fault = os.environ.get(START_FAULT)
    if not fault:
        return
    count, path = fault.split(":", 1)
    with open(path, "a+") as counter:
        # Workers start side by side: the count is read and written under a lock, or two of
        # them read the same count and both fail (a test that failed 1 run in 10).
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        failed = len(counter.read())
        if failed < int(count):
            counter.write("x")
            counter.flush()
            os._exit(3)


def dask_setup(server: object) -> None:
    """Dask's preload hook (passed to a local cluster only while START_FAULT is set): a Dask
    worker process starting fails as a local worker does. The nanny loads it too; only the
    worker counts."""
    if type(server).__name__ == "Worker":
        _failing_start()


#: Workers that may fail to start one after another before the job gives up.
START_ATTEMPTS = 3
#: How long a worker may take to start (spawn, import zerohop) before it counts as failed.
START_SECONDS = 120.0


class _Worker:
    def __init__(self, context: SpawnContext, options: RecordOptions, threads: int) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, options, threads),
                                       daemon=True, name="zerohop-ecg-worker")
        self.process.start()
        child.close()
        #: The (index, path) of the record it is on, and when that record's time is up.
        self.task: tuple[int, str] | None = None
        self.deadline: float | None = None
        self.ready = False

    def wait_ready(self) -> bool:
        """True once the worker said it is ready; False (and the worker stopped) when it ended
        or hung while starting."""
        if not self.ready:
            if not self.conn.poll(START_SECONDS):
                self.stop()
                return False
            try:
                self.conn.recv()
            except (EOFError, OSError):
                self.stop()
                return False
            self.ready = True
        return True

    def give(self, task: tuple[int, str], timeout: float | None) -> None:
        self.task = task
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.conn.send(task)

    def stop(self) -> None:
        """Ends the process however it is (running, hung, stopped by SIGSTOP) and its pipe."""
        if self.process.is_alive():
            self.process.kill()  # SIGKILL also ends a stopped process
        self.process.join()
        self.conn.close()


def record_timeout(path: str | os.PathLike[str], limit: float | None = None) -> float:
    """Seconds a record may take: `limit` (--record-timeout), else 2 minutes plus 30 s per MiB
    of its files (a day-long CSV is a few hundred MiB, a 30-minute MIT-BIH record 2 MiB)."""
    if limit is not None:
        return limit
    path = Path(path)
    files = [path] if path.suffix == ".csv" else list(path.parent.glob(path.stem + ".*"))
    size = sum(f.stat().st_size for f in files if f.is_file())
    return 120.0 + 30.0 * size / (1 << 20)


class LocalProcesses:
    """`--workers N`: N local processes (spawned, so they share no state with this one). Rows
    come back in `zerohop.memory.Shared` memory as handles, mapped here without a copy. A worker
    that dies (killed, out of memory) fails the record it was on; a new worker takes its place."""

    def __init__(self, paths: Sequence[Path], options: RecordOptions, workers: int,
                 threads_per_worker: int | None = None, timeout: float | None = None) -> None:
        self.paths, self.workers = paths, max(1, min(workers, len(paths)))
        self.options = options
        self.timeout = timeout
        self.label = f"{self.workers} local worker process(es)"
        self._context = mp.get_context("spawn")
        self._threads = threads_per_worker or max(1, usable_cores() // self.workers)
        self._live: list[_Worker] = []
        #: How each worker that failed to start in a row ended.
        self._start_failures: list[str] = []

    def __enter__(self) -> LocalProcesses:
        return self

    def _new_worker(self) -> _Worker | None:
        """A started worker, or None after START_ATTEMPTS in a row failed to start (each
        failure is remembered for the error message)."""
        while len(self._start_failures) < START_ATTEMPTS:
            worker = _Worker(self._context, self.options, self._threads)
            if worker.wait_ready():
                self._start_failures.clear()
                return worker
            self._start_failures.append(_ended(worker.process))
        return None

    def start(self) -> LocalProcesses:
        """Starts the workers and waits until each has imported zerohop (`results` does it
        too; benches call it first to time the records alone). A worker that fails to start
        is replaced like one that dies; with none started, the job cannot run."""
        while len(self._live) < self.workers:
            worker = self._new_worker()
            if worker is None:
                break
            self._live.append(worker)
        if not self._live:
            raise EcgInputError(
                f"no worker process could start ({START_ATTEMPTS} tried: "
                f"{'; '.join(self._start_failures)})")
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for worker in self._live:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._live:
            worker.process.join(timeout=10)
            worker.stop()
        self._live = []
        return False

    def _replace(self, worker: _Worker, idle: list[_Worker],
                 todo: list[tuple[int, str]]) -> None:
        self._live.remove(worker)
        worker.stop()
        if todo:
            replacement = self._new_worker()
            if replacement is not None:
                self._live.append(replacement)
                idle.append(replacement)
        if not self._live and todo:
            raise EcgInputError(
                f"every worker process died and none could be started again "
                f"({'; '.join(self._start_failures)}); {len(todo)} record(s) not processed")

    def results(self) -> Iterator[RecordResult]:
        todo = list(enumerate(str(p) for p in self.paths))[::-1]
        self.start()
        idle = list(self._live)
        outstanding = 0
        while todo or outstanding:
            while idle and todo:
                index, path = todo.pop()
                idle.pop().give((index, path), record_timeout(path, self.timeout))
                outstanding += 1
            # Keyed by what wait() hands back: a worker's pipe, or its process's sentinel.
            by_handle: dict[_ConnectionBase[Any, Any] | socket | int, _Worker] = {}
            deadlines: list[float] = []
            for worker in self._live:
                if worker.task is not None:
                    by_handle[worker.conn] = worker
                    by_handle[worker.process.sentinel] = worker
                    if worker.deadline is not None:
                        deadlines.append(worker.deadline)
            wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait(list(by_handle), timeout=wait_for)
            now = time.monotonic()
            late = [w for w in self._live if w.task is not None and w.deadline is not None
                    and now >= w.deadline and w.conn not in ready
                    and w.process.sentinel not in ready]
            for worker in late:
                assert worker.task is not None  # `late` holds workers on a record
                index, path = worker.task
                limit = record_timeout(path, self.timeout)
                worker.task = None
                outstanding -= 1
                self._replace(worker, idle, todo)
                yield RecordFailure(index, record_name(Path(path)),
                                    f"took longer than {limit:.0f} s (--record-timeout); its "
                                    f"worker was stopped and replaced")
            for ready_handle in ready:
                worker = by_handle[ready_handle]
                if worker.task is None:
                    continue  # its result and its end were both ready; handled already
                index, path = worker.task
                result: RecordResult | None = None
                try:
                    if worker.conn.poll():
                        # Unpickling maps the rows' shared memory while the worker holds it.
                        result = worker.conn.recv()
                except EOFError:
                    pass  # the worker is gone: its end tells how
                except (OSError, ValueError, TypeError, pickle.UnpicklingError) as error:
                    result = RecordFailure(index, record_name(Path(path)),
                                           f"could not take the result: {_error_text(error)}")
                if result is None:
                    worker.process.join(timeout=5)
                    if worker.process.is_alive():
                        continue
                    result = RecordFailure(index, record_name(Path(path)),
                                           f"the worker ({_ended(worker.process)}) died while "
                                           f"processing it")
                worker.task = None
                outstanding -= 1
                if worker.process.is_alive():
                    idle.append(worker)
                else:
                    self._replace(worker, idle, todo)
                yield result


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _ended(process: BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"pid {process.pid}, killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"pid {process.pid}, killed by signal {-code}"
    return f"pid {process.pid}, exit code {code}"


def _ray_record(index: int, path: str, options: RecordOptions) -> RecordBeats:
    """`process_record` as a Ray task, labelled with the node that ran it."""
    import ray

    result = process_record(index, path, options)
    node = ray.get_runtime_context().get_node_id()
    result.worker += f", Ray node {node[:8]}"
    result.node = node
    return result


class RayCluster:
    """`--ray ADDRESS` (`auto`, `ray://host:port`, or `local` to start one here): one task per
    record, placed round the cluster's nodes in proportion to their CPUs; the rows go into
    Ray's object store once, and come back as read-only views of it. Rows made on another
    node reach the job's node through Ray's object transfer (a copy, counted per record). A
    node lost mid-run fails the records it was running or whose rows only it held; the
    others go on."""

    def __init__(self, paths: Sequence[Path], options: RecordOptions, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise EcgInputError("--ray needs Ray: pip install 'ray[default]'") from None
        self.ray: ModuleType = ray
        self.paths, self.options, self.address = paths, options, address
        self.label = f"Ray ({address})"
        self._started = False
        self._refs: list[ObjectRef[RecordBeats]] = []

    def __enter__(self) -> RayCluster:
        ray = self.ray
        if not ray.is_initialized():
            try:
                if self.address == "local":
                    ray.init(num_cpus=os.cpu_count(), include_dashboard=False,
                             log_to_driver=False)
                else:
                    ray.init(address=self.address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise EcgInputError(f"--ray {self.address}: {error}") from None
            self._started = True
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._refs = []
        if self._started:
            self.ray.shutdown()
        return False

    def results(self) -> Iterator[RecordResult]:
        ray = self.ray
        task = ray.remote(max_retries=0)(_ray_record)
        here = ray.get_runtime_context().get_node_id()
        places = _node_cycle(ray)
        pending = {task.options(scheduling_strategy=_placement(ray, places, i)).remote(
            i, str(p), self.options): i for i, p in enumerate(self.paths)}
        self._refs = list(pending)  # the objects stay in the store while the job runs
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ref)
            name = record_name(self.paths[index])
            try:
                result = ray.get(ref)
                if result.node != here:
                    result.transferred = _object_size(ray, ref, result)
                yield result
            except ray.exceptions.RayTaskError as error:
                cause = error.cause if getattr(error, "cause", None) is not None else error
                yield RecordFailure(index, name, _error_text(cause))
            except ray.exceptions.RayError as error:  # a worker or node lost
                yield RecordFailure(index, name, f"{type(error).__name__}: "
                                    f"{str(error).splitlines()[0]}")


def _node_cycle(ray: ModuleType) -> list[str]:
    """The cluster's live nodes with CPUs, each as often as it has CPUs, interleaved (a node
    with 3 CPUs beside one with 1: A, B, A, A), so that records go round them in proportion
    from the first record on. Ray's own SPREAD is best effort: on a small job it left nodes
    without a record."""
    slots: list[tuple[float, str]] = []
    for node in ray.nodes():
        cpus = int(node.get("Resources", {}).get("CPU", 0))
        if node.get("Alive") and cpus >= 1:
            slots += [((k + 0.5) / cpus, node["NodeID"]) for k in range(cpus)]
    return [node for _, node in sorted(slots)]


def _placement(ray: ModuleType, cycle: Sequence[str],
               index: int) -> Literal["SPREAD"] | NodeAffinitySchedulingStrategy:
    """Record `index`'s node from `cycle`, soft: should the node be gone by then, Ray runs
    the record elsewhere."""
    if not cycle:
        return "SPREAD"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(cycle[index % len(cycle)], soft=True)


def _object_size(ray: ModuleType, ref: ObjectRef[RecordBeats], result: RecordBeats) -> int:
    """The bytes of the task's result object as Ray stores and moves it; the rows' bytes when
    Ray does not say (a small object travels inline, with the task's reply)."""
    try:
        size = ray.experimental.get_object_locations([ref])[ref].get("object_size")
    except Exception:  # noqa: BLE001 - an accounting detail must not fail the record
        size = None
    if size:
        return int(size)
    assert result.beats is not None  # a worker's result carries its rows
    return int(result.beats.nbytes)


class DaskCluster:
    """`--dask ADDRESS` (a scheduler address, or `local` for a LocalCluster of processes): one
    task per record. Workers on this machine put the rows in shared memory, so they arrive as
    handles; from other machines they arrive through Dask's comms (a copy, counted).

    A worker that dies fails every task it held, not only the one that killed it, so a task
    lost that way is not yet blamed: once the other records are done it runs again alone, where
    nothing else can be lost with it, and only a failure there is the record's own. A cluster
    the job starts gives up on a task at its first worker death
    (`distributed.scheduler.allowed-failures` 0), so a record that kills its worker costs two
    workers rather than eight. Each result is let go as soon as its rows are mapped here: a
    worker's death then cannot lose (and re-run) a record already taken."""

    def __init__(self, paths: Sequence[Path], options: RecordOptions, address: str, workers: int,
                 verbose: bool = False) -> None:
        try:
            import distributed
        except ImportError:
            raise EcgInputError("--dask needs Dask: pip install 'dask[distributed]'") from None
        self.distributed: ModuleType = distributed
        self.paths, self.address = paths, address
        self.options = options
        self.workers = max(1, min(workers, len(paths)))
        self.label = f"Dask ({address})"
        self.verbose = verbose
        self._client: _DaskClient | None = None
        self._cluster: LocalCluster | None = None
        #: The "distributed" logger and its level before the job quieted it.
        self._quieted: tuple[logging.Logger, int] | None = None

    def __enter__(self) -> DaskCluster:
        import logging

        d = self.distributed
        if not self.verbose:
            # A record's failure is reported in one line by the job; Dask's own log lines
            # (worker deaths, task tracebacks) only with --verbose.
            log = logging.getLogger("distributed")
            self._quieted = (log, log.level)
            log.setLevel(logging.CRITICAL)
        try:
            if self.address == "local":
                self._cluster = self._start_local(logging.ERROR if self.verbose
                                                  else logging.CRITICAL)
                self._client = d.Client(self._cluster)
            else:
                self._client = d.Client(self.address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as error:
            raise EcgInputError(f"--dask {self.address}: {error}") from None
        return self

    def _start_local(self, log_level: int) -> LocalCluster:
        """A LocalCluster of `workers` processes. One worker that dies while it starts (killed,
        out of memory) fails the whole start, its nanny giving up ("Nanny failed to start"),
        so the start is tried again, START_ATTEMPTS times in all, as local workers are. Once
        running, a nanny restarts a dead worker itself, trying again if the restart dies."""
        fault = {"preload": [__name__]} if os.environ.get(START_FAULT) else {}
        failures: list[str] = []
        while len(failures) < START_ATTEMPTS:
            try:
                cluster: LocalCluster = self.distributed.LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=True,
                    dashboard_address=None, scheduler_kwargs={"allowed_failures": 0},
                    silence_logs=log_level, **fault)
                return cluster
            except RuntimeError as error:  # the cluster closed itself again
                failures.append(f"{error}".rstrip("."))
        raise EcgInputError(f"no cluster could start ({START_ATTEMPTS} tried: "
                            f"{'; '.join(failures)})")

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._quieted is not None:
            log, level = self._quieted
            log.setLevel(level)
        return False

    def _submit(self, index: int) -> _DaskFuture:
        assert self._client is not None  # submitted only inside `with`
        return self._client.submit(process_record, index, str(self.paths[index]), self.options,
                                   pure=False, retries=0)

    def _take(self, future: _DaskFuture, index: int) -> tuple[RecordResult, bool]:
        """The record's result, or its failure and whether another record may have caused it."""
        try:
            return future.result(), False
        except EcgInputError as error:  # the record's own input, refused the same every time
            return RecordFailure(index, record_name(self.paths[index]), _error_text(error)), False
        except Exception as error:  # KilledWorker, a lost connection, a stale handle
            text = ("KilledWorker: the Dask worker running it died"
                    if type(error).__name__ == "KilledWorker" else _error_text(error))
            return RecordFailure(index, record_name(self.paths[index]), text), True
        finally:
            future.release()  # the rows are mapped here now; the worker may free its copy

    def results(self) -> Iterator[RecordResult]:
        d = self.distributed
        submitted = {self._submit(index): index for index in range(len(self.paths))}
        suspects: list[int] = []
        for future in d.as_completed(list(submitted)):
            index = submitted.pop(future)
            result, maybe_not_its_own = self._take(future, index)
            if maybe_not_its_own:
                suspects.append(index)
            else:
                yield result
        for index in sorted(suspects):
            future = self._submit(index)
            d.wait(future)
            result, _ = self._take(future, index)
            if isinstance(result, RecordFailure):
                result.error += " (also when it ran alone, so not because of another record)"
            yield result


def check_engine(timeout: float | None, ray: str | None, dask: str | None) -> None:
    """Refuses a time limit per record where nothing could keep it: Ray and Dask run records
    in workers the job does not own, so it cannot stop one."""
    if timeout is not None and (ray is not None or dask is not None):
        raise EcgInputError("--record-timeout stops local worker processes; it does not go "
                            "with --ray or --dask")


def backend(paths: Sequence[Path], options: RecordOptions, *, workers: int = 1,
            ray: str | None = None, dask: str | None = None, timeout: float | None = None,
            verbose: bool = False) -> InProcess | LocalProcesses | RayCluster | DaskCluster:
    """The backend the arguments choose; shared memory wherever the rows stay on this machine.
    A time limit per record (`timeout`) is kept by local worker processes only: with Ray or
    Dask it is refused, not ignored."""
    from dataclasses import replace

    check_engine(timeout, ray, dask)
    options = replace(options, job_pid=os.getpid())
    here = replace(options, shared_on=boot_id())
    if ray is not None:
        return RayCluster(paths, options, ray)
    if dask is not None:
        return DaskCluster(paths, here, dask, workers, verbose=verbose)
    if (workers > 1 and len(paths) > 1) or timeout is not None:
        # A time limit needs a process it can stop: one worker of its own, if only one.
        return LocalProcesses(paths, here, workers, timeout=timeout)
    return InProcess(paths, options)


__all__ = ["DaskCluster", "InProcess", "LocalProcesses", "RayCluster", "RecordBeats",
           "RecordFailure", "backend"]
