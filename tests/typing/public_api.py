"""A user's script over zerohop's public API, as documented: `make typecheck` (part of
`make test`) checks it with `mypy --strict`, with no `type: ignore` anywhere, then runs it. A
call the docs show that the type information rejects fails here first."""

from __future__ import annotations

import numpy as np

import zerohop
import zerohop_ecg as ecg  # the ECG app (apps/ecg), a client of the API above
import zerohop.memory as zm


def memory_stack() -> int:
    stats = zm.Stats(zm.Pool(zm.System(), initial=1 << 20, maximum=64 << 20))
    limited = zm.Limit(stats, 1 << 30)
    zm.set_current(limited)
    try:
        t = zerohop.zeros((1000,), "float32")
        with zm.use_for_numpy(stats):
            a = np.ones(1000)
        counted = zm.stats(stats)
        del t, a
    finally:
        zm.reset_current()
    shared = zm.Monotonic(zm.Shared(), chunk=1 << 20)
    tracked = zm.Tracking(zm.System(), backtraces=True)
    address = tracked.allocate(64)
    leaks = zm.leaks(tracked)
    tracked.deallocate(address, 64)
    assert shared.device == "cpu" and leaks[0]["bytes"] == 64
    return counted["peak_bytes"]


def table_to_numpy() -> float:
    table = zerohop.Table([("x", "float64"), ("v", "float32", 3)], 100)
    x = np.from_dlpack(table["x"])
    x[:] = 2.0
    (kin,) = table.tensors(["v"])
    try:
        table["nope"]
    except zerohop.NoSuchColumnError as error:
        assert "nope" in str(error)
    moved = table["x"].to("cpu")  # a copy, as a device column's would be
    assert moved.is_copied
    return float(x.sum()) + float(np.from_dlpack(kin).sum()) + float(moved.numpy()[0])


def detection() -> float:
    rate = 360.0
    signal, peaks, _ = ecg.synthesize(60.0, rate=rate, heart_rate=75.0, seed=1)
    seg = ecg.segment(signal, rate)
    sens, ppv, _, _, _ = ecg.score(np.from_dlpack(seg["r_peaks"]).astype(float),
                                   np.from_dlpack(peaks).tolist(),
                                   0.150 * rate, int(5 * rate), signal.shape[0])
    detected = np.from_dlpack(seg["r_peaks"]).astype(float)
    as_arrays = ecg.score(detected, np.from_dlpack(peaks), 0.150 * rate, int(5 * rate),
                          signal.shape[0])
    assert as_arrays[0] == sens
    return sens * ppv


def main() -> None:
    print(memory_stack(), table_to_numpy(), detection())


if __name__ == "__main__":
    main()
