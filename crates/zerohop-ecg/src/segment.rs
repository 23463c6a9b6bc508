//! Heartbeat segmentation, as the Part 3 pipeline does it, on the CPU (rayon):
//! curvature = circular convolution with a Ricker wavelet; a gate where the curvature is the
//! maximum of its window (O(n) sliding maximum); only rising edges kept (plateau fix); gate
//! positions → segment lengths → segments of plausible length → beats left-aligned in rows of
//! a fixed width, zero-padded. Every output lives in zerohop memory from the current resource.

use std::time::Instant;

use rayon::prelude::*;
use zerohop::{Buffer, DType, Element, TensorView, DEFAULT_ALIGNMENT};

use crate::detect::Method;
use crate::error::{invalid, Result};
use crate::simd::{by_width, Lanes};

/// The blog's parameters are for 250 Hz.
pub const REFERENCE_RATE: f64 = 250.0;

/// Window sizes in samples, scaled from the blog's 250 Hz values to the signal's rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub rate: f64,
    /// Ricker wavelet taps (30 at 250 Hz).
    pub ricker_width: usize,
    /// Local-maximum window (180 at 250 Hz).
    pub window: usize,
    /// Segment lengths kept, inclusive (100..=256 at 250 Hz).
    pub min_length: usize,
    pub max_length: usize,
    /// Row width of the beat matrix: the next power of two ≥ `max_length` (the VAE halves
    /// it three times).
    pub width: usize,
}

impl Params {
    pub fn for_rate(rate: f64) -> Result<Self> {
        check_rate(rate)?;
        let scale = |samples: f64| ((samples * rate / REFERENCE_RATE).round() as usize).max(3);
        let max_length = scale(256.0);
        Ok(Params {
            rate,
            ricker_width: scale(30.0),
            window: scale(180.0),
            min_length: scale(100.0),
            max_length,
            width: max_length.next_power_of_two(),
        })
    }

    /// Samples from a gate to the R peak it marks: the curvature peak sits `(window+1)/2`
    /// after the gate, and the causal kernel delays the curvature by `(ricker_width-1)/2`.
    pub fn gate_to_peak(&self) -> f64 {
        self.window.div_ceil(2) as f64 - (self.ricker_width as f64 - 1.0) / 2.0
    }
}

/// Refuses a sampling rate no ECG has (or that is no number).
pub(crate) fn check_rate(rate: f64) -> Result<()> {
    if rate.is_finite() && (50.0..=100_000.0).contains(&rate) {
        return Ok(());
    }
    Err(invalid(
        "sampling rate",
        format!("{rate} Hz is outside 50..100000 Hz"),
    ))
}

/// Stage timings on the CPU, in order.
pub(crate) struct Laps {
    clock: Instant,
    pub timings: Vec<(&'static str, f64)>,
}

impl Laps {
    pub fn new() -> Self {
        Laps {
            clock: Instant::now(),
            timings: Vec::new(),
        }
    }
    pub fn lap(&mut self, name: &'static str) {
        self.timings
            .push((name, self.clock.elapsed().as_secs_f64()));
        self.clock = Instant::now();
    }
}

/// The Ricker curvature of `signal` in a fresh tensor from the current resource.
pub(crate) fn curvature_tensor(signal: &[f32], ricker_width: usize) -> Result<TensorView> {
    // Every element is written below.
    let view = uninit_vector::<f32>(signal.len())?;
    // SAFETY: allocated just above and still private to this function.
    let out = unsafe { fill::<f32>(&view)? };
    curvature(signal, &ricker(ricker_width), out);
    Ok(view)
}

/// The Ricker ("Mexican hat") wavelet: `exp(-t²/2)(1 - t²)` on `width` points of [-3, 3],
/// scaled by `2/√width`.
pub fn ricker(width: usize) -> Vec<f32> {
    let scale = 2.0 / (width as f64).sqrt();
    (0..width)
        .map(|i| {
            let t = if width == 1 {
                0.0
            } else {
                -3.0 + 6.0 * i as f64 / (width - 1) as f64
            };
            ((-t * t / 2.0).exp() * (1.0 - t * t) * scale) as f32
        })
        .collect()
}

/// A fresh, zero-filled host tensor of `len` elements of `T` from the current resource.
pub(crate) fn alloc<T: Element>(len: usize) -> Result<TensorView> {
    Ok(TensorView::zeros(T::DTYPE, &[len as i64])?)
}

/// The elements of a tensor `segment` just allocated.
///
/// # Safety
/// `view` must be fresh and private to `segment` (no other view of its memory exists).
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn fill<T: Element>(view: &TensorView) -> Result<&mut [T]> {
    // SAFETY: guaranteed by the caller.
    Ok(unsafe { view.as_mut_slice::<T>()? })
}

/// Circular convolution `out[i] = Σ_j kernel[j] · signal[(i - j) mod n]`, what the blog's
/// FFT computes, done directly: a block of outputs at a time so the inner loop vectorises. Every output
/// sums the same products in the same order (oldest sample first, multiply then add, no
/// fused multiply-add), so the CUDA kernel reproduces it bit for bit.
pub fn curvature(signal: &[f32], kernel: &[f32], out: &mut [f32]) {
    let n = signal.len();
    assert_eq!(out.len(), n);
    if n == 0 {
        return;
    }
    let reversed: Vec<f32> = kernel.iter().rev().copied().collect();
    let lanes = Lanes::widest();
    out.par_chunks_mut(4096)
        .enumerate()
        .for_each(|(c, chunk)| curvature_chunk(lanes, signal, &reversed, c * 4096, chunk));
}

by_width! {
    /// Outputs `base .. base + chunk.len()` of `curvature`.
    fn curvature_chunk(signal: &[f32], reversed: &[f32], base: usize, chunk: &mut [f32])
        = curvature_outputs::<32, 64, 128>
}

/// Outputs `base .. base + chunk.len()` of `curvature`, `BLOCK` at a time: independent sums
/// enough to keep every vector adder busy while each waits on its last addition.
#[inline(always)]
fn curvature_outputs<const BLOCK: usize>(
    signal: &[f32],
    reversed: &[f32],
    base: usize,
    chunk: &mut [f32],
) {
    let (n, w) = (signal.len(), reversed.len());
    let at = |i: isize| signal[i.rem_euclid(n as isize) as usize];
    let mut i = 0;
    while i < chunk.len() {
        let start = base + i;
        if start + 1 >= w && start + BLOCK <= n && i + BLOCK <= chunk.len() {
            // out[start + t] = Σ_j reversed[j] · signal[start + t + 1 - w + j]
            let window = &signal[start + 1 - w..start + BLOCK];
            let mut acc = [0f32; BLOCK];
            for (j, &k) in reversed.iter().enumerate() {
                let lane = &window[j..j + BLOCK];
                for t in 0..BLOCK {
                    acc[t] += k * lane[t];
                }
            }
            chunk[i..i + BLOCK].copy_from_slice(&acc);
            i += BLOCK;
        } else {
            let mut acc = 0f32;
            for (j, &k) in reversed.iter().enumerate() {
                acc += k * at(start as isize + 1 - w as isize + j as isize);
            }
            chunk[i] = acc;
            i += 1;
        }
    }
}

/// `gates[p] = 1` where the maximum of `curv[p .. p + window]` is `curv[p + (window+1)/2]`
/// (`gates.len() == curv.len() - window + 1`), by a monotonic-deque sliding maximum per chunk.
pub fn local_maxima(curv: &[f32], window: usize, gates: &mut [u8]) {
    let outputs = curv.len() + 1 - window;
    assert_eq!(gates.len(), outputs);
    let centre = window.div_ceil(2);
    gates
        .par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            let first = c << 16;
            let mut deque: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
            let push = |deque: &mut std::collections::VecDeque<usize>, k: usize| {
                while deque.back().is_some_and(|&b| curv[b] <= curv[k]) {
                    deque.pop_back();
                }
                deque.push_back(k);
            };
            for k in first..first + window - 1 {
                push(&mut deque, k);
            }
            for (offset, gate) in chunk.iter_mut().enumerate() {
                let p = first + offset;
                push(&mut deque, p + window - 1);
                while deque.front().is_some_and(|&f| f < p) {
                    deque.pop_front();
                }
                let max = curv[*deque.front().expect("window is non-empty")];
                *gate = u8::from(max == curv[p + centre]);
            }
        });
}

/// The plateau fix: keep a gate only where the previous position had none (0110 → 0100),
/// judged on the unmodified gates.
pub fn rising_edges(gates: &mut [u8]) {
    for i in (1..gates.len()).rev() {
        gates[i] &= u8::from(gates[i - 1] == 0);
    }
}

/// The beat matrix's base pointer, shared by the threads that each write their own rows.
struct RowWriter(*mut f32);
// SAFETY: threads write disjoint rows through it (see the embedding loop).
unsafe impl Sync for RowWriter {}

impl RowWriter {
    /// The slot `offset` elements past the base (a method, so closures capture the whole
    /// Sync wrapper rather than its raw-pointer field).
    fn row(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// What the pipeline produced, stage by stage.
#[derive(Debug)]
pub struct Segmentation {
    pub params: Params,
    pub method: Method,
    /// Smoothed curvature, one value per sample (float32).
    pub curvature: TensorView,
    /// `adaptive`: the integrated squared slope of the curvature, per sample (float32).
    pub energy: Option<TensorView>,
    /// `blog`: gate positions; `adaptive`: candidate positions (energy maxima). int64,
    /// ascending.
    pub gates: TensorView,
    /// `blog`: distances between consecutive gates; `adaptive`: RR intervals between
    /// consecutive detected beats. int64, in samples.
    pub lengths: TensorView,
    /// Every detected R peak (int64 sample indices, ascending).
    pub r_peaks: TensorView,
    /// The R peak of each beat row (int64).
    pub beat_peaks: TensorView,
    /// Start sample of each beat row (int64).
    pub beat_starts: TensorView,
    /// Samples of each beat row taken from the signal (int64).
    pub beat_lengths: TensorView,
    /// Beats as rows: (beats, width) float32, left-aligned, zero-padded.
    pub beats: TensorView,
    /// Detected beats without a row because their window crosses either end of the signal.
    pub edge_dropped: usize,
    /// (stage, seconds) in order.
    pub timings: Vec<(&'static str, f64)>,
}

/// Runs every stage on `signal`.
pub fn segment(signal: &[f32], params: &Params) -> Result<Segmentation> {
    if signal.len() < params.window {
        return Err(invalid(
            "signal",
            format!(
                "{} samples is shorter than the {}-sample gate window ({:.2} s at {} Hz)",
                signal.len(),
                params.window,
                params.window as f64 / params.rate,
                params.rate
            ),
        ));
    }
    let mut laps = Laps::new();
    let curv_view = curvature_tensor(signal, params.ricker_width)?;
    let curv: &[f32] = curv_view.as_slice()?;
    laps.lap("curvature");

    let mut gate_flags = vec![0u8; signal.len() + 1 - params.window];
    local_maxima(curv, params.window, &mut gate_flags);
    rising_edges(&mut gate_flags);
    laps.lap("gates");

    // Stream compaction: count per chunk, then fill each chunk's range in parallel.
    const CHUNK: usize = 1 << 16;
    let counts: Vec<usize> = gate_flags
        .par_chunks(CHUNK)
        .map(|c| c.iter().filter(|&&g| g != 0).count())
        .collect();
    let total: usize = counts.iter().sum();
    let gates_view = alloc::<i64>(total)?;
    let mut outs: Vec<&mut [i64]> = Vec::with_capacity(counts.len());
    // SAFETY: allocated just above and still private to this function.
    let mut rest: &mut [i64] = unsafe { fill::<i64>(&gates_view)? };
    for &count in &counts {
        let (head, tail) = rest.split_at_mut(count);
        outs.push(head);
        rest = tail;
    }
    gate_flags
        .par_chunks(CHUNK)
        .zip(outs.par_iter_mut())
        .enumerate()
        .for_each(|(c, (flags, out))| {
            let mut k = 0;
            for (i, &g) in flags.iter().enumerate() {
                if g != 0 {
                    out[k] = (c * CHUNK + i) as i64;
                    k += 1;
                }
            }
        });
    let gates: &[i64] = gates_view.as_slice()?;
    laps.lap("indices");

    let lengths_view = alloc::<i64>(total.saturating_sub(1))?;
    // SAFETY: allocated just above and still private to this function.
    let lengths = unsafe { fill::<i64>(&lengths_view)? };
    lengths
        .par_iter_mut()
        .enumerate()
        .for_each(|(k, l)| *l = gates[k + 1] - gates[k]);
    let keep = |l: i64| (params.min_length as i64..=params.max_length as i64).contains(&l);
    let kept: Vec<usize> = (0..lengths.len()).filter(|&k| keep(lengths[k])).collect();
    let starts_view = alloc::<i64>(kept.len())?;
    let blen_view = alloc::<i64>(kept.len())?;
    // SAFETY: allocated just above and still private to this function.
    let starts = unsafe { fill::<i64>(&starts_view)? };
    // SAFETY: allocated just above and still private to this function.
    let blens = unsafe { fill::<i64>(&blen_view)? };
    for (out, &k) in kept.iter().enumerate() {
        starts[out] = gates[k];
        blens[out] = lengths[k];
    }
    laps.lap("prune");

    let width = params.width;
    // Every element of every row is written below (samples, then zeros).
    let beats_view = uninit_rows(kept.len(), width)?;
    let rows = RowWriter(beats_view.data_ptr() as *mut f32);
    starts
        .par_iter()
        .zip(blens.par_iter())
        .enumerate()
        .for_each(|(k, (&start, &len))| {
            let (s, l) = (start as usize, len as usize);
            // SAFETY: row k is `width` f32 slots inside the fresh buffer (kept.len() rows),
            // written by this iteration only; l ≤ max_length ≤ width and s + l ≤ signal.len()
            // because the segment ends at the next gate. Raw writes never read the
            // uninitialised memory.
            unsafe {
                let row = rows.row(k * width);
                std::ptr::copy_nonoverlapping(signal.as_ptr().add(s), row, l);
                std::ptr::write_bytes(row.add(l), 0, width - l);
            }
        });
    laps.lap("embed");
    let to_peak = params.gate_to_peak().floor() as i64;
    let r_peaks = shifted(gates, to_peak)?;
    let beat_peaks = shifted(starts, to_peak)?;

    Ok(Segmentation {
        params: params.clone(),
        method: Method::Blog,
        curvature: curv_view,
        energy: None,
        gates: gates_view,
        lengths: lengths_view,
        r_peaks,
        beat_peaks,
        beat_starts: starts_view,
        beat_lengths: blen_view,
        beats: beats_view,
        edge_dropped: 0,
        timings: laps.timings,
    })
}

/// `values + by` in a fresh int64 tensor: the blog's gates moved to the R peaks they mark.
pub(crate) fn shifted(values: &[i64], by: i64) -> Result<TensorView> {
    let moved: Vec<i64> = values.iter().map(|&v| v + by).collect();
    tensor_of(&moved)
}

/// `values` in a fresh int64 tensor from the current resource.
pub(crate) fn tensor_of(values: &[i64]) -> Result<TensorView> {
    let view = alloc::<i64>(values.len())?;
    // SAFETY: allocated just above and still private to this function.
    unsafe { fill::<i64>(&view)? }.copy_from_slice(values);
    Ok(view)
}

/// A (rows, width) float32 tensor from the current resource, not zero-filled: for callers
/// that write every element.
pub(crate) fn uninit_rows(rows: usize, width: usize) -> Result<TensorView> {
    uninit(DType::F32, &[rows, width])
}

/// A tensor of `len` elements of `T` from the current resource, not zero-filled: for callers
/// that write every element (a day's filter output is 124 MB, zeroed for nothing otherwise).
pub(crate) fn uninit_vector<T: Element>(len: usize) -> Result<TensorView> {
    uninit(T::DTYPE, &[len])
}

fn uninit(dtype: DType, shape: &[usize]) -> Result<TensorView> {
    let resource = zerohop::memory::current_resource(zerohop::Device::CPU)
        .expect("the host always has a resource");
    let elements = shape.iter().product::<usize>();
    let buffer = Buffer::allocate(
        resource,
        elements * dtype.itemsize(),
        DEFAULT_ALIGNMENT,
        zerohop::Stream::HOST,
    )?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    Ok(TensorView::from_buffer(buffer, dtype, &dims)?)
}

#[cfg(test)]
mod simd_tests {
    use super::*;

    #[test]
    fn every_vector_width_gives_the_same_curvature_as_one_sum_at_a_time() {
        let signal: Vec<f32> = (0..10_000)
            .map(|i| ((i as f32 * 0.013).sin() * 1.7).powi(7) + (i as f32 * 0.71).cos() * 0.1)
            .collect();
        let reversed: Vec<f32> = ricker(43).into_iter().rev().collect();
        let n = signal.len() as isize;
        // out[i] = Σ_j reversed[j] · signal[(i + 1 - w + j) mod n], one product at a time.
        let one_at_a_time = |i: usize| {
            let mut acc = 0f32;
            for (j, &k) in reversed.iter().enumerate() {
                let at = (i as isize + 1 - reversed.len() as isize + j as isize).rem_euclid(n);
                acc += k * signal[at as usize];
            }
            acc
        };
        crate::simd::assert_every_width_sums_in_order(
            signal.len(),
            &[0, 37, 4096, 9000],
            |lanes, base, out| curvature_chunk(lanes, &signal, &reversed, base, out),
            one_at_a_time,
        );
    }
}
