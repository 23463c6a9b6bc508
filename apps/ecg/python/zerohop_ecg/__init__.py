"""The zero-copy ECG pipeline of NVIDIA's "ML Frameworks Interoperability, Part 3", on real
recordings.

Input (PhysioNet WFDB records, CSV files, synthetic ECG; parsed in Rust straight into a zerohop
Table, handed over through zerohop's public API) → R-peak detection (adaptive thresholds after Pan & Tompkins, any rate from 30 to
250 bpm; or the blog's fixed windows) → one beat row per R peak (Rust, zerohop memory) →
PyTorch through DLPack (same pointer) → LightVAE → latents and reconstruction errors back
through DLPack → figures and a report, with the detection scored against reference
annotations when the recording has them.

Run it: ``zerohop-ecg`` or ``python -m zerohop_ecg`` (the bundled MIT-BIH record 100), ``--wfdb RECORD``,
``--csv PATH [--rate HZ]`` or ``--synthetic HOURS``. The stages are importable too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .kernels import (
    assess_quality,
    csv_header,
    edf_header,
    params,
    read_annotations,
    read_csv,
    read_edf,
    read_wfdb,
    score,
    segment,
    synthesize,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

_DATA = Path(__file__).with_name("data")
#: The bundled recordings (MIT-BIH Arrhythmia Database; attribution in data/README.md).
#: Record 100: 30 min, leads MLII and V5, 360 Hz, with its reference beat annotations.
RECORD_100 = _DATA / "mitdb100"
#: Record 208: lead MLII, a 5 min excerpt at 360 Hz, raw 16-bit samples.
RECORD_208 = _DATA / "mitdb208_excerpt_360hz.u16le"
RECORD_208_RATE = 360.0


def load_record_208() -> NDArray[np.float32]:
    """The bundled record 208 excerpt in millivolts (float32 NumPy array)."""
    import numpy as np

    adc = np.fromfile(RECORD_208, dtype="<u2")
    return ((adc.astype(np.float32) - 1024.0) / 200.0).astype(np.float32)


__all__ = [
    "RECORD_100", "RECORD_208", "RECORD_208_RATE", "assess_quality", "csv_header", "edf_header",
    "load_record_208", "params", "read_annotations", "read_csv", "read_edf", "read_wfdb", "score", "segment",
    "synthesize",
]
