"""The outlier ranking: each beat's own part of its window (the previous T wave's end to the
next QRS onset), its prematurity, and a job on a record with premature ventricular beats
whose top outliers are those beats."""

import numpy as np

from conftest import requires_torch
from zerohop_ecg.__main__ import main
from zerohop_ecg.outliers import outlier_score, own_beat_mask, own_beat_span, prematurity

RATE = 360.0


def test_a_beat_owns_its_window_between_its_neighbours():
    # Beats 1 s apart, then one 0.4 s after: the middle beat's next one comes early.
    r_peaks = np.array([1000, 1360, 1720, 1864, 2224])
    lo, hi = own_beat_span(r_peaks, r_peaks, RATE, before=90, width=256)
    # Beat 1720 (row 2): the previous T wave ends at 1360 + 0.4 × 360 = 1504, before its
    # window (1630); the next QRS starts at 1864 − 21.6 = 1842.4, inside it (column 213).
    assert (lo[2], hi[2]) == (0, 213)
    # Beat 1864 (row 3): the previous T wave ends at 1720 + 0.4 × 144 = 1777.6 (column 4).
    assert lo[3] == 4 and hi[3] == 256
    # The first and last beats have no neighbour on one side: the window's edge.
    assert lo[0] == 0 and hi[-1] == 256
    mask = own_beat_mask(r_peaks, r_peaks, RATE, before=90, width=256)
    assert mask.shape == (5, 256) and mask[2].sum() == 213 and mask[3, :4].sum() == 0


def test_a_beat_always_owns_its_r_peak():
    r_peaks = np.array([1000, 1010, 1020])  # absurdly close: still the peak's columns
    lo, hi = own_beat_span(r_peaks, r_peaks, RATE, before=90, width=256)
    assert (lo <= 89).all() and (hi >= 91).all()


def test_prematurity_is_the_local_rhythm_over_the_beat_s_own_interval():
    r_peaks = np.cumsum([0] + [360] * 10 + [252] + [468] + [360] * 3)
    early = prematurity(r_peaks, r_peaks)
    assert np.allclose(early[:11], 1.0)
    assert early[11] == 360 / 252  # 30 % early
    assert early[12] < 1.0  # the compensatory pause after it
    score = outlier_score(np.ones(len(r_peaks)), early)
    assert score[11] == 360 / 252 and score[12] == 1.0  # a late beat keeps its error


@requires_torch
def test_premature_ventricular_beats_top_the_outliers_of_a_holter_like_record(
        tmp_path, capsys):
    code = main(["--synthetic", "0.25", "--ectopic", "0.05", "--heart-rate", "85",
                 "--epochs", "20", "--no-plots", "--no-progress", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    report = (tmp_path / "report.md").read_text()
    table = report.split("## Most outlying beats", 1)[1].split("\n| 1 |", 1)[1]
    rows = ("| 1 |" + table).split("\n")[:10]
    classes = [row.split("|")[3].strip() for row in rows]
    assert classes.count("V") >= 8, rows
