"""Where the whole ECG job's wall time goes, as a timeline from the moment the process was
started (interpreter start included): each phase's start and end, and on which thread, so the
phases on the critical path show (the ones nothing else overlaps).

    python bench/ecg_timeline.py [--json FILE] -- <arguments of python -m zerohop_ecg>

e.g. `python bench/ecg_timeline.py -- --csv holter.csv --device cuda --out /tmp/o`. The job
runs in this process, unchanged; the phases are timed by wrapping the functions the job calls
(reading, detection, `import torch` and the GPU's warm-up on their thread, training, the
embedding, the figures, the report). Training's own split (set-up, steps, held-out loss) is
read from what `train` returns.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time

# The process's start, in this clock: /proc gives it in clock ticks since boot.
_TICKS = os.sysconf("SC_CLK_TCK")


def _process_age() -> float:
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / _TICKS
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started


ORIGIN = time.perf_counter() - _process_age()
phases: list[dict[str, object]] = []
training: dict[str, object] = {}


def _now() -> float:
    return time.perf_counter() - ORIGIN


def _record(name: str, begun: float) -> None:
    phases.append({"phase": name, "thread": threading.current_thread().name,
                   "start": begun, "end": _now()})


def timed(name: str, fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        begun = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(name, begun)

    return wrapper


def _install() -> None:
    import zerohop_ecg as ecg
    from zerohop_ecg import figure_workers, output, report, sources

    _record("interpreter, zerohop and NumPy imported", 0.0)
    ecg.segment = timed("detection (zerohop_ecg.segment)", ecg.segment)
    sources.load = timed("read the recording (sources.load)", sources.load)
    sources.require_rest_of_job = timed("checks before torch's import starts",
                                        sources.require_rest_of_job)
    report.write_report = timed("report", report.write_report)
    output.Staging.commit = timed("output committed", output.Staging.commit)
    figure_workers.Drawing.__init__ = timed("figure workers started",
                                            figure_workers.Drawing.__init__)
    figure_workers.Drawing.finish = timed("figures: waiting for the last",
                                          figure_workers.Drawing.finish)
    cls = sources.TorchInBackground
    cls.ready = timed("main thread waits for import torch", cls.ready)
    cls.warmed = timed("main thread waits for the GPU's warm-up", cls.warmed)
    load = cls._load

    def _load(self):  # type: ignore[no-untyped-def]
        begun = _now()
        import zerohop_ecg.vae as vae

        _record("import torch and the model", begun)
        original_train = vae.train

        def train(*args, **kwargs):  # type: ignore[no-untyped-def]
            result = original_train(*args, **kwargs)
            split = result["epoch_split"]
            training.update({"setup_s": result["setup_seconds"],
                             "steps_s": sum(s for s, _ in split),
                             "held_out_s": sum(h for _, h in split),
                             "epochs": result["epochs_run"], "steps": result["steps"],
                             "batch": result["batch_size"], "threads": result["threads"],
                             "captured": result["captured"]})
            return result

        vae.train = timed("training (vae.train)", train)
        vae.embed = timed("embedding every beat (vae.embed)", vae.embed)
        vae.warm_up = timed("GPU warm-up", vae.warm_up)
        return load(self)

    cls._load = _load


def main() -> int:
    argv = sys.argv[1:]
    out_json = None
    if argv[:1] == ["--json"]:
        out_json, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    # Registered first, so run last: what is left after it is the interpreter's own
    # finalisation and the process's exit (a GPU's context torn down).
    atexit.register(lambda: print(f"exit hooks done at {_now():.2f} s", flush=True))
    _install()
    from zerohop_ecg.__main__ import main as job

    begun = _now()
    rc = job(argv)
    _record("the whole job (main)", begun)
    rows = sorted(phases, key=lambda p: (p["start"], p["end"]))
    print(f"\n{'phase':<48} {'thread':<28} {'start':>7} {'end':>7} {'seconds':>8}")
    for p in rows:
        print(f"{p['phase']:<48} {str(p['thread'])[:28]:<28} {p['start']:7.2f} "
              f"{p['end']:7.2f} {p['end'] - p['start']:8.2f}")
    heavy = [m for m in ("sympy", "torch._dynamo", "torch._inductor", "matplotlib")
             if m in sys.modules]
    print(f"imported in this process, of the modules the job should not need here: "
          f"{', '.join(heavy) or 'none'}")
    if training:
        print("training: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in training.items()))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"phases": rows, "training": training, "rc": rc, "heavy": heavy}, f,
                      indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
