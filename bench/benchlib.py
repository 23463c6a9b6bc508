"""What every cross-framework bench script shares: timing and writing its table."""

import statistics
import timeit
from pathlib import Path


def median_us(fn, number, repeat=7, sync=None):
    """Median over `repeat` runs of the mean µs per call of `fn` (after one warm-up call).
    `sync` (e.g. torch.cuda.synchronize) runs after the warm-up."""
    fn()
    if sync is not None:
        sync()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def emit(lines, out=None):
    """Prints the Markdown table and, with `out`, writes it there too."""
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return text
