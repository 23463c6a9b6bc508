"""EDF/BDF files written byte by byte as the format lays them out, with NumPy only: the
variants edfio and pyedflib do not write (EDF+D) and the GPU machine's tests, where neither
is installed."""

import numpy as np


def _field(text, width):
    return str(text).encode("latin-1").ljust(width)[:width]


def write_edf(path, signals, *, seconds, starts=None, bdf=False, plus=None, tals=None,
              start_time="08.00.00"):
    """Writes `signals` — (label, physical values (all records), samples per record,
    (physical min, max)) — in data records of `seconds`. `plus`: None (plain), "C" or "D";
    EDF+ files get an annotation signal whose record r holds its time-keeping TAL
    (`starts[r]`, default r × seconds) then `tals[r]` (bytes of further TALs)."""
    width = 3 if bdf else 2
    low, high = (-(1 << 23), (1 << 23) - 1) if bdf else (-32768, 32767)
    records = len(signals[0][1]) // signals[0][2]
    starts = starts if starts is not None else [r * seconds for r in range(records)]
    rows = [(label, per, rng, (low, high)) for label, _, per, rng in signals]
    tal_bytes = 0
    if plus:
        longest = max((len(t) for t in (tals or [b""])), default=0)
        tal_bytes = (longest + 40 + width - 1) // width * width
        rows.append(("BDF Annotations" if bdf else "EDF Annotations", tal_bytes // width,
                     (-1, 1), (low, high)))
    n = len(rows)
    reserved = (("BDF+" if bdf else "EDF+") + plus) if plus else ("24BIT" if bdf else "")
    head = (b"\xffBIOSEMI" if bdf else _field("0", 8)) + _field("X X X X", 80)
    head += _field("Startdate 27-NOV-2026 X X X", 80) + _field("27.11.26", 8)
    head += _field(start_time, 8) + _field(256 * (n + 1), 8) + _field(reserved, 44)
    head += _field(records, 8) + _field(f"{seconds:g}", 8) + _field(n, 4)
    for width_of, pick in ((16, lambda r: r[0]), (80, lambda r: ""), (8, lambda r: "mV"),
                           (8, lambda r: f"{r[2][0]:g}"), (8, lambda r: f"{r[2][1]:g}"),
                           (8, lambda r: r[3][0]), (8, lambda r: r[3][1]), (80, lambda r: ""),
                           (8, lambda r: r[1]), (32, lambda r: "")):
        head += b"".join(_field(pick(r), width_of) for r in rows)
    digital = []
    for _, values, per, (pmin, pmax) in signals:
        d = np.round((np.asarray(values, np.float64) - pmin) / (pmax - pmin) * (high - low)
                     + low)
        digital.append(np.clip(d, low, high).astype("<i4"))
    body = bytearray()
    for r in range(records):
        for (_, _, per, _), d in zip(signals, digital):
            body += d[r * per:(r + 1) * per].view(np.uint8).reshape(-1, 4)[:, :width].tobytes()
        if plus:
            tal = f"+{starts[r]:g}\x14\x14\x00".encode() + (tals[r] if tals else b"")
            body += tal.ljust(tal_bytes, b"\x00")
    path.write_bytes(bytes(head) + bytes(body))
    return path


def tal(onset, text):
    """One annotation as an EDF+ TAL."""
    return f"+{onset:g}\x14{text}\x14\x00".encode()
