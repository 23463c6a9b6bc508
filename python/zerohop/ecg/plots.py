"""The pipeline's figures, as PNG files (matplotlib, headless)."""

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(out, *, signal, curvature, gates, lengths, params, beats, beat_lengths,
                mu, error, losses, decoded, grid):
    """Writes six figures to `out` and returns {name: path}. Every array is a NumPy view of
    zerohop or torch memory (no copies were made to plot them)."""
    plt = _pyplot()
    rate = params["rate"]
    paths = {}

    def save(fig, name):
        path = out / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths[name] = path

    seconds = min(len(signal), int(8 * rate))
    t = np.arange(seconds) / rate
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.plot(t, signal[:seconds], lw=0.8, label="ECG (mV)")
    curv = curvature[:seconds]
    span = np.ptp(curv) or 1.0
    ax.plot(t, (curv - curv.mean()) / span * np.ptp(signal[:seconds]) * 0.5, lw=0.8,
            alpha=0.7, label="curvature (scaled)")
    shown = gates[gates < seconds]
    ax.vlines(shown / rate, signal[:seconds].min(), signal[:seconds].max(), colors="C3",
              lw=1.0, label="gates")
    ax.set_xlabel("time (s)")
    ax.set_title("Signal, smoothed curvature and segmentation gates")
    ax.legend(loc="upper right", fontsize=8)
    save(fig, "signal_gates")

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.hist(lengths, bins=100, color="C0")
    for bound in (params["min_length"], params["max_length"]):
        ax.axvline(bound, color="C3", ls="--", lw=1)
    ax.set_xlabel("segment length (samples)")
    ax.set_ylabel("count")
    ax.set_title("Gate-to-gate lengths (dashed: kept range)")
    save(fig, "lengths")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    shown = min(40, len(beats))
    for row, length in zip(beats[:shown], beat_lengths[:shown]):
        ax.plot(np.arange(length) / rate, row[:length], lw=0.7, alpha=0.6)
    ax.set_xlabel("time from gate (s)")
    ax.set_ylabel("mV")
    ax.set_title(f"{shown} segmented beats, overlaid")
    save(fig, "beats")

    fig, ax = plt.subplots(figsize=(6, 5))
    sc = ax.scatter(mu[:, 0], mu[:, 1], c=error, s=8, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="reconstruction error (outlier score)")
    worst = np.argsort(error)[-5:]
    ax.scatter(mu[worst, 0], mu[worst, 1], s=60, facecolors="none", edgecolors="C3",
               label="5 most outlying")
    ax.set_xlabel("latent μ₁")
    ax.set_ylabel("latent μ₂")
    ax.legend(fontsize=8)
    ax.set_title("Latent space of every beat")
    save(fig, "latent")

    side = int(round(len(decoded) ** 0.5))
    fig, axes = plt.subplots(side, side, figsize=(9, 7), sharex=True, sharey=True)
    for ax, curve, (z1, z2) in zip(axes.ravel(), decoded, grid):
        ax.plot(np.arange(len(curve)) / rate, curve, lw=0.8)
        ax.set_title(f"z=({z1:.1f}, {z2:.1f})", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle("Beats decoded from a grid of latent points")
    save(fig, "decoded_grid")

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(np.arange(1, len(losses) + 1), losses, marker="o", ms=3)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss per beat")
    ax.set_yscale("log")
    ax.set_title("LightVAE training loss")
    save(fig, "loss")
    return paths
