"""The zero-copy ECG pipeline of NVIDIA's "ML Frameworks Interoperability, Part 3".

CSV → zerohop Table (parsed in parallel, Rust) → Ricker curvature → local-maxima gates →
pruning → beats [n, width] (Rust, zerohop memory) → PyTorch through DLPack (same pointer) →
LightVAE → latents and reconstructions back through DLPack → plots and a report.

Run it: ``python -m zerohop.ecg`` (the bundled MIT-BIH record 208 excerpt), or
``--csv PATH --rate HZ``, or ``--synthetic HOURS``. The stages are importable too.
"""

from pathlib import Path

from .._zerohop import ecg as _ecg

#: The bundled recording: MIT-BIH record 208, lead MLII, 5 min at 360 Hz (see data/README.md).
RECORD_208 = Path(__file__).with_name("data") / "mitdb208_excerpt_360hz.u16le"
RECORD_208_RATE = 360.0

read_csv = _ecg.read_csv
segment = _ecg.segment
params = _ecg.params
synthesize = _ecg.synthesize
score = _ecg.score


def load_record_208():
    """The bundled recording in millivolts (float32 NumPy array)."""
    import numpy as np

    adc = np.fromfile(RECORD_208, dtype="<u2")
    return ((adc.astype(np.float32) - 1024.0) / 200.0).astype(np.float32)


__all__ = [
    "RECORD_208", "RECORD_208_RATE", "load_record_208", "params", "read_csv", "score",
    "segment", "synthesize",
]
