"""The job over many recordings (`--records`): workers detect and cut beats, the rows reach
PyTorch where the transport left them (shared memory, Ray's object store) with no copy, one
LightVAE trains on every record's beats, and the report lists every record, its detection score
and where its rows lived, and names the records that failed."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from . import sources
from .batch_report import write_batch_plots, write_batch_report
from .config import Config, RecordOptions
from .errors import EcgInputError
from .outliers import outlier_score
from .output import Staging
from .plots import held_out_label
from .records import RecordFailure, find_records, where_it_lives
from .workers import InProcess, backend, check_engine

if TYPE_CHECKING:
    from torch import Tensor as TorchTensor

    from zerohop import Tensor
    from .batch_report import BatchOutlier, Pooled, RowsHandOff
    from .records import RecordBeats
    from .workers import DaskCluster, LocalProcesses, RayCluster

    _Backend: TypeAlias = InProcess | LocalProcesses | RayCluster | DaskCluster

_T = TypeVar("_T")

#: Where rows may lie without having been copied on their way to this process.
SHARED_PLACES = ("shared memory", "Ray object store")


@dataclass
class BatchResult:
    report: Path
    plots: dict[str, Path]
    records: list[RecordBeats]
    failures: list[RecordFailure]
    hand_offs: list[RowsHandOff]
    bytes_copied: int
    losses: list[float] = field(default_factory=list)
    train_seconds: float = 0.0
    #: Beats passed through the model in training, over every epoch and rank.
    beats_trained: int = 0


class _Shared(TypedDict):
    """What each rank tells every other of its records before training."""

    #: Without their rows (`beats` None).
    records: list[RecordBeats]
    failures: list[RecordFailure]
    hand_offs: list[RowsHandOff]
    problem: str | None


class _Embedded(TypedDict):
    """What each rank sends rank 0 after training: its records' latent means, by record
    index, and its most unusual beats."""

    mu: dict[int, NDArray[np.float32]]
    outliers: list[BatchOutlier]


def _torch_view(torch: ModuleType, beats: Tensor) -> TorchTensor:
    """A torch tensor over a record's rows, same memory. Ray's store is read-only and torch has
    no read-only tensors: it gets the rows through NumPy (torch warns that it could write; the
    job never writes beats, training reads them once to normalise them)."""
    if not beats.readonly:
        return torch.from_dlpack(beats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.from_dlpack(beats))


def _check_widths(records: Sequence[RecordBeats]) -> None:
    widths: dict[int, list[str]] = {}
    for r in records:
        widths.setdefault(r.width, []).append(f"{r.name} ({r.rate:g} Hz)")
    if len(widths) > 1:
        groups = "; ".join(f"{w} samples: {', '.join(names)}" for w, names in widths.items())
        raise EcgInputError(f"the recordings' beat rows differ in width ({groups}): one model "
                            f"trains on one rate; run each rate as its own job")


def _pooled(records: Sequence[RecordBeats]) -> Pooled | None:
    scored = [r.accuracy for r in records if r.accuracy is not None and r.accuracy["scored"]]
    if not scored:
        return None
    tp = sum(a["tp"] for a in scored)
    fp = sum(a["fp"] for a in scored)
    fn = sum(a["fn"] for a in scored)
    return {"records": len(scored), "tp": tp, "fp": fp, "fn": fn,
            "sensitivity": tp / max(1, tp + fn), "ppv": tp / max(1, tp + fp),
            "f1": 2 * tp / max(1, 2 * tp + fp + fn)}


def _collect(work: _Backend, config: Config, total: int, say: Callable[[str], object]
             ) -> tuple[list[RecordBeats], list[RecordFailure]]:
    records: list[RecordBeats] = []
    failures: list[RecordFailure] = []
    for result in work.results():
        done = len(records) + len(failures) + 1
        if isinstance(result, RecordFailure):
            failures.append(result)
            say(f"  [{done}/{total}] {result.name}: FAILED: {result.error}")
            if config.stop_on_error:
                raise EcgInputError(f"record {result.name} failed: {result.error} "
                                    f"(stopping: --stop-on-error)")
        else:
            records.append(result)
            say(f"  [{done}/{total}] {result.name}: {result.rows:,} beats, "
                f"{result.bpm:.0f} bpm, {result.seconds:.2f} s ({result.worker})")
    if not records:
        raise EcgInputError(f"no recording could be processed; first failure: "
                            f"{failures[0].name}: {failures[0].error}")
    return sorted(records, key=lambda r: r.index), sorted(failures, key=lambda f: f.index)


class _World:
    """This process's place among torchrun's ranks (one rank when not under torchrun)."""

    def __init__(self, torch: ModuleType, device: str) -> None:
        import os

        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = device
        self.dist: ModuleType | None = None
        if self.size > 1:
            import torch.distributed as dist

            local = int(os.environ.get("LOCAL_RANK", "0"))
            nccl = device == "cuda" and torch.cuda.device_count() >= int(
                os.environ.get("LOCAL_WORLD_SIZE", self.size))
            if device == "cuda":
                self.device = f"cuda:{local % torch.cuda.device_count()}"
                torch.cuda.set_device(self.device)
            if not dist.is_initialized():
                dist.init_process_group("nccl" if nccl else "gloo")
            self.dist = dist

    def gather(self, value: _T) -> list[_T]:
        """Every rank's `value`, in rank order."""
        if self.dist is None:
            return [value]
        out: list[_T | None] = [None] * self.size
        self.dist.all_gather_object(out, value)
        return cast("list[_T]", out)  # all_gather_object filled every slot

    def close(self) -> None:
        if self.dist is not None and self.dist.is_initialized():
            # Every rank reaches this point before any tears its process group down: a rank
            # that destroyed gloo's while another still used it aborted now and then
            # ("terminate called without an active exception", SIGABRT).
            try:
                self.dist.barrier()
            except RuntimeError:
                pass  # another rank is gone; nothing to wait for
            self.dist.destroy_process_group()


class _NoOutput:
    """Ranks other than 0 write nothing."""

    path = None

    def __enter__(self) -> _NoOutput:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

    def commit(self) -> None:
        pass


def _hand_to_torch(torch: ModuleType, records: Sequence[RecordBeats], in_process: bool
                   ) -> tuple[list[RowsHandOff], list[TorchTensor]]:
    """Each record's rows as a torch tensor over the same memory, and what that cost."""
    hand_offs: list[RowsHandOff] = []
    parts: list[TorchTensor] = []
    for r in records:
        beats = r.beats
        assert beats is not None  # only the copies the ranks exchange go without rows
        place = where_it_lives(beats.data_ptr)
        moved = (place == "process memory" and not in_process) or beats.is_copied
        x = _torch_view(torch, beats)
        hand_offs.append({"record": r.name, "place": place, "bytes": beats.nbytes,
                          "copied": beats.nbytes if moved else 0,
                          "same": x.data_ptr() == beats.data_ptr})
        if x.data_ptr() != beats.data_ptr:
            raise AssertionError(f"{r.name}: torch's view is not the rows' memory")
        kept = r.kept
        # Rows in unreliable signal are left out: a copy by choice, after the hand-off.
        parts.append(x if kept is None else x[torch.from_numpy(kept)])
    return hand_offs, parts


def _own_spans(records: Sequence[RecordBeats]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The rows trained on, every record's in turn: where each one's own part of its window
    starts and ends (`outliers.own_beat_span`, made by the record's worker)."""
    spans = [r.own_span for r in records if r.own_span is not None]
    assert len(spans) == len(records)  # process_record makes them for every record
    empty = np.zeros(0, dtype=np.int64)
    starts, ends = ([r.kept_of(s[side]) for r, s in zip(records, spans)] for side in (0, 1))
    return (np.concatenate(starts) if starts else empty, np.concatenate(ends) if ends else empty)


def _outliers(records: Sequence[RecordBeats], parts: Sequence[TorchTensor],
              error: NDArray[np.floating[Any]]) -> list[BatchOutlier]:
    """The ten beats of highest outlier score (the one-recording job's: the own part's error
    times the beat's prematurity, at least 1), with their error and score."""
    early = [r.kept_of(r.prematurity) for r in records if r.prematurity is not None]
    score = outlier_score(error, np.concatenate(early)) if early else error
    offsets = np.cumsum([0] + [int(p.shape[0]) for p in parts])
    found: list[BatchOutlier] = []
    for row in np.argsort(score)[::-1][:10]:
        k = int(np.searchsorted(offsets, row, side="right") - 1)
        r = records[k]
        at = int(row - offsets[k])
        kept = r.kept
        peak = int(r.beat_peaks[at if kept is None else kept[at]])
        found.append({"record": r.name, "time": peak / r.rate, "error": float(error[row]),
                      "score": float(score[row])})
    return found


def raise_descriptor_limit() -> int | None:
    """Lifts this process's soft limit on open files to its hard limit (workers inherit it):
    rows arrive in shared memory, a few descriptors per worker, but Dask, Ray and torch hold
    sockets and libraries too, and the common soft limit (1024, or less in containers) is
    the one a user did not choose. Returns the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        try:  # the kernel's ceiling for one process
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft


def run_batch(config: Config, say: Callable[[str], object] = print) -> BatchResult | None:
    """Runs the job over `config.records`; the output folder is written only if it succeeds.
    Under `torchrun --nproc-per-node N` every rank takes every N-th record and trains on its
    own records' beats, the gradients averaged over ranks every step (one all-reduce of one
    flat buffer), and rank 0 writes the report and gets the result (other ranks get None)."""
    check_engine(config.record_timeout, config.ray, config.dask)
    torch = sources.require_job(config)
    if config.records is None:  # the CLI always sets it; Path(None) raised TypeError here
        raise TypeError("run_batch: config.records names no recordings")
    paths = find_records(config.records)
    raise_descriptor_limit()
    world = _World(torch, config.device)
    try:
        if world.size > len(paths):
            raise EcgInputError(f"--records {config.records}: {len(paths)} recording(s) for "
                                f"{world.size} ranks; every rank needs one")
        return _run(config, torch, world, paths[world.rank::world.size],
                    say if world.rank == 0 else (lambda *_: None), total=len(paths))
    finally:
        world.close()


def _run(config: Config, torch: ModuleType, world: _World, paths: Sequence[Path],
         say: Callable[[str], object], total: int) -> BatchResult | None:
    from .vae import convergence_note, embed, train, warm_up_in_background

    warmed = warm_up_in_background(world.device)

    options = RecordOptions(method=config.method, column=config.column, rate=config.rate,
                            delimiter=config.delimiter, fill=config.fill)
    output = Staging(config.out) if world.rank == 0 else _NoOutput()
    with output, backend(paths, options, workers=config.workers, ray=config.ray,
                         dask=config.dask, timeout=config.record_timeout,
                         verbose=config.verbose) as work:
        label = work.label + (f", on each of {world.size} torchrun ranks" if world.size > 1
                              else "")
        say(f"{total} recording(s) on {label}")
        begun = time.perf_counter()
        records: list[RecordBeats] = []
        failures: list[RecordFailure] = []
        problem: str | None = None
        try:
            records, failures = _collect(work, config, len(paths), say)
            hand_offs, parts = _hand_to_torch(torch, records, isinstance(work, InProcess))
        except EcgInputError as bad:
            problem, hand_offs, parts = str(bad), [], []
        # Every rank learns every rank's records (and problems) before any collective work.
        own: _Shared = {"records": [replace(r, beats=None) for r in records],
                        "failures": failures, "hand_offs": hand_offs, "problem": problem}
        shared = world.gather(own)
        detect_seconds = time.perf_counter() - begun
        for s in shared:
            if s["problem"] is not None:
                raise EcgInputError(s["problem"])
        every = sorted((r for s in shared for r in s["records"]), key=lambda r: r.index)
        _check_widths(every)

        warmed()
        begun = time.perf_counter()
        spans = _own_spans(records)
        trained = train(parts, epochs=config.epochs, batch_size=config.batch_size,
                        lr=config.lr, seed=config.seed, device=world.device, progress=config.progress,
                        threads=config.threads, cuda_graph=config.cuda_graph,
                        fuse=config.fuse, batch_per_rank=config.batch_per_rank,
                        monitored=config.monitored, cpu_kernels=config.cpu_kernels,
                        ends=spans[1])
        train_seconds = time.perf_counter() - begun
        mu, _, _, error = embed(trained["model"], parts, trained["scale"], world.device,
                                reconstructions=False, center=trained["center"], spans=spans)
        mine: _Embedded = {"mu": {r.index: m.numpy() for r, m in
                                  zip(records, mu.split([int(p.shape[0]) for p in parts]))},
                           "outliers": _outliers(records, parts, error.numpy())}
        results = world.gather(mine)
        if world.rank != 0:
            return None
        hand_offs = sorted((h for s in shared for h in s["hand_offs"]),
                           key=lambda h: [r.name for r in every].index(h["record"]))
        failures = sorted((f for s in shared for f in s["failures"]), key=lambda f: f.index)
        outliers = sorted((o for res in results for o in res["outliers"]),
                          key=lambda o: -o["score"])[:10]
        mus = {k: v for res in results for k, v in res["mu"].items()}
        mu_all = np.concatenate([mus[r.index] for r in every])
        offsets = np.cumsum([0] + [r.trained_rows for r in every])
        copied = sum(h["copied"] for h in hand_offs)

        plots: dict[str, Path] = {}
        assert output.path is not None  # rank 0 stages its output
        if config.plots:
            plots = write_batch_plots(output.path, every, offsets, mu_all, trained["losses"],
                                      trained["held_out"], trained["best_epoch"],
                                      held_out_label(trained["monitored_beats"],
                                                     trained["held_out_beats"]))
        report = write_batch_report(
            output.path / "report.md", backend=label, records=every, failures=failures,
            hand_offs=hand_offs, copied=copied, pooled=_pooled(every), outliers=outliers,
            plots=plots, detect_seconds=detect_seconds, train_seconds=train_seconds,
            train={"epochs": config.epochs, "batch_size": trained["batch_size"],
                   "final_loss": trained["losses"][-1], "test_loss": trained["test_loss"],
                   "held_out_beats": trained["held_out_beats"],
                   "monitored_beats": trained["monitored_beats"],
                   "device": config.device, "threads": trained["threads"],
                   "ranks": world.size, "batch_per_rank": config.batch_per_rank,
                   "beats_trained": trained["beats_trained"],
                   "steps": trained["steps"], "lr": trained["lr"],
                   "captured": trained["captured"], "why_eager": trained["why_eager"],
                   "fused": trained["fused"], "why_unfused": trained["why_unfused"],
                   "cpu_kernels": trained["cpu_kernels"],
                   "why_autograd": trained["why_autograd"],
                   "setup_seconds": trained["setup_seconds"],
                   "losses": trained["losses"], "held_out": trained["held_out"],
                   "epoch_seconds": trained["epoch_seconds"],
                   "epoch_split": trained["epoch_split"],
                   "converged": convergence_note(trained, config.epochs)})
        output.commit()
    return BatchResult(report=config.out / report.name,
                       plots={k: config.out / p.name for k, p in plots.items()},
                       records=every, failures=failures, hand_offs=hand_offs,
                       bytes_copied=copied, losses=trained["losses"],
                       train_seconds=train_seconds, beats_trained=trained["beats_trained"])
