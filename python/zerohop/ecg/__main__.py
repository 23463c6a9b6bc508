"""``python -m zerohop.ecg`` (also installed as ``zerohop-ecg``): the zero-copy ECG pipeline."""

import argparse
import sys
from pathlib import Path

from .pipeline import Config, run


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="zerohop-ecg",
        description="CSV → heartbeats → LightVAE → plots, every hand-off zero-copy. Without "
        "arguments it runs on the bundled MIT-BIH record 208 excerpt (360 Hz).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--csv", type=Path, help="a numeric CSV (one column per signal)")
    source.add_argument("--synthetic", type=float, metavar="HOURS",
                        help="generate this many hours of synthetic ECG with known R peaks")
    parser.add_argument("--rate", type=float, help="sampling rate in Hz (needed with --csv)")
    parser.add_argument("--column", help="CSV column to use (default: the first)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("out/ecg"),
                        help="folder for the plots and report.md (default out/ecg)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-plots", action="store_true",
                        help="skip the PNG plots (the report is still written)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.synthetic is not None and args.synthetic <= 0:
        parser.error("--synthetic needs a positive number of hours")
    config = Config(out=args.out, csv=args.csv, rate=args.rate, column=args.column,
                    synthetic_hours=args.synthetic, device=args.device, epochs=args.epochs,
                    batch_size=args.batch_size, seed=args.seed, progress=not args.no_progress,
                    plots=not args.no_plots)
    try:
        result = run(config)
    except (OSError, ValueError, RuntimeError) as err:
        print(f"zerohop-ecg: {err}", file=sys.stderr)
        return 2
    width = max(len(name) for name, _, _ in result.stages)
    print("\nstage".ljust(width + 2) + "   seconds   bytes copied")
    for name, seconds, copied in result.stages:
        print(f"{name.ljust(width)}  {seconds:9.4f}   {copied:,}")
    print(f"\nzero-copy hand-offs verified: {sum(s for _, _, s in result.hand_offs)}"
          f"/{len(result.hand_offs)}")
    print(f"report: {result.report}")
    for name, path in result.plots.items():
        print(f"plot:   {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
