"""``python -m zerohop_ecg`` (also installed as ``zerohop-ecg``): the zero-copy ECG pipeline."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Literal, NoReturn

from .config import Config
from .errors import EcgInputError


DELIMITERS = {",": ",", "comma": ",", ";": ";", "semicolon": ";", "tab": "\t", "\\t": "\t",
              "\t": "\t"}


def _finite(kind: str, low: float | None = None, high: float | None = None,
            integer: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number within [low, high], named in the error."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if integer else 'a number'}")
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if (low is not None and value < low) or (high is not None and value > high):
            shown: Callable[[float | None], str] = \
                (lambda v: f"{v:d}") if integer else (lambda v: f"{v:g}")
            bounds = f"{shown(low)} to {shown(high)}" if high is not None else \
                f"at least {shown(low)}"
            raise argparse.ArgumentTypeError(f"{text}: {kind} must be {bounds}")
        return value

    return parse


def _progress_mode(args: argparse.Namespace) -> bool | Literal["lines"]:
    """A redrawn bar on a terminal, a line every few seconds anywhere else (a log, a pipe),
    nothing with --no-progress."""
    if args.no_progress:
        return False
    return True if sys.stderr.isatty() else "lines"


def _delimiter(text: str) -> str:
    if text not in DELIMITERS:
        raise argparse.ArgumentTypeError(f"{text!r}: use ',', ';' or 'tab'")
    return DELIMITERS[text]


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: options without (None) or with a default
    that depends on the input say so in their own help, and flags need none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or \
                "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zerohop-ecg",
        formatter_class=_Defaults,
        description="ECG → heartbeats → LightVAE → plots and a report, every hand-off "
        "zero-copy. Without an input it runs on the bundled MIT-BIH record 100 (30 min, "
        "360 Hz) and scores the detection against its reference annotations.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--wfdb", type=Path, metavar="RECORD",
                        help="a PhysioNet WFDB record (path without extension, e.g. data/100); "
                        "a RECORD.atr beside it is used to score the detection")
    source.add_argument("--csv", type=Path, help="a CSV file, one column per signal")
    source.add_argument("--edf", type=Path, metavar="FILE",
                        help="an EDF, EDF+ or BDF(+) file (Holter and sleep-lab exports); its "
                        "beat annotations, if any, score the detection")
    source.add_argument("input", nargs="?", type=Path, metavar="FILE",
                        help="a recording, its kind told by its content: EDF/BDF, a WFDB "
                        "record (RECORD or RECORD.hea), else CSV")
    source.add_argument("--records", metavar="DIR_OR_GLOB",
                        help="many recordings: a folder of WFDB records (*.hea) and CSV files, "
                        "or a glob; one model trains on all their beats")
    source.add_argument("--synthetic", type=_finite("hours", 1e-3, 24.0), metavar="HOURS",
                        help="generate this many hours (up to 24) of synthetic ECG with known "
                        "R peaks")
    p.add_argument("--rate", type=_finite("the rate", 50.0, 100_000.0), metavar="HZ",
                   help="sampling rate, 50 to 100000 Hz (CSV without a time column; "
                   "synthetic: default 360)")
    p.add_argument("--rate-overrides-time", action="store_true",
                   help="keep --rate where a CSV time column's steps give another rate "
                   "(otherwise the file is refused, naming both rates)")
    p.add_argument("--encoding", metavar="CODEC",
                   help="the CSV file's text encoding when it is not UTF-8: cp1252 (Excel on "
                   "Windows in Western Europe), latin-1, ... (UTF-16/32 with a byte-order "
                   "mark are recognised without it)")
    p.add_argument("--column", help="CSV column, WFDB lead or EDF signal, by name or 0-based "
                   "index (default: lead II or MLII when there is one, else the first signal "
                   "(EDF: the first labelled ECG/EKG); a leading CSV time column is skipped, "
                   "and gives the rate)")
    p.add_argument("--delimiter", type=_delimiter, help="CSV delimiter: ',', ';' or 'tab' "
                   "(default: sniffed)")
    p.add_argument("--fill", choices=["error", "interpolate", "zero"], default="error",
                   help="missing or empty cells in the ECG column (and an EDF+D file's gaps "
                   "between records): refuse the file, interpolate linearly between their "
                   "neighbours, or set them to 0 (the report lists how many and where)")
    p.add_argument("--heart-rate", type=_finite("the heart rate", 20.0, 250.0), default=70.0,
                   metavar="BPM", help="synthetic heart rate")
    p.add_argument("--ectopic", type=_finite("the ectopic fraction", 0.0, 0.5), default=0.0,
                   help="synthetic: fraction of premature ventricular beats")
    p.add_argument("--day-swing", type=_finite("the day swing", 0.0, 0.9), default=0.0,
                   metavar="FRACTION", help="synthetic: how far the mean heart rate swings over "
                   "a 24-hour day (0.25: ±25 %%, fastest at 14:00, slowest at 02:00)")
    p.add_argument("--method", choices=["adaptive", "blog"], default="adaptive",
                   help="beat detection: adaptive thresholds (any rate from 30 to 250 bpm), "
                   "or the Part 3 blog's fixed windows")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--epochs", type=_finite("--epochs", 1, 100_000, integer=True), default=30)
    p.add_argument("--batch-size", type=_finite("--batch-size", 1, 1 << 20, integer=True),
                   help="largest training batch (default 1024 on the CPU; on a GPU 1024 to "
                   "4096, keeping 64 steps an epoch; smaller for short recordings: a sixteenth "
                   "of the training beats, at least 16); the learning rate grows with the "
                   "square root of batches above 1024")
    p.add_argument("--lr", type=_finite("the learning rate", 1e-6, 1.0), default=2e-3,
                   help="Adam's learning rate for batches up to 1024 beats; larger batches "
                   "scale it by the square root of their size over 1024")
    p.add_argument("--no-cuda-graph", action="store_true",
                   help="with --device cuda: run each training step eagerly instead of "
                   "replaying one captured CUDA graph (for comparison or troubleshooting)")
    p.add_argument("--no-shared-pool", action="store_true",
                   help="with --device cuda: torch allocates from its own caching allocator "
                   "instead of the zerohop pool the reader and zerohop's kernels use (the "
                   "report then gives no memory line)")
    p.add_argument("--autograd", action="store_true",
                   help="on the CPU: train through torch's autograd instead of zerohop's "
                   "training kernels (the same loss and gradients, several times slower; for "
                   "comparison or troubleshooting)")
    p.add_argument("--fuse-kernels", action="store_true",
                   help="compile the training step with torch.compile: fewer, fused kernels "
                   "after a compilation of tens of seconds (pays off on long recordings and "
                   "several GPUs)")
    p.add_argument("--batch-per-rank", action="store_true",
                   help="under torchrun: each rank trains on a whole batch (N ranks: N times "
                   "the batch, N times fewer steps an epoch, the learning rate scaled) instead "
                   "of the ranks sharing one out (the same training as one process)")
    p.add_argument("--held-out-beats", type=_finite("--held-out-beats", 0, 1 << 30,
                                                    integer=True), metavar="N",
                   help="held-out beats the loss is measured on after each epoch, to stop "
                   "training once it no longer improves (default 8192, the same random ones "
                   "every epoch; 0: all of them); the final held-out loss is over all")
    p.add_argument("--threads", type=_finite("--threads", 1, 1024, integer=True),
                   help="CPU threads for training (default: the cores not busy with other "
                   "work, by the load average, never fewer than the physical cores, at most 16)")
    p.add_argument("--seed", type=_finite("--seed", 0, 2 ** 32 - 1, integer=True), default=42,
                   help="seed for the synthetic signal, the split and the model's weights")
    p.add_argument("--out", type=Path, default=Path("out/ecg"),
                   help="folder for the figures and report.md (written only if the job "
                   "succeeds)")
    many = p.add_argument_group("many recordings (--records)")
    many.add_argument("--workers", type=_finite("--workers", 1, 1024, integer=True), default=1,
                      help="local worker processes reading and segmenting records (1: in "
                      "this process)")
    engine = many.add_mutually_exclusive_group()
    engine.add_argument("--ray", metavar="ADDRESS", help="run the records on a Ray cluster "
                        "('auto', 'ray://host:port', or 'local' to start one here)")
    engine.add_argument("--dask", metavar="ADDRESS", help="run the records on a Dask cluster "
                        "(a scheduler address, or 'local' for a LocalCluster of --workers "
                        "processes)")
    many.add_argument("--record-timeout", type=_finite("--record-timeout", 1, 10 ** 6),
                      default=None, metavar="SECONDS",
                      help="a record taking longer fails, and its worker is replaced (with "
                      "--workers 1 the records run in one worker process, so that one can be "
                      "stopped; not with --ray or --dask; default with --workers N: 2 minutes "
                      "plus 30 s per MiB of the record's files)")
    many.add_argument("--verbose", action="store_true",
                      help="also show the engines' own logs (a failed record's traceback, "
                      "worker deaths); without it each failure is one line")
    many.add_argument("--stop-on-error", action="store_true",
                      help="stop at the first record that fails (default: report it, go on)")
    p.add_argument("--no-progress", action="store_true",
                   help="no training progress (a bar on a terminal, else a line every 5 s)")
    p.add_argument("--no-plots", action="store_true",
                   help="skip the PNG figures (the report is still written)")
    return p


class _Terminated(SystemExit):
    """SIGTERM, raised where the job is, so every `with` on the way out cleans up (the staging
    folder, the workers) as it does for Ctrl-C; the exit status is the shell's 128 + 15."""


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise _Terminated(128 + signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)  # signal handlers belong to the main thread
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.device == "cpu":
        from .malloc import keep_freed_memory

        keep_freed_memory()  # CPU training steps reuse their freed activations
    if args.records is None and (args.ray or args.dask or args.workers != 1
                                 or args.stop_on_error or args.record_timeout is not None):
        p.error("--workers, --ray, --dask, --record-timeout and --stop-on-error go with "
                "--records")
    if args.input is not None and (args.records is not None or args.synthetic is not None):
        p.error("give one input: a FILE, or --records, or --synthetic")
    if args.records is not None:
        return _main_records(args)
    from .pipeline import run

    if args.input is not None:
        from .sources import kind_of_file

        kind = kind_of_file(args.input)
        setattr(args, kind, args.input.with_suffix("") if kind == "wfdb" and
                args.input.suffix == ".hea" else args.input)
    config = Config(out=args.out, csv=args.csv, wfdb=args.wfdb, edf=args.edf, rate=args.rate,
                    rate_overrides_time=args.rate_overrides_time, encoding=args.encoding,
                    column=args.column, delimiter=args.delimiter, fill=args.fill,
                    synthetic_hours=args.synthetic, heart_rate=args.heart_rate,
                    ectopic=args.ectopic, day_swing=args.day_swing, method=args.method,
                    device=args.device,
                    epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                    threads=args.threads,
                    seed=args.seed, cuda_graph=not args.no_cuda_graph,
                    shared_pool=not args.no_shared_pool, fuse=args.fuse_kernels, batch_per_rank=args.batch_per_rank,
                    monitored=args.held_out_beats, progress=_progress_mode(args),
                    plots=not args.no_plots, cpu_kernels=not args.autograd)
    try:
        result = run(config)
    except (EcgInputError, OSError, ValueError) as err:
        print(f"zerohop-ecg: {err}", file=sys.stderr)
        return 2
    width = max(len(name) for name, _, _ in result.stages)
    print("\nstage".ljust(width + 2) + "   seconds   bytes copied")
    for name, seconds, copied in result.stages:
        print(f"{name.ljust(width)}  {seconds:9.4f}   {copied:,}")
    print(f"\nzero-copy hand-offs verified: {sum(s for _, _, s in result.hand_offs)}"
          f"/{len(result.hand_offs)}")
    if result.accuracy is not None and result.accuracy["scored"]:
        a = result.accuracy
        print(f"detection: sensitivity {a['sensitivity'] * 100:.2f} %, positive predictivity "
              f"{a['ppv'] * 100:.2f} %, F1 {a['f1'] * 100:.2f} % against {a['reference']}")
    elif result.accuracy is not None:
        print(f"detection against {result.accuracy['reference']}: not scored: "
              f"{result.accuracy['why']}")
    print(f"report: {result.report}")
    for name, path in result.plots.items():
        print(f"plot:   {path}")
    return 0


def _config(args: argparse.Namespace) -> Config:
    return Config(out=args.out, rate=args.rate, rate_overrides_time=args.rate_overrides_time,
                  encoding=args.encoding, column=args.column, delimiter=args.delimiter,
                  fill=args.fill,
                  method=args.method, device=args.device, epochs=args.epochs,
                  batch_size=args.batch_size, lr=args.lr, threads=args.threads, seed=args.seed,
                  cuda_graph=not args.no_cuda_graph, shared_pool=not args.no_shared_pool,
                  fuse=args.fuse_kernels, batch_per_rank=args.batch_per_rank,
                  monitored=args.held_out_beats, progress=_progress_mode(args),
                  plots=not args.no_plots, cpu_kernels=not args.autograd, records=args.records, workers=args.workers,
                  ray=args.ray, dask=args.dask, stop_on_error=args.stop_on_error,
                  record_timeout=args.record_timeout, verbose=args.verbose)


def _main_records(args: argparse.Namespace) -> int:
    from .batch import run_batch

    try:
        result = run_batch(_config(args))
    except (EcgInputError, OSError, ValueError) as err:
        print(f"zerohop-ecg: {err}", file=sys.stderr)
        return 2
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return 0
    print(f"\n{len(result.records)} record(s) trained on, {len(result.failures)} failed; "
          f"rows handed over with the same pointer: "
          f"{sum(h['same'] for h in result.hand_offs)}/{len(result.hand_offs)}, "
          f"bytes copied: {result.bytes_copied:,}")
    for failure in result.failures:
        print(f"failed: {failure.name}: {failure.error}")
    print(f"report: {result.report}")
    for path in result.plots.values():
        print(f"plot:   {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
