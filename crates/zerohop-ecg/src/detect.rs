//! R-peak detection that holds from 30 to 250 bpm (the `adaptive` method), after Pan &
//! Tompkins, "A Real-Time QRS Detection Algorithm" (IEEE TBME 32(3), 1985):
//!
//! 1. band-pass: the Ricker-wavelet curvature of the Part 3 pipeline (a zero-mean filter whose
//!    pass band, about 5–20 Hz at the blog's width, is the QRS complex's);
//! 2. energy: the squared slope of the curvature summed over a 150 ms window (Pan–Tompkins'
//!    derivative, squaring and moving-window integration), blind to the QRS polarity;
//! 3. candidates: energy maxima at least 100 ms from a larger one (a QRS complex has one);
//! 4. the decision, in order: two running levels, signal (SPK) and noise (NPK), and a
//!    threshold a quarter of the way from one to the other; a refractory period (200 ms, less
//!    at rates where beats come closer); T-wave rejection (a candidate soon after a beat with
//!    under a quarter of its energy, i.e. under half its slope); search-back with half the
//!    threshold when no beat came for 150 % of the average RR interval (Hamilton & Tompkins,
//!    IEEE TBME 33(12), 1986);
//! 5. the R peak: the largest |curvature| in the integration window, less the filter delay.
//!
//! Steps 1–3 are data parallel (rayon here, CUDA kernels in `gpu`); step 4 reads only the
//! candidates (a few per beat), so both back ends share it and agree bit for bit.

use rayon::prelude::*;

use crate::error::{invalid, Result};
use crate::segment::{check_rate, local_maxima, rising_edges, REFERENCE_RATE};
use crate::simd::{by_width, Lanes};

/// Which detector a segmentation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Adaptive thresholds (this module): every rate from 30 to 250 bpm.
    Adaptive,
    /// The blog's fixed-window local maxima, kept for comparison and benchmarks.
    Blog,
}

impl Method {
    pub fn parse(name: &str) -> Result<Method> {
        match name {
            "adaptive" => Ok(Method::Adaptive),
            "blog" => Ok(Method::Blog),
            other => Err(invalid(
                "method",
                format!("{other:?} must be 'adaptive' or 'blog'"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::Adaptive => "adaptive",
            Method::Blog => "blog",
        }
    }
}

/// Windows of the adaptive detector and of the beat rows, in samples at `rate`.
#[derive(Clone, Debug, PartialEq)]
pub struct DetectParams {
    pub rate: f64,
    /// Ricker taps (the blog's 30 at 250 Hz).
    pub ricker_width: usize,
    /// Energy integration window (150 ms).
    pub integration: usize,
    /// Candidate window: a candidate is the largest energy within it (about ±100 ms).
    pub candidate_window: usize,
    /// Longest refractory period (200 ms).
    pub refractory: usize,
    /// Window after a beat in which a weak candidate is taken for a T wave (360 ms).
    pub t_wave: usize,
    /// Learning period for the initial levels (2 s).
    pub learning: usize,
    /// Beat rows: samples before and after the R peak (0.25 s and 0.45 s), and the row width
    /// (the next power of two, zero-padded; the VAE halves it three times).
    pub before: usize,
    pub after: usize,
    pub width: usize,
}

impl DetectParams {
    pub fn for_rate(rate: f64) -> Result<Self> {
        check_rate(rate)?;
        let seconds = |s: f64| ((s * rate).round() as usize).max(1);
        let half_candidate = seconds(0.1);
        let before = seconds(0.25);
        let after = seconds(0.45);
        Ok(DetectParams {
            rate,
            ricker_width: ((30.0 * rate / REFERENCE_RATE).round() as usize).max(3),
            integration: seconds(0.15),
            candidate_window: 2 * half_candidate + 1,
            refractory: seconds(0.2),
            t_wave: seconds(0.36),
            learning: seconds(2.0),
            before,
            after,
            width: (before + after).next_power_of_two().max(8),
        })
    }

    /// Samples from a candidate gate (the start of its window) to the energy maximum.
    pub fn gate_to_candidate(&self) -> usize {
        self.candidate_window.div_ceil(2)
    }

    /// The causal Ricker filter's delay: a feature at sample i peaks in the curvature here.
    pub fn curvature_delay(&self) -> usize {
        (self.ricker_width - 1) / 2
    }

    /// Samples at the start whose energy the filters have not settled on: the curvature wraps
    /// around (the blog's circular convolution) there, mixing in the recording's end.
    pub fn warm_up(&self) -> usize {
        self.ricker_width + self.integration
    }

    /// Whether an energy maximum at `pos` is a candidate: outside the warm-up, and above zero
    /// (a silent stretch is a maximum of nothing).
    pub fn is_candidate(&self, pos: usize, energy: f32) -> bool {
        pos >= self.warm_up() && energy > 0.0
    }
}

/// Squared curvature slopes (`slope[0] = 0`), each product rounded on its own so the CUDA
/// kernel reproduces it.
pub fn squared_slope(curv: &[f32], out: &mut [f32]) {
    assert_eq!(curv.len(), out.len());
    out.par_chunks_mut(1 << 14)
        .enumerate()
        .for_each(|(c, chunk)| squared_slope_from(curv, c << 14, chunk));
}

/// `energy[i] = Σ slope[i - w + 1 ..= i]` (samples before the start count as zero), every
/// sum taken oldest first, a block of outputs at a time so the inner loop vectorises.
pub fn integrate(slope: &[f32], window: usize, out: &mut [f32]) {
    assert_eq!(out.len(), slope.len());
    let lanes = Lanes::widest();
    out.par_chunks_mut(4096)
        .enumerate()
        .for_each(|(c, chunk)| integrate_chunk(lanes, slope, window, c * 4096, chunk));
}

/// `integrate(squared slope of curv)` in one pass, each chunk squaring the slopes it sums
/// into a buffer of its own: the same values as the two stages (the same products, summed in
/// the same order), without a slope array as long as the signal (124 MB for a day at 360 Hz)
/// or a second pass over it.
pub fn energy(curv: &[f32], window: usize, out: &mut [f32]) {
    assert_eq!(out.len(), curv.len());
    const CHUNK: usize = 4096;
    let lanes = Lanes::widest();
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let base = c * CHUNK;
            // The chunk's outputs sum slopes base + 1 - window ..= base + chunk.len() - 1.
            let first = (base + 1).saturating_sub(window);
            let mut slope = vec![0f32; base + chunk.len() - first];
            squared_slope_from(curv, first, &mut slope);
            // The outputs in the buffer's coordinates: its first `base - first` slopes only feed
            // sums. Where sums reach before the signal's start, `first` is 0 and the coordinates
            // are the signal's, as `integrate` has them.
            let offset = base - first;
            integrate_chunk(lanes, &slope, window, offset, chunk)
        });
}

/// `slope[k] = squared_slope(curv)[first + k]`.
fn squared_slope_from(curv: &[f32], first: usize, slope: &mut [f32]) {
    for (k, o) in slope.iter_mut().enumerate() {
        let i = first + k;
        let d = if i == 0 { 0.0 } else { curv[i] - curv[i - 1] };
        *o = d * d;
    }
}

by_width! {
    /// Outputs `base .. base + chunk.len()` of `integrate`.
    fn integrate_chunk(slope: &[f32], window: usize, base: usize, chunk: &mut [f32])
        = integrate_outputs::<32, 64, 128>
}

/// Outputs `base .. base + chunk.len()` of `integrate`, `BLOCK` at a time: independent sums
/// enough to keep every vector adder busy while each waits on its last addition.
#[inline(always)]
fn integrate_outputs<const BLOCK: usize>(
    slope: &[f32],
    window: usize,
    base: usize,
    chunk: &mut [f32],
) {
    let mut i = 0;
    while i < chunk.len() {
        let start = base + i;
        if start + 1 >= window && i + BLOCK <= chunk.len() {
            let mut acc = [0f32; BLOCK];
            for j in 0..window {
                let lane = &slope[start + 1 - window + j..start + 1 - window + j + BLOCK];
                for t in 0..BLOCK {
                    acc[t] += lane[t];
                }
            }
            chunk[i..i + BLOCK].copy_from_slice(&acc);
            i += BLOCK;
        } else {
            let mut acc = 0f32;
            for j in 0..window {
                if let Some(k) = (start + 1 + j).checked_sub(window) {
                    acc += slope[k];
                }
            }
            chunk[i] = acc;
            i += 1;
        }
    }
}

/// Energy maxima at least half a candidate window from a larger one, after the filters'
/// warm-up: (sample, energy).
///
/// Sample `q` is judged by the window `[q - ahead, q + behind]` of the gates the blog's
/// sliding maximum makes (see `candidates_by_sliding_maximum`, which this reproduces exactly):
/// it is a candidate when no energy in its window is larger, the sample before it was not one
/// too (the first of a plateau), and it is past the warm-up with some energy.
///
/// Each chunk's window maxima come from doubling spans (the maximum over `2s` samples is the
/// larger of two maxima over `s`), then two overlapping spans per window: a fixed number of
/// branch-free passes that compile to vector instructions, whatever the heart rate or noise.
/// A deque's sliding maximum, or checking each local maximum against its window, branch on
/// the data and cost 2–5× as much.
pub fn candidates(energy: &[f32], params: &DetectParams) -> Vec<(usize, f32)> {
    let window = params.candidate_window;
    if energy.len() < window {
        return Vec::new();
    }
    let ahead = window.div_ceil(2);
    let behind = window - 1 - ahead;
    let first = ahead.max(params.warm_up()).max(1);
    let last = energy.len() - 1 - behind;
    if first > last {
        return Vec::new();
    }
    // Small enough for a chunk's buffers to stay in the first-level cache (and under the
    // allocator's threshold for fresh pages from the kernel).
    const CHUNK: usize = 1 << 13;
    let lanes = Lanes::widest();
    let starts: Vec<usize> = (first..=last).step_by(CHUNK).collect();
    let found: Vec<Vec<(usize, f32)>> = starts
        .par_iter()
        .map(|&start| {
            let end = (start + CHUNK - 1).min(last);
            // One sample more in front, for the plateau rule, unless it has no whole window.
            let from = if start > ahead { start - 1 } else { start };
            let tops = window_tops(lanes, &energy[from - ahead..=end + behind], window);
            let mut out = Vec::new();
            // Tops are rare (a few per beat): skip eight zero flags at a time.
            let mut k = start - from;
            while k < tops.len() {
                if k + 8 <= tops.len() && k % 8 == 0 {
                    let eight: [u8; 8] = tops[k..k + 8].try_into().expect("eight flags");
                    if u64::from_ne_bytes(eight) == 0 {
                        k += 8;
                        continue;
                    }
                }
                let q = from + k;
                let first_of_plateau = k == 0 || tops[k - 1] == 0;
                if tops[k] != 0 && first_of_plateau && energy[q] > 0.0 {
                    out.push((q, energy[q]));
                }
                k += 1;
            }
            out
        })
        .collect();
    found.concat()
}

by_width! {
    /// For each window `span[i .. i + window]`: 1 where its largest value is the one at its
    /// judged sample `i + ceil(window / 2)`.
    fn window_tops(span: &[f32], window: usize) -> Vec<u8> = window_top_flags
}

/// `window_tops`, branch-free so that it vectorises.
#[inline(always)]
fn window_top_flags(span: &[f32], window: usize) -> Vec<u8> {
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let windows = span.len() + 1 - window;
    // tops[i] = max(span[i .. i + reach]), for reach doubling up to the window.
    let mut tops = span.to_vec();
    let mut next = vec![0f32; span.len()];
    let mut reach = 1;
    while 2 * reach <= window {
        let valid = span.len() + 1 - 2 * reach;
        let pairs = tops[..valid].iter().zip(&tops[reach..reach + valid]);
        for (out, (&a, &b)) in next[..valid].iter_mut().zip(pairs) {
            *out = larger(a, b);
        }
        std::mem::swap(&mut tops, &mut next);
        reach *= 2;
    }
    let centre = window.div_ceil(2);
    let far = window - reach;
    tops[..windows]
        .iter()
        .zip(&tops[far..far + windows])
        .zip(&span[centre..centre + windows])
        .map(|((&a, &b), &judged)| u8::from(larger(a, b) == judged))
        .collect()
}

/// `candidates` as the blog's gates compute it: a sliding maximum over every sample, the
/// plateau fix, then the warm-up and zero-energy filter: the reference `candidates` is tested
/// against.
pub fn candidates_by_sliding_maximum(energy: &[f32], params: &DetectParams) -> Vec<(usize, f32)> {
    if energy.len() < params.candidate_window {
        return Vec::new();
    }
    let mut flags = vec![0u8; energy.len() + 1 - params.candidate_window];
    local_maxima(energy, params.candidate_window, &mut flags);
    rising_edges(&mut flags);
    let shift = params.gate_to_candidate();
    flags
        .iter()
        .enumerate()
        .filter(|(_, &f)| f != 0)
        .map(|(p, _)| (p + shift, energy[p + shift]))
        .filter(|&(pos, e)| params.is_candidate(pos, e))
        .collect()
}

/// Search back when no beat came for this many RR averages: Hamilton & Tompkins' 150 %
/// (Pan & Tompkins used 166 %), which still finds a weak premature beat followed by its
/// compensatory pause (together 2 RR).
const SEARCH_BACK: f64 = 1.5;

/// Pan–Tompkins' running levels and RR statistics.
struct Levels {
    signal: f32,
    noise: f32,
    /// The last eight RR intervals, in samples.
    rr: Vec<usize>,
}

impl Levels {
    fn threshold(&self) -> f32 {
        self.noise + 0.25 * (self.signal - self.noise)
    }
    fn rr_average(&self) -> Option<f64> {
        (!self.rr.is_empty()).then(|| self.rr.iter().sum::<usize>() as f64 / self.rr.len() as f64)
    }
    fn push_rr(&mut self, rr: usize) {
        if self.rr.len() == 8 {
            self.rr.remove(0);
        }
        self.rr.push(rr);
    }
}

/// The candidates (indices into `cands`) that are beats, in order. Sequential by nature: each
/// decision moves the levels the next one is judged by.
pub fn decide(cands: &[(usize, f32)], params: &DetectParams) -> Vec<usize> {
    if cands.is_empty() {
        return Vec::new();
    }
    let learning: Vec<f32> = cands
        .iter()
        .filter(|c| c.0 < params.learning)
        .map(|c| c.1)
        .collect();
    let learning = if learning.is_empty() {
        cands.iter().map(|c| c.1).collect()
    } else {
        learning
    };
    let peak = learning.iter().copied().fold(0f32, f32::max);
    let mean = learning.iter().sum::<f32>() / learning.len() as f32;
    let mut levels = Levels {
        signal: peak / 3.0,
        noise: (mean / 2.0).min(peak / 6.0),
        rr: Vec::new(),
    };
    let mut beats: Vec<usize> = Vec::new();
    // Candidates judged noise since the last beat: where search-back looks.
    let mut skipped: Vec<usize> = Vec::new();

    for (k, &(pos, value)) in cands.iter().enumerate() {
        if let (Some(&last), Some(rr)) = (beats.last(), levels.rr_average()) {
            let since = pos - cands[last].0;
            if since as f64 > SEARCH_BACK * rr {
                search_back(cands, &mut beats, &mut skipped, &mut levels, params);
            }
        }
        if let Some(&last) = beats.last() {
            let (last_pos, last_value) = cands[last];
            let since = pos - last_pos;
            let refractory = refractory(&levels, params);
            if since < refractory {
                // Two maxima this close belong to one complex: keep the larger.
                if value > last_value {
                    *beats.last_mut().expect("a last beat") = k;
                    if let Some(rr) = levels.rr.last_mut() {
                        *rr += since;
                    }
                }
                continue;
            }
            if since < params.t_wave && value < 0.25 * last_value {
                // Under half the slope of the beat before it: a T wave.
                levels.noise = 0.125 * value + 0.875 * levels.noise;
                continue;
            }
        }
        if value > levels.threshold() {
            accept(cands, k, 0.125, &mut beats, &mut levels);
            skipped.clear();
        } else {
            levels.noise = 0.125 * value + 0.875 * levels.noise;
            skipped.push(k);
        }
    }
    beats
}

/// The refractory period: 200 ms, but never more than 60 % of the current RR average, so
/// that beats at 250 bpm (240 ms apart) are not merged.
fn refractory(levels: &Levels, params: &DetectParams) -> usize {
    match levels.rr_average() {
        Some(rr) => params.refractory.min((0.6 * rr) as usize),
        None => params.refractory,
    }
}

fn accept(
    cands: &[(usize, f32)],
    k: usize,
    weight: f32,
    beats: &mut Vec<usize>,
    levels: &mut Levels,
) {
    levels.signal = weight * cands[k].1 + (1.0 - weight) * levels.signal;
    if let Some(&last) = beats.last() {
        levels.push_rr(cands[k].0 - cands[last].0);
    }
    beats.push(k);
}

/// No beat for 150 % of the RR average: the largest skipped candidate above half the
/// threshold, outside the refractory period and T-wave rule of the last beat, is a beat.
fn search_back(
    cands: &[(usize, f32)],
    beats: &mut Vec<usize>,
    skipped: &mut Vec<usize>,
    levels: &mut Levels,
    params: &DetectParams,
) {
    let Some(&last) = beats.last() else {
        return;
    };
    let (last_pos, last_value) = cands[last];
    let floor = 0.5 * levels.threshold();
    let refractory = refractory(levels, params);
    let best = skipped
        .iter()
        .copied()
        .filter(|&k| {
            let since = cands[k].0 - last_pos;
            cands[k].1 > floor
                && since >= refractory
                && !(since < params.t_wave && cands[k].1 < 0.25 * last_value)
        })
        .max_by(|&a, &b| cands[a].1.total_cmp(&cands[b].1).then(b.cmp(&a)));
    if let Some(k) = best {
        accept(cands, k, 0.25, beats, levels);
        skipped.retain(|&s| s > k);
    } else {
        skipped.clear();
    }
}

/// The R peak of each beat: the largest |curvature| in the beat's integration window, moved
/// back by the filter delay. Ties go to the earliest sample.
pub fn locate_peaks(curv: &[f32], beats: &[usize], params: &DetectParams) -> Vec<i64> {
    let delay = params.curvature_delay();
    if curv.is_empty() {
        return Vec::new();
    }
    beats
        .par_iter()
        .map(|&end| {
            let start = (end + 1).saturating_sub(params.integration);
            let mut best = start;
            for i in start..=end.min(curv.len() - 1) {
                if curv[i].abs() > curv[best].abs() {
                    best = i;
                }
            }
            best.saturating_sub(delay) as i64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{curvature, ricker};

    fn params() -> DetectParams {
        DetectParams::for_rate(250.0).unwrap()
    }

    #[test]
    fn windows_scale_with_the_rate() {
        let p = DetectParams::for_rate(360.0).unwrap();
        assert_eq!(
            (p.integration, p.refractory, p.t_wave, p.before, p.after),
            (54, 72, 130, 90, 162)
        );
        assert_eq!((p.candidate_window, p.width, p.ricker_width), (73, 256, 43));
        assert!(DetectParams::for_rate(f64::NAN).is_err());
        assert!(DetectParams::for_rate(10.0).is_err());
    }

    #[test]
    fn every_vector_width_gives_the_same_energy_as_one_sum_at_a_time() {
        let slope: Vec<f32> = (0..10_000)
            .map(|i| ((i as f32 * 0.37).sin() * 3.1).powi(2))
            .collect();
        let window = 54;
        let one_at_a_time = |i: usize| {
            let mut acc = 0f32;
            for &s in &slope[(i + 1).saturating_sub(window)..=i] {
                acc += s;
            }
            acc
        };
        crate::simd::assert_every_width_sums_in_order(
            slope.len(),
            &[0, 21, 4096, 9000],
            |lanes, base, out| integrate_chunk(lanes, &slope, window, base, out),
            one_at_a_time,
        );
    }

    #[test]
    fn the_one_pass_energy_is_the_two_stages_bit_for_bit() {
        for (len, window) in [
            (0, 54),
            (10, 54),
            (53, 54),
            (4096, 54),
            (4150, 54),
            (20_011, 54),
            (9000, 3),
        ] {
            let curv: Vec<f32> = (0..len)
                .map(|i| ((i as f32 * 0.029).sin() * 2.3).powi(5) + (i as f32 * 0.61).cos() * 0.2)
                .collect();
            let mut slope = vec![0f32; len];
            squared_slope(&curv, &mut slope);
            let (mut two, mut one) = (vec![0f32; len], vec![1f32; len]);
            integrate(&slope, window, &mut two);
            energy(&curv, window, &mut one);
            let same = two
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{len} samples, window {window}");
        }
    }

    #[test]
    fn integration_sums_the_window_in_order() {
        let slope: Vec<f32> = (0..40).map(|i| i as f32).collect();
        let mut out = vec![0f32; 40];
        integrate(&slope, 5, &mut out);
        for (i, &e) in out.iter().enumerate() {
            let want: f32 = (i.saturating_sub(4)..=i).map(|k| k as f32).sum();
            assert_eq!(e, want, "sample {i}");
        }
    }

    #[test]
    fn the_decision_keeps_beats_and_drops_t_waves_and_noise() {
        let p = params();
        // Beats of energy 10 every 200 samples, T waves (energy 1.5) 80 samples after each,
        // small noise between.
        let mut cands = Vec::new();
        for b in 0..20 {
            let at = 100 + 200 * b;
            cands.push((at, 10.0));
            cands.push((at + 80, 1.5));
            cands.push((at + 150, 0.2));
        }
        let beats = decide(&cands, &p);
        let positions: Vec<usize> = beats.iter().map(|&k| cands[k].0).collect();
        assert_eq!(
            positions,
            (0..20).map(|b| 100 + 200 * b).collect::<Vec<_>>()
        );
    }

    #[test]
    fn search_back_finds_a_weak_beat_after_a_long_gap() {
        let p = params();
        let mut cands: Vec<(usize, f32)> = (0..10).map(|b| (100 + 200 * b, 10.0)).collect();
        // A weak beat (below the threshold, above half of it), then the rhythm goes on.
        cands.push((2100, 2.0));
        cands.extend((0..5).map(|b| (2300 + 200 * b, 10.0)));
        let beats = decide(&cands, &p);
        let positions: Vec<usize> = beats.iter().map(|&k| cands[k].0).collect();
        assert!(positions.contains(&2100), "{positions:?}");
        assert_eq!(positions.len(), 16);
    }

    #[test]
    fn close_maxima_of_one_complex_keep_the_larger() {
        let p = params();
        let cands = vec![(100, 10.0), (300, 9.0), (310, 12.0), (500, 10.0)];
        let beats = decide(&cands, &p);
        let positions: Vec<usize> = beats.iter().map(|&k| cands[k].0).collect();
        assert_eq!(positions, [100, 310, 500]);
    }

    /// The detector's curvature and energy of `signal`.
    fn filtered(signal: &[f32], p: &DetectParams) -> (Vec<f32>, Vec<f32>) {
        let mut curv = vec![0f32; signal.len()];
        curvature(signal, &ricker(p.ricker_width), &mut curv);
        let mut slope = vec![0f32; signal.len()];
        squared_slope(&curv, &mut slope);
        let mut energy = vec![0f32; signal.len()];
        integrate(&slope, p.integration, &mut energy);
        (curv, energy)
    }

    /// Energies with long rises, plateaus (few distinct values), zeros and lone spikes.
    fn rough_energy(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let mut level = 0f32;
        (0..len)
            .map(|_| {
                match next() % 10 {
                    0 => level = 0.0,
                    1..=4 => level += (next() % 3) as f32,
                    5..=7 => level = (level - (next() % 3) as f32).max(0.0),
                    8 => return (next() % 8) as f32 * 4.0,
                    _ => {}
                }
                level
            })
            .collect()
    }

    #[test]
    fn the_local_maximum_search_finds_what_the_sliding_maximum_finds() {
        for rate in [50.0, 64.0, 100.0, 250.0, 360.0, 1000.0] {
            let p = DetectParams::for_rate(rate).unwrap();
            for (seed, len) in [(1, 0), (2, 3), (3, 50), (4, 200), (5, 5000), (6, 80_000)] {
                let energy = rough_energy(len, seed);
                assert_eq!(
                    candidates(&energy, &p),
                    candidates_by_sliding_maximum(&energy, &p),
                    "rate {rate}, seed {seed}, {len} samples"
                );
            }
            // and on a real detector's energy
            let signal: Vec<f32> = (0..20_000)
                .map(|i| ((i as f32 * 0.05).sin() * 3.0).powi(9) + (i as f32 * 0.37).cos())
                .collect();
            let (_, energy) = filtered(&signal, &p);
            let found = candidates(&energy, &p);
            assert!(!found.is_empty());
            assert_eq!(
                found,
                candidates_by_sliding_maximum(&energy, &p),
                "rate {rate}"
            );
        }
    }

    #[test]
    fn every_vector_width_finds_the_same_window_tops() {
        for window in [3, 11, 73, 201] {
            let energy = rough_energy(5000, window as u64);
            let four = window_tops(Lanes::Four, &energy, window);
            assert_eq!(four.len(), energy.len() + 1 - window);
            assert!(four.contains(&1) && four.contains(&0), "window {window}");
            for lanes in Lanes::supported() {
                assert_eq!(window_tops(lanes, &energy, window), four, "{lanes:?}");
            }
        }
    }

    #[test]
    fn nothing_in_nothing_out() {
        let p = params();
        assert!(decide(&[], &p).is_empty());
        assert!(
            candidates(&[0.0; 10], &p).is_empty(),
            "shorter than a window"
        );
        assert!(
            candidates(&[0.0; 1000], &p).is_empty(),
            "silence has no maxima"
        );
    }

    #[test]
    fn the_r_peak_is_the_largest_curvature_of_either_sign() {
        let p = params();
        let mut curv = vec![0f32; 400];
        curv[180] = 0.5;
        curv[190] = -2.0; // a negative QRS complex
        let peaks = locate_peaks(&curv, &[200], &p);
        assert_eq!(peaks, [(190 - p.curvature_delay()) as i64]);
    }

    #[test]
    fn stages_run_on_a_signal_end_to_end() {
        let p = params();
        let mut signal = vec![0f32; 5000];
        for b in 0..20 {
            signal[120 + 240 * b] = 1.0;
        }
        let (curv, energy) = filtered(&signal, &p);
        let cands = candidates(&energy, &p);
        let beats = decide(&cands, &p);
        let peaks = locate_peaks(
            &curv,
            &beats.iter().map(|&k| cands[k].0).collect::<Vec<_>>(),
            &p,
        );
        assert_eq!(peaks.len(), 20);
        for (b, &r) in peaks.iter().enumerate() {
            assert!((r - (120 + 240 * b) as i64).abs() <= 2, "beat {b} at {r}");
        }
    }
}
