"""Which outlier score ranks a Holter record's premature ventricular beats first? The job ranks
beats by the model's reconstruction error over the whole beat window (250 ms before the R peak
to 450 ms after it). On a day-long record the top of that ranking was normal beats whose
window also holds the next, premature beat, while the 4.5 % planted PVCs did not rank (issue
#44). This bench trains the job's model once on a synthetic Holter record with planted PVCs
and scores the same reconstructions several ways:

- window: the job's score until now, the mean squared error over the whole window;
- own beat: the error over the part of the window that belongs to the beat itself, from the
  previous beat's T wave's end (its R peak + 40 % of the RR) to the next beat's QRS onset
  (its R peak − 60 ms), the beat's baseline levelled to that part's end (a model trained so;
  levelled to the window's end, a next beat in the window tilts the whole beat);
- own beat × prematurity: that error times how early the beat came (the median RR of the 8
  beats before it over its own RR before), the RR context a clinician reads beside the shape.

For each it prints how many of the top 10, top 100 and top N (N = the planted PVCs) are PVCs,
and the area under the ROC curve of PVC against normal.

    python bench/ecg_outliers.py [--hours 2] [--epochs 30] [--out bench/results/ecg_outliers.md]
"""

import argparse
import os
import platform
from datetime import date

import numpy as np
import torch

import zerohop_ecg as ecg
from benchlib import emit
from zerohop_ecg import vae
from zerohop_ecg.outliers import outlier_score, own_beat_mask, own_beat_span, prematurity


def labelled_beats(hours, ectopic, seed, bpm):
    rate = 360.0
    signal, peaks, planted = ecg.synthesize(hours * 3600.0, rate=rate, heart_rate=bpm,
                                            ectopic=ectopic, noise_mv=0.05, wander_mv=0.1,
                                            day_swing=0.3 if hours >= 12 else 0.0, seed=seed)
    seg = ecg.segment(signal, rate)
    truth = np.from_dlpack(peaks).astype(np.int64)
    planted = np.asarray(planted, dtype=bool)
    beat_peaks = np.from_dlpack(seg["beat_peaks"]).astype(np.int64)
    r_peaks = np.from_dlpack(seg["r_peaks"]).astype(np.int64)
    # Each row's class: the planted beat nearest its R peak (within 150 ms).
    at = np.clip(np.searchsorted(truth, beat_peaks), 1, len(truth) - 1)
    nearest = np.where(beat_peaks - truth[at - 1] < truth[at] - beat_peaks, at - 1, at)
    close = np.abs(truth[nearest] - beat_peaks) <= 0.15 * rate
    is_pvc = planted[nearest] & close
    return seg, rate, beat_peaks, r_peaks, is_pvc


def ranking(score, is_pvc):
    order = np.argsort(score)[::-1]
    n = int(is_pvc.sum())
    tops = [int(is_pvc[order[:k]].sum()) for k in (10, 100, n)]
    # ROC AUC by ranks (Mann-Whitney).
    ranks = np.empty(len(score))
    ranks[np.argsort(score)] = np.arange(1, len(score) + 1)
    pos = ranks[is_pvc]
    auc = (pos.sum() - n * (n + 1) / 2) / (n * (len(score) - n))
    return tops, auc, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--ectopic", type=float, default=0.045)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--heart-rate", type=float, default=70.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    seg, rate, beat_peaks, r_peaks, is_pvc = labelled_beats(args.hours, args.ectopic, args.seed,
                                                            args.heart_rate)
    beats = torch.from_dlpack(seg["beats"])
    params = seg["params"]
    width = int(beats.shape[1])
    lo, hi = own_beat_span(beat_peaks, r_peaks, rate, params["before"], width)
    mask = own_beat_mask(beat_peaks, r_peaks, rate, params["before"], width)

    def squared_errors(ends):
        """Per sample, the squared error of the model trained with baselines levelled to the
        window's end (ends None) or to each beat's own part's end."""
        trained = vae.train(beats, epochs=args.epochs, progress=False, ends=ends)
        _, _, recon, _ = vae.embed(trained["model"], beats, trained["scale"],
                                   center=trained["center"], reconstructions=True,
                                   spans=None if ends is None else (lo, hi))
        assert recon is not None
        normalised = vae.level_baseline_(beats.clone(), ends)
        return (((recon - normalised) / trained["scale"]) ** 2).numpy()

    squared = squared_errors(None)
    window = squared.mean(axis=1)
    own_window_level = (squared * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
    squared = squared_errors(hi)
    own = (squared * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
    early = prematurity(beat_peaks, r_peaks)
    scores = {"window (the job's score until now)": window,
              "own beat, baseline levelled to the window's end": own_window_level,
              "own beat": own,
              "own beat × prematurity": own * early,
              "own beat × max(prematurity, 1) (the job's score now)":
                  outlier_score(own, early),
              "own beat × off-rhythm, max(p, 1/p)": own * np.maximum(early, 1.0 / early)}
    lines = [f"# Outlier scores on a {args.hours:g}-hour synthetic Holter record",
             "",
             f"{date.today()}, {platform.node()}, {os.cpu_count()} cores; 360 Hz, "
             f"{args.heart_rate:g} bpm{' ± 30 % over the day' if args.hours >= 12 else ''}, "
             f"{args.ectopic * 100:g} % planted PVCs, noise 0.05 mV, wander 0.1 mV, seed "
             f"{args.seed}; LightVAE trained {args.epochs} epochs on all "
             f"{len(beat_peaks):,} beat rows.",
             "",
             "| score | PVCs in top 10 | in top 100 | in top N (N = PVCs) | ROC AUC |",
             "|---|---:|---:|---:|---:|"]
    for name, score in scores.items():
        (t10, t100, tn), auc, n = ranking(score, is_pvc)
        lines.append(f"| {name} | {t10} | {t100} | {tn} of {n} | {auc:.3f} |")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
