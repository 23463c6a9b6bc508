//! Signal quality: which stretches of a recording hold an ECG that the detector's beats can
//! be trusted in, decided per window (10 s by default; a last, shorter window joins the one
//! before it) from the signal and the detector's R peaks.
//!
//! Each window gets one code, the first rule it meets in this order (the figures quoted are
//! per 10 s window, measured on the bundled MIT-BIH records 100 and 208, on synthetic ECG
//! from `synth` at 250, 360 and 1000 Hz and 30 to 240 bpm, and on noise):
//!
//! 1. [`Quality::Flat`]: no variation. Its peak-to-peak range is zero, or under
//!    [`FLAT_RELATIVE`] (2 %) of the recording's median window range: an electrode off, a
//!    disconnected lead, a run of zeros a recorder wrote for a gap. The range, not the
//!    standard deviation: no sum that can overflow, in any unit.
//! 2. [`Quality::Clipped`]: at least [`CLIP_SHARE`] (1 %) of the window's samples lie on
//!    plateaus at its maximum or its minimum, a plateau being a run of equal samples at least
//!    [`CLIP_RUN_S`] long (8 ms, and 3 samples): the amplifier or converter at its rail. In
//!    record 100 no plateau of 3 samples lies at a window's extreme (nor once its samples are
//!    rounded to 0.05 mV); cut at 0.6 mV, 179 of its 180 windows hold 1.0–2.6 % of their
//!    samples there, and a synthetic ECG whose R waves lose their top 0.2 mV, 1.4–2.3 %.
//!    Coarser converters than 0.1 mV a step may read as clipped now and then (record 100
//!    rounded to 0.1 mV: 5 of 180 windows).
//! 3. [`Quality::NoQrs`]: nothing in the QRS band stands out from noise. The band is a Haar
//!    wavelet (the sum of 16 ms of samples less the sum of the 16 ms before: a band-pass
//!    that peaks near 23 Hz) on the signal averaged to 100–200 Hz, and a QRS complex makes it
//!    spiky: its kurtosis is 19.8–32.6 in record 100, 12.1–27.8 in record 208, 8.4–24.1 for
//!    synthetic ECG at 30–150 bpm and 6.4–7.0 at 240 bpm, where QRS complexes fill 40 % of
//!    the time. Gaussian noise of any band has 3 (2.6–3.6 over the 2,880 windows of 8 hours
//!    of white noise; 5.2 at most for noise narrowed to 3–10 Hz, in one window of 2,880,
//!    which rule 4 then caught), uniform and Laplace noise 2.7–3.6. Below [`KURTOSIS_MIN`]
//!    (5) the window has no QRS-like energy: noise alone, or an ECG buried in it (white,
//!    muscle or electrode-motion noise at 0 dB SNR reads 3.1–4.6).
//!    The band's mean frequency must also reach [`BAND_FREQUENCY_MIN`] (6 Hz): an ECG's is
//!    8.5–19.3 Hz (the lowest at 30 bpm sampled at 1000 Hz), while slow noise alone
//!    (baseline wander, a drifting electrode) only leaks into the band at 0.3–4.3 Hz, where
//!    ten seconds hold too few of its swings for the kurtosis to mean anything (up to 7.9
//!    over 8 hours).
//!    Fewer than [`MIN_BEATS`] detected beats in the window is the same verdict.
//! 4. [`Quality::Noisy`]: the detected beats disagree with each other. Each beat's ±100 ms
//!    around its R peak is correlated with the sum of the window's other beats; when the
//!    median correlation is under [`CORRELATION_MIN`] (0.5) the beats are not one heart's. A
//!    clean ECG reads 0.91–1.0 (bigeminy, every other beat premature ventricular: 0.93;
//!    record 208, with its many premature ventricular beats: 0.75 at the lowest), an ECG with
//!    white, muscle or electrode-motion noise at 6 dB SNR 0.71–0.94.
//! 5. [`Quality::Good`] otherwise.
//!
//! The SNR is the MIT-BIH Noise Stress Test Database's: S = (QRS peak-to-peak)² / 8, N the
//! noise's mean power. At 12 dB every window of a synthetic ECG with white, muscle-band
//! (20–150 Hz), electrode-motion-band (0.5–10 Hz), QRS-band (0.5–40 Hz) or baseline-wander
//! noise is good; at 6 dB too, but for noise that fills the QRS band itself (0.5–40 Hz),
//! where the detector starts to take noise for beats as well (15 beats a window for 12).
//!
//! What the rules cannot tell: a real asystole or a long pause reads as no QRS-like energy
//! (or flat), and a rhythm without narrow complexes (ventricular flutter) may too.
//!
//! Time is linear in the length, whatever the input: three passes over each window's samples
//! (extremes, the count at them, block averages), a few over its band (a fraction of the
//! samples), and two over the ±100 ms of each detected beat; windows in parallel. No rule
//! waits for the whole detection: [`segment_judged`] takes the windows' extremes in the pass
//! that checks the signal is finite, runs the rules that read the signal alone beside the
//! detection, on the cores it leaves idle, and the beats' rule beside the detection's last
//! stage (the beats' rows), as soon as the R peaks are known (a signal over
//! [`BESIDE_MAX_SAMPLES`]: every rule there, in one pass). What that adds to detection
//! (`bench/ecg_accuracy.py --quality-only`, host memory from a pool, medians): on 16 cores
//! 7.7–8.8 % on record 100, 5.1–9.4 % on 8 hours of ECG; on 2 cores, where no core is idle
//! and the rules' own work is about a tenth of the detection's, 4–13 % from run to run.

use std::time::Instant;

use rayon::prelude::*;

use crate::adaptive::check_finite;
use crate::error::{invalid, Result};
use crate::segment::check_rate;
use crate::simd::{by_width, Lanes};

/// The default window, seconds.
pub const WINDOW_S: f64 = 10.0;
/// The shortest window: one that holds two beats at 30 bpm, the slowest rate detected.
pub const MIN_WINDOW_S: f64 = 4.0;
/// The longest window: an hour.
pub const MAX_WINDOW_S: f64 = 3600.0;
/// A window whose peak-to-peak range is under this fraction of the recording's median window
/// range is flat.
pub const FLAT_RELATIVE: f64 = 0.02;
/// A window with at least this share of its samples on plateaus at its extremes is clipped.
pub const CLIP_SHARE: f64 = 0.01;
/// The shortest plateau counted as clipping, seconds (and never under 3 samples).
pub const CLIP_RUN_S: f64 = 0.008;
/// Below this kurtosis of the QRS band a window has no QRS-like energy.
pub const KURTOSIS_MIN: f64 = 5.0;
/// Below this mean frequency of the QRS band, Hz, a window has no QRS-like energy.
pub const BAND_FREQUENCY_MIN: f64 = 6.0;
/// Below this median beat-to-template correlation a window is too noisy to trust.
pub const CORRELATION_MIN: f64 = 0.5;
/// Fewer detected beats in a window than this: no QRS-like energy.
pub const MIN_BEATS: usize = 2;
/// Half the Haar wavelet of the QRS band, seconds.
const BAND_S: f64 = 0.016;
/// The band is measured at this rate or up to twice it: a faster signal is averaged over
/// blocks of a power of two samples first (which also keeps what lies above the QRS band
/// out), so the wavelet stays a few samples long at any rate and a window's band costs a
/// fraction of its samples.
const BAND_RATE: f64 = 100.0;
/// Each beat's template reaches this far either side of its R peak, seconds.
const TEMPLATE_S: f64 = 0.1;

/// A window's verdict. The discriminants are the codes the Python side receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Quality {
    Good = 0,
    Flat = 1,
    Clipped = 2,
    NoQrs = 3,
    Noisy = 4,
}

impl Quality {
    /// Every code, in code order.
    pub const ALL: [Quality; 5] = [
        Quality::Good,
        Quality::Flat,
        Quality::Clipped,
        Quality::NoQrs,
        Quality::Noisy,
    ];

    /// What a report calls it.
    pub fn name(self) -> &'static str {
        match self {
            Quality::Good => "good",
            Quality::Flat => "flat",
            Quality::Clipped => "clipped",
            Quality::NoQrs => "no QRS-like energy",
            Quality::Noisy => "too noisy",
        }
    }

    pub fn is_reliable(self) -> bool {
        self == Quality::Good
    }
}

/// What each window's verdict was decided on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowStats {
    /// Peak-to-peak range, in the signal's units.
    pub range: f32,
    /// Share of the samples on plateaus at the window's maximum or minimum.
    pub clipped: f32,
    /// Kurtosis of the QRS band (NaN where the window is constant).
    pub kurtosis: f32,
    /// The QRS band's mean frequency, Hz.
    pub band: f32,
    /// Median correlation of each beat with the others' average (NaN where not measured:
    /// fewer than two whole beats, or the window already failed an earlier rule).
    pub correlation: f32,
    /// Detected R peaks in the window.
    pub beats: u32,
}

/// A stretch of unreliable windows: samples `start..end` and the commonest reason among them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub reason: Quality,
}

/// The verdict on a whole recording.
#[derive(Clone, Debug)]
pub struct Assessment {
    pub rate: f64,
    /// Samples in the recording.
    pub len: usize,
    /// Samples per window (the last window runs to the end: up to twice as long).
    pub window: usize,
    pub codes: Vec<Quality>,
    pub stats: Vec<WindowStats>,
}

impl Assessment {
    /// How many windows: one per whole window, and at least one.
    pub fn windows(&self) -> usize {
        (self.len / self.window).max(1)
    }

    /// Samples `start..end` of window `k`.
    pub fn window_span(&self, k: usize) -> (usize, usize) {
        let start = k * self.window;
        let end = if k + 1 == self.windows() {
            self.len
        } else {
            start + self.window
        };
        (start, end)
    }

    /// The window that holds `sample` (which must be below `len`).
    pub fn window_of(&self, sample: usize) -> usize {
        (sample / self.window).min(self.windows() - 1)
    }

    /// Whether each of `peaks` lies in a good window; a peak outside the recording is an
    /// error naming it.
    pub fn reliable_beats(&self, peaks: &[i64]) -> Result<Vec<bool>> {
        peaks
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let at = usize::try_from(p)
                    .ok()
                    .filter(|&s| s < self.len)
                    .ok_or_else(|| outside("peaks", i, p, self.len))?;
                Ok(self.codes[self.window_of(at)].is_reliable())
            })
            .collect()
    }

    /// Runs of unreliable windows, in order, each with its commonest reason (a tie goes to
    /// the earlier rule: flat before clipped before no QRS before noisy).
    pub fn unreliable_spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        let mut k = 0;
        while k < self.codes.len() {
            if self.codes[k].is_reliable() {
                k += 1;
                continue;
            }
            let first = k;
            let mut counts = [0usize; Quality::ALL.len()];
            while k < self.codes.len() && !self.codes[k].is_reliable() {
                counts[self.codes[k] as usize] += 1;
                k += 1;
            }
            // max_by_key keeps the last of equal maxima: walk the codes backwards.
            let reason = Quality::ALL[1..]
                .iter()
                .rev()
                .copied()
                .max_by_key(|&q| counts[q as usize])
                .unwrap_or(Quality::NoQrs);
            spans.push(Span {
                start: self.window_span(first).0,
                end: self.window_span(k - 1).1,
                reason,
            });
        }
        spans
    }

    /// Samples in windows of verdict `q`.
    pub fn samples_of(&self, q: Quality) -> usize {
        (0..self.codes.len())
            .filter(|&k| self.codes[k] == q)
            .map(|k| {
                let (s, e) = self.window_span(k);
                e - s
            })
            .sum()
    }

    /// The share of the recording's samples in good windows.
    pub fn reliable_fraction(&self) -> f64 {
        self.samples_of(Quality::Good) as f64 / self.len as f64
    }
}

fn outside(what: &str, index: usize, value: i64, len: usize) -> crate::EcgError {
    invalid(
        what,
        format!("entry {index} is sample {value}, outside the signal's 0..{len}"),
    )
}

/// Samples per window at `rate` for a window of `window_s` seconds, checked.
fn window_samples(rate: f64, window_s: f64) -> Result<usize> {
    check_rate(rate)?;
    if !(window_s.is_finite() && (MIN_WINDOW_S..=MAX_WINDOW_S).contains(&window_s)) {
        return Err(invalid(
            "quality window",
            format!("{window_s} s is outside {MIN_WINDOW_S}..{MAX_WINDOW_S} s"),
        ));
    }
    Ok((window_s * rate).round() as usize)
}

/// Checks that `r_peaks` ascend and lie inside a signal of `len` samples.
fn check_peaks(r_peaks: &[i64], len: usize) -> Result<()> {
    if let Some(i) = r_peaks
        .iter()
        .position(|&p| p < 0 || p as u64 >= len as u64)
    {
        return Err(outside("r_peaks", i, r_peaks[i], len));
    }
    if let Some(i) = r_peaks.windows(2).position(|w| w[1] < w[0]) {
        return Err(invalid(
            "r_peaks",
            format!(
                "entries {i} and {} ({} then {}) are not in ascending order",
                i + 1,
                r_peaks[i],
                r_peaks[i + 1]
            ),
        ));
    }
    Ok(())
}

/// Judges every window of `signal` (sampled at `rate`, with the detector's ascending
/// `r_peaks`) of `window_s` seconds. An empty signal, a NaN or infinite sample, a rate or
/// window out of range, or a peak outside the signal or out of order is an error naming it.
pub fn assess(signal: &[f32], rate: f64, r_peaks: &[i64], window_s: f64) -> Result<Assessment> {
    let layout = layout(signal, rate, window_s)?;
    check_peaks(r_peaks, signal.len())?;
    judge_all(signal, r_peaks, layout, None)
}

/// Every window's verdict, both rules in one task a window: one spread over the threads,
/// and the window's samples still in cache for its beats.
fn judge_all(
    signal: &[f32],
    r_peaks: &[i64],
    layout: Assessment,
    known: Option<&[(f32, f32)]>,
) -> Result<Assessment> {
    let scales = Scales::for_rate(layout.rate);
    let decided: Option<Vec<(Quality, WindowStats)>> = (0..layout.windows())
        .into_par_iter()
        .with_min_len(WINDOWS_A_TASK)
        .map_init(
            || (BandScratch::default(), Scratch::default()),
            |(band, scratch), k| {
                let (start, end) = layout.window_span(k);
                let extremes = match known {
                    Some(known) => known[k],
                    None => checked_extremes(lanes(), &signal[start..end])?,
                };
                let verdict = judge_signal(lanes(), signal, start, end, &scales, extremes, band);
                let peaks = peaks_in(r_peaks, start, end);
                let level = verdict.level;
                Some(decide(verdict, peaks.len(), || {
                    let span = (start, end);
                    f64::from(agreement(
                        lanes(),
                        signal,
                        span,
                        peaks,
                        level,
                        &scales,
                        scratch,
                    ))
                }))
            },
        )
        .collect();
    let Some(decided) = decided else {
        return Err(non_finite(signal));
    };
    Ok(finish(layout, decided))
}

/// The longest signal whose rules [`segment_judged`] runs beside the whole detection,
/// samples (16 MiB of f32, what a last-level cache holds). Beside the whole detection, the
/// beats' rule reads the signal a second time; a longer signal would come back from memory
/// then, and judging every rule in one pass per window, from the R peaks, costs less (on 2
/// cores, 8 hours at 360 Hz, judged after the detection: 10.8–12.4 % of detection, beside
/// it 12.8–13.8 %), while a short one gains from the threads being awake (record 100 on 16
/// cores: 23 % judged after the detection, 15 % beside it).
pub const BESIDE_MAX_SAMPLES: usize = 1 << 22;

/// A detection and the quality judged beside it ([`segment_judged`]).
pub struct Judged {
    pub segmentation: crate::Segmentation,
    pub assessment: Assessment,
    /// The judging's own time, seconds, summed over its parts: most of it ran beside the
    /// detection, on cores the detection left idle.
    pub seconds: f64,
}

/// Detects the R peaks of `signal` (as [`segment_with`](crate::segment_with)) and judges
/// its `window_s`-second windows (as [`assess`]) in one go: up to [`BESIDE_MAX_SAMPLES`],
/// every rule that reads the signal alone runs beside the detection, on the cores it leaves
/// idle, and the beats' rule beside the detection's last stage, once the R peaks are known;
/// a longer signal is judged there in one pass. The same results as the two calls one after
/// the other.
pub fn segment_judged(
    signal: &[f32],
    params: &crate::Params,
    method: crate::Method,
    window_s: f64,
) -> Result<Judged> {
    judged_with(signal, params, method, window_s, BESIDE_MAX_SAMPLES)
}

/// [`segment_judged`], judging beside the detection up to `beside_max` samples.
fn judged_with(
    signal: &[f32],
    params: &crate::Params,
    method: crate::Method,
    window_s: f64,
    beside_max: usize,
) -> Result<Judged> {
    let layout = layout(signal, params.rate, window_s)?;
    // The windows' extremes stand in for the detector's check of the signal: one pass over
    // it where the two were two.
    let started = Instant::now();
    let extremes = window_extremes(signal, &layout)?;
    let extremes_time = started.elapsed();
    if signal.len() > beside_max {
        // Both rules in one pass per window, beside the detection's last stage (the beats'
        // rows), from its R peaks.
        let mut judged = None;
        let segmentation =
            crate::adaptive::segment_finite_then(signal, params, method, &mut |peaks| {
                let started = Instant::now();
                let assessment = judge_all(signal, peaks, layout.clone(), Some(&extremes));
                judged = Some((assessment, started.elapsed()));
            })?;
        let (assessment, judge_time) = judged.ok_or_else(never_judged)?;
        return Ok(Judged {
            segmentation,
            assessment: assessment?,
            seconds: (extremes_time + judge_time).as_secs_f64(),
        });
    }
    // The beats' agreement needs a window's extremes and its R peaks alone: it runs beside
    // the detection's last stage (the beats' rows), before the signal's verdicts are known.
    let mut agreed = None;
    let (segmentation, (judged, signal_time)) = rayon::join(
        || {
            crate::adaptive::segment_finite_then(signal, params, method, &mut |peaks| {
                let started = Instant::now();
                agreed = Some((
                    agreements(signal, peaks, &layout, &extremes),
                    started.elapsed(),
                ));
            })
        },
        || {
            let started = Instant::now();
            let judged = judge_signal_all(signal, &layout, &extremes);
            (judged, started.elapsed())
        },
    );
    let segmentation = segmentation?;
    let (agreed, agreement_time) = agreed.ok_or_else(never_judged)?;
    let started = Instant::now();
    let peaks = segmentation.r_peaks.as_slice::<i64>()?;
    let assessment = decide_all(peaks, layout, judged, &agreed);
    let seconds = extremes_time + signal_time + agreement_time + started.elapsed();
    Ok(Judged {
        segmentation,
        assessment,
        seconds: seconds.as_secs_f64(),
    })
}

/// A detection that returned without handing its R peaks to the judging: a defect, reported
/// rather than a panic.
fn never_judged() -> crate::EcgError {
    invalid(
        "signal",
        "the detection returned no R peaks to judge the quality by",
    )
}

/// The windows of an assessment of `signal`, checked, with no verdicts yet.
fn layout(signal: &[f32], rate: f64, window_s: f64) -> Result<Assessment> {
    let window = window_samples(rate, window_s)?;
    if signal.is_empty() {
        return Err(invalid("signal", "no samples"));
    }
    Ok(Assessment {
        rate,
        len: signal.len(),
        window,
        codes: Vec::new(),
        stats: Vec::new(),
    })
}

/// Windows a task judges: fewer, and a short record's few windows wait on the threads'
/// wake-ups rather than on their work.
const WINDOWS_A_TASK: usize = 16;

/// AVX2 at most: 512-bit vectors made these short passes no faster.
fn lanes() -> Lanes {
    Lanes::widest().min(Lanes::Eight)
}

/// Each window's minimum and maximum, in a pass that also checks every sample is finite
/// (an error naming the first that is not, as the detector's check does).
fn window_extremes(signal: &[f32], layout: &Assessment) -> Result<Vec<(f32, f32)>> {
    let found: Option<Vec<(f32, f32)>> = (0..layout.windows())
        .into_par_iter()
        .with_min_len(WINDOWS_A_TASK)
        .map(|k| {
            let (start, end) = layout.window_span(k);
            checked_extremes(lanes(), &signal[start..end])
        })
        .collect();
    found.ok_or_else(|| non_finite(signal))
}

/// Every window's verdict on the rules that read the signal alone, from its `extremes`.
fn judge_signal_all(
    signal: &[f32],
    layout: &Assessment,
    extremes: &[(f32, f32)],
) -> Vec<SignalVerdict> {
    let scales = Scales::for_rate(layout.rate);
    (0..layout.windows())
        .into_par_iter()
        .with_min_len(WINDOWS_A_TASK)
        .map_init(BandScratch::default, |band, k| {
            let (start, end) = layout.window_span(k);
            judge_signal(lanes(), signal, start, end, &scales, extremes[k], band)
        })
        .collect()
}

/// The error for a signal a window found a NaN or infinite sample in: the detector's own
/// check names the first.
fn non_finite(signal: &[f32]) -> crate::EcgError {
    match check_finite(signal) {
        Err(named) => named,
        Ok(()) => invalid("signal", "a sample is NaN or infinite"),
    }
}

/// The ascending `r_peaks` inside samples `start..end`.
fn peaks_in(r_peaks: &[i64], start: usize, end: usize) -> &[i64] {
    let first = r_peaks.partition_point(|&p| (p as usize) < start);
    let last = r_peaks.partition_point(|&p| (p as usize) < end);
    &r_peaks[first..last]
}

/// The assessment of `layout`'s windows from their verdicts, flatness against the
/// recording's median range decided last.
fn finish(layout: Assessment, decided: Vec<(Quality, WindowStats)>) -> Assessment {
    let (mut codes, stats): (Vec<Quality>, Vec<WindowStats>) = decided.into_iter().unzip();
    mark_flat(&mut codes, &stats);
    Assessment {
        codes,
        stats,
        ..layout
    }
}

/// Each window's beats' agreement ([`beat_agreement`]) from its extremes and the R peaks,
/// whatever the signal's rules will say of it: NaN where no verdict can need it (a flat
/// window, fewer than [`MIN_BEATS`] beats).
fn agreements(
    signal: &[f32],
    r_peaks: &[i64],
    layout: &Assessment,
    extremes: &[(f32, f32)],
) -> Vec<f32> {
    let scales = Scales::for_rate(layout.rate);
    (0..layout.windows())
        .into_par_iter()
        .with_min_len(WINDOWS_A_TASK)
        .map_init(Scratch::default, |scratch, k| {
            let (start, end) = layout.window_span(k);
            let peaks = peaks_in(r_peaks, start, end);
            let (low, high) = extremes[k];
            if high - low == 0.0 || peaks.len() < MIN_BEATS {
                return f32::NAN;
            }
            let level = level_of(extremes[k]);
            agreement(
                lanes(),
                signal,
                (start, end),
                peaks,
                level,
                &scales,
                scratch,
            )
        })
        .collect()
}

/// The verdicts from the signal's and each window's beats' `agreed` figure.
fn decide_all(
    r_peaks: &[i64],
    layout: Assessment,
    judged: Vec<SignalVerdict>,
    agreed: &[f32],
) -> Assessment {
    let decided = judged
        .into_iter()
        .zip(agreed)
        .enumerate()
        .map(|(k, (verdict, &agreement))| {
            let (start, end) = layout.window_span(k);
            decide(verdict, peaks_in(r_peaks, start, end).len(), || {
                f64::from(agreement)
            })
        })
        .collect();
    finish(layout, decided)
}

/// The rules' lengths at one rate.
struct Scales {
    /// The shortest plateau counted as clipping, samples.
    clip_run: usize,
    /// Samples averaged into one band sample.
    block: usize,
    /// Half the Haar wavelet, and a beat's reach either side of its R peak, in band samples.
    half: usize,
    reach: usize,
    /// Band samples a second.
    band_rate: f64,
}

impl Scales {
    fn for_rate(rate: f64) -> Scales {
        // A power of two: the averages come from halving passes, each a vector loop.
        let block = 1usize << (rate / BAND_RATE).max(1.0).log2().floor() as u32;
        let band_rate = rate / block as f64;
        Scales {
            clip_run: ((CLIP_RUN_S * rate).round() as usize).max(3),
            block,
            half: ((BAND_S * band_rate).round() as usize).max(1),
            // Within a padded row whatever the rate (the band's rate is under 200 Hz).
            reach: ((TEMPLATE_S * band_rate).round() as usize).clamp(1, (ROW - 1) / 2),
            band_rate,
        }
    }
}

/// Per-thread buffers of the band, reused from window to window.
#[derive(Default)]
struct BandScratch {
    /// Block averages of the window and what the wavelet reaches around it.
    averaged: Vec<f32>,
    /// Moving sums of the averages, and the wavelet.
    sums: Vec<f32>,
    wavelet: Vec<f32>,
}

/// Per-thread buffers of the beats' rule, reused from window to window.
#[derive(Default)]
struct Scratch {
    /// Block averages of one beat's stretch.
    averaged: Vec<f32>,
    /// Each whole beat's stretch of averages, zero-padded, then its mean and sum of squares
    /// about it, and its correlation with the others.
    rows: Vec<[f32; ROW]>,
    beats: Vec<(f32, f32)>,
    correlations: Vec<f32>,
}

/// f32 lanes the hand-vectorised sums keep apart (the compiler may not reorder a float sum
/// itself): two AVX2 registers, four SSE2 ones, enough to hide an addition's latency.
const LANES: usize = 16;

/// What the signal alone says of a window: a verdict (None where the beats' rule decides),
/// the figures so far, and the shift and scale its averages were taken with.
struct SignalVerdict {
    code: Option<Quality>,
    stats: WindowStats,
    level: (f32, f32),
}

by_width! {
    /// One window's verdict on the rules that read the signal alone (flat, clipped, no
    /// QRS-like energy in the band; flatness against the other windows comes last), from its
    /// minimum and maximum (`extremes`). Compiled for the vectors the caller
    /// picks (AVX2 where the CPU has it): the window's passes are a few operations a sample,
    /// cheap only in wide vectors. The sums' lanes are fixed, so every width gives the same
    /// bits.
    fn judge_signal(signal: &[f32], start: usize, end: usize, scales: &Scales,
        extremes: (f32, f32), band: &mut BandScratch) -> SignalVerdict = judge_window_signal
}

by_width! {
    /// [`extremes`] in the vectors the caller picks.
    fn checked_extremes(x: &[f32]) -> Option<(f32, f32)> = extremes
}

by_width! {
    /// [`beat_agreement`] in the vectors the caller picks.
    fn agreement(signal: &[f32], span: (usize, usize), peaks: &[i64], level: (f32, f32),
        scales: &Scales, scratch: &mut Scratch) -> f32 = window_agreement
}

#[inline(always)]
fn judge_window_signal(
    signal: &[f32],
    start: usize,
    end: usize,
    scales: &Scales,
    (low, high): (f32, f32),
    band: &mut BandScratch,
) -> SignalVerdict {
    let x = &signal[start..end];
    let range = high - low;
    let mut verdict = SignalVerdict {
        code: None,
        stats: WindowStats {
            range,
            clipped: 0.0,
            kurtosis: f32::NAN,
            band: f32::NAN,
            correlation: f32::NAN,
            beats: 0,
        },
        level: (low, 0.0),
    };
    // Flat by any measure, and no rule below can be measured on a constant.
    if range == 0.0 {
        verdict.code = Some(Quality::Flat);
        return verdict;
    }
    let stats = &mut verdict.stats;
    stats.clipped = plateau_share(x, low, high, scales.clip_run);
    if f64::from(stats.clipped) >= CLIP_SHARE {
        verdict.code = Some(Quality::Clipped);
        return verdict;
    }
    verdict.level = level_of((low, high));
    let from = average_around(
        signal,
        start,
        end,
        verdict.level,
        scales,
        &mut band.averaged,
    );
    let (kurtosis, frequency) = band_shape(from, start, end, scales, band);
    stats.kurtosis = kurtosis as f32;
    stats.band = (frequency * scales.band_rate) as f32;
    let spiky = kurtosis >= KURTOSIS_MIN;
    let fast = f64::from(stats.band) >= BAND_FREQUENCY_MIN;
    if !spiky || !fast {
        verdict.code = Some(Quality::NoQrs);
    }
    verdict
}

#[inline(always)]
fn window_agreement(
    signal: &[f32],
    span: (usize, usize),
    peaks: &[i64],
    level: (f32, f32),
    scales: &Scales,
    scratch: &mut Scratch,
) -> f32 {
    beat_agreement(signal, span, peaks, level, scales, scratch) as f32
}

/// A window's verdict from the signal's and its `beats` detected R peaks: the signal's
/// verdict where it gave one, too few beats no QRS-like energy, then the beats' `agreement`
/// (asked for only then) noisy or good.
#[inline(always)]
fn decide(
    verdict: SignalVerdict,
    beats: usize,
    agreement: impl FnOnce() -> f64,
) -> (Quality, WindowStats) {
    let SignalVerdict {
        code, mut stats, ..
    } = verdict;
    stats.beats = beats as u32;
    if let Some(code) = code {
        return (code, stats);
    }
    if beats < MIN_BEATS {
        return (Quality::NoQrs, stats);
    }
    stats.correlation = agreement() as f32;
    if f64::from(stats.correlation) < CORRELATION_MIN {
        return (Quality::Noisy, stats);
    }
    (Quality::Good, stats)
}

/// The shift and scale that bring a window with these extremes to 0..1: the band's fourth
/// powers stay far from overflow in any unit, and a beat's sums of squares far from
/// cancelling. Halves first, so that extremes of opposite sign near f32's limits give a
/// finite scale.
#[inline(always)]
fn level_of((low, high): (f32, f32)) -> (f32, f32) {
    (low, 0.5 / (0.5 * high - 0.5 * low))
}

/// The minimum and maximum of a non-empty slice; None if it holds a NaN or an infinity. One
/// pass in [`WIDE`] lanes: `if v < low { v } else { low }` is one vector instruction where
/// `f32::min` (bound to NaN's rules) is several, and a non-finite sample shows as a NaN in
/// the sum of each sample times zero.
#[inline(always)]
fn extremes(x: &[f32]) -> Option<(f32, f32)> {
    let (whole, rest) = x.as_chunks::<WIDE>();
    let (mut low, mut high) = ([f32::INFINITY; WIDE], [f32::NEG_INFINITY; WIDE]);
    let mut finite = [0f32; WIDE];
    for c in whole {
        for t in 0..WIDE {
            let v = c[t];
            low[t] = if v < low[t] { v } else { low[t] };
            high[t] = if v > high[t] { v } else { high[t] };
            finite[t] += v * 0.0;
        }
    }
    let mut low = low
        .iter()
        .fold(f32::INFINITY, |l, &v| if v < l { v } else { l });
    let mut high = high
        .iter()
        .fold(f32::NEG_INFINITY, |h, &v| if v > h { v } else { h });
    let mut finite = finite.iter().sum::<f32>();
    for &v in rest {
        low = if v < low { v } else { low };
        high = if v > high { v } else { high };
        finite += v * 0.0;
    }
    (finite == 0.0).then_some((low, high))
}

/// f32 lanes of a full-rate pass: four AVX2 registers, enough to keep a minimum's latency
/// out of the way.
const WIDE: usize = 32;

/// The share of `x` on runs of at least `run` equal samples at `low` or `high`. Counting
/// first (a vector pass) spares the run-length walk for the windows that cannot reach
/// [`CLIP_SHARE`] anyway: all of a clean recording's.
#[inline(always)]
fn plateau_share(x: &[f32], low: f32, high: f32, run: usize) -> f32 {
    let at_extreme: u64 = x
        .chunks(1 << 20)
        .map(|c| {
            let n: u32 = c.iter().map(|&v| u32::from((v == low) | (v == high))).sum();
            u64::from(n)
        })
        .sum();
    if (at_extreme as f64) < CLIP_SHARE * x.len() as f64 {
        return 0.0;
    }
    let mut on_plateaus = 0usize;
    let mut length = 0usize;
    for (i, &v) in x.iter().enumerate() {
        let extreme = v == low || v == high;
        if extreme && i > 0 && x[i - 1] == v {
            length += 1;
        } else {
            if length >= run {
                on_plateaus += length;
            }
            length = usize::from(extreme);
        }
    }
    if length >= run {
        on_plateaus += length;
    }
    (on_plateaus as f64 / x.len() as f64) as f32
}

/// Block averages, less `low` and times `scale`, of samples `start..end` and of what the
/// wavelet's first outputs and the beats near the window's ends reach beyond it (as far as
/// the signal goes), into `out`; returns the sample the first average starts at (a multiple
/// of the block, so every window averages the same blocks).
#[inline(always)]
fn average_around(
    signal: &[f32],
    start: usize,
    end: usize,
    level: (f32, f32),
    scales: &Scales,
    out: &mut Vec<f32>,
) -> usize {
    let (from, to) = averaged_span(signal.len(), start, end, scales);
    block_averages(&signal[from..to], level, scales.block, out);
    from
}

/// The samples `from..to` a window's block averages cover: `from` a multiple of the block.
fn averaged_span(len: usize, start: usize, end: usize, scales: &Scales) -> (usize, usize) {
    let block = scales.block;
    let before = (2 * scales.half + scales.reach) * block;
    let from = start.saturating_sub(before) / block * block;
    (from, len.min(end + (scales.reach + 1) * block))
}

/// The averages of each `block` samples of `x` (which starts at a block's start), less
/// `low` and times `scale`, into `out`: each average depends on its block's samples alone,
/// so any block-aligned stretch gives the same values as the whole.
#[inline(always)]
fn block_averages(x: &[f32], (low, scale): (f32, f32), block: usize, out: &mut Vec<f32>) {
    let offset = low * scale;
    // Sized first and written in place: loops the compiler vectorises, where pushing one
    // average at a time would not be.
    out.clear();
    if block == 1 {
        out.extend(x.iter().map(|&v| v * scale - offset));
        return;
    }
    // Pairs first, straight from the signal; then halved in place until `block` samples
    // make one (an odd one out, at the end, stands for its block alone).
    let half_scale = 0.5 * scale;
    let (pairs, odd) = x.as_chunks::<2>();
    out.extend(pairs.iter().map(|p| (p[0] + p[1]) * half_scale - offset));
    if let [last] = odd {
        out.push(last * scale - offset);
    }
    let mut len = out.len();
    let mut size = 2;
    while size < block {
        let pairs = len / 2;
        for j in 0..pairs {
            out[j] = (out[2 * j] + out[2 * j + 1]) * 0.5;
        }
        if len % 2 == 1 {
            out[pairs] = out[len - 1];
        }
        len = len.div_ceil(2);
        size *= 2;
    }
    out.truncate(len);
}

/// The kurtosis of the QRS band over the window's samples `start..end` (the Haar wavelet on
/// the block averages `scratch.averaged`, which start at sample `from`), NaN where the band
/// is constant; and the band's mean frequency, in cycles per band sample (from the variance
/// of its steps against its own: a wave of frequency f steps by 2π·f of its amplitude).
///
/// The wavelet at band sample i is m(i) − m(i − half), m the moving sum of `half` averages:
/// a vector pass per lag for the moving sums, one for the wavelet, one for the three sums
/// over it.
#[inline(always)]
fn band_shape(
    from: usize,
    start: usize,
    end: usize,
    scales: &Scales,
    scratch: &mut BandScratch,
) -> (f64, f64) {
    let (block, half) = (scales.block, scales.half);
    let BandScratch {
        averaged: a,
        sums,
        wavelet: w,
    } = scratch;
    // Outputs at band samples first..last, and the one before first for the first step.
    let first = (start - from).div_ceil(block).max(2 * half);
    let last = a.len().min((end - from).div_ceil(block));
    if last < first + 2 {
        return (f64::NAN, f64::NAN);
    }
    // sums[k] = Σ a[k ..= k + half − 1]: the moving sum ending at band sample k + half − 1.
    // The first lag is added as the sums are made, sparing a copy.
    sums.clear();
    if half == 1 {
        sums.extend_from_slice(a);
    } else {
        sums.extend(
            a[half - 1..]
                .iter()
                .zip(&a[half - 2..])
                .map(|(&x, &y)| x + y),
        );
    }
    for lag in 2..half {
        for (o, &v) in sums.iter_mut().zip(&a[half - 1 - lag..]) {
            *o += v;
        }
    }
    // w[j] is the wavelet at band sample first − 1 + j.
    let n = last - first + 1;
    let recent = &sums[first - half..][..n];
    let earlier = &sums[first - 2 * half..][..n];
    w.clear();
    w.extend(recent.iter().zip(earlier).map(|(&r, &e)| r - e));
    let [second, fourth, steps] = band_sums(w);
    let count = (n - 1) as f64;
    let (second, fourth, steps) = (second / count, fourth / count, steps / count);
    // No variance, or a NaN sample: no kurtosis.
    if second.is_nan() || second <= 0.0 {
        return (f64::NAN, f64::NAN);
    }
    // Moments about zero, not the mean: the wavelet's weights sum to zero, so its mean over a
    // window is the trend's change across one wavelet, nothing beside a QRS complex (and a
    // window of trend alone has no QRS-like energy by any moment).
    let kurtosis = fourth / (second * second);
    (kurtosis, (steps / second).sqrt() / std::f64::consts::TAU)
}

/// The median, over the beats whose reach lies inside the stretch the band of the window
/// `start..end` averaged, of each beat's correlation with the sum of the others (the
/// mean-removed block averages around their R peaks, shifted and scaled by `level` as the
/// band's were); NaN with fewer than two such beats.
///
/// Each beat's stretch is averaged once, from the signal, into a zero-padded [`ROW`]: a few
/// dozen values make passes too short for a loop's remainder, while a fixed length makes
/// each a handful of whole vector steps. Then two passes a beat: its sum and sum of squares,
/// added into the template; then its product with the template. Each row's mean is taken out
/// of the template once (the template is the sum of the raw rows less the sum of their
/// means), and out of each product by the template's own sum, which is zero but for
/// rounding.
#[inline(always)]
fn beat_agreement(
    signal: &[f32],
    (start, end): (usize, usize),
    peaks: &[i64],
    level: (f32, f32),
    scales: &Scales,
    scratch: &mut Scratch,
) -> f64 {
    let Scratch {
        averaged,
        rows,
        beats,
        correlations,
    } = scratch;
    let (reach, block) = (scales.reach, scales.block);
    let width = 2 * reach + 1;
    // The blocks the band averaged, as block numbers; a beat's row is blocks
    // centre − reach ..= centre + reach, the centre its R peak's block. The block is a power
    // of two: a shift, where a division would cost more than the rest of a beat's first pass.
    let (from, to) = averaged_span(signal.len(), start, end, scales);
    let shift = block.trailing_zeros();
    let (first, last) = (from >> shift, (to - from).div_ceil(block) + (from >> shift));
    // Zeroed in place, then filled: a row built on the stack and pushed is copied twice.
    rows.clear();
    rows.resize(peaks.len(), [0f32; ROW]);
    let mut whole = 0;
    for &p in peaks {
        let centre = p as usize >> shift;
        if centre < first + reach || centre + reach >= last {
            continue;
        }
        let (begin, stop) = ((centre - reach) * block, (centre + reach + 1) * block);
        let row = &mut rows[whole];
        whole += 1;
        // Pairs, the commonest block (250 to 399 Hz), straight into the row: a fixed number
        // of vector steps where the general averages are a loop of a few dozen. What lies
        // past the row's width is read and masked out.
        let whole_pairs = signal[begin..].first_chunk::<{ 2 * ROW }>();
        if let (2, true, Some(pairs)) = (block, stop <= to, whole_pairs) {
            let (low, scale) = level;
            let (half_scale, offset) = (0.5 * scale, low * scale);
            for (k, (out, pair)) in row.iter_mut().zip(pairs.as_chunks::<2>().0).enumerate() {
                let average = (pair[0] + pair[1]) * half_scale - offset;
                *out = if k < width { average } else { 0.0 };
            }
            continue;
        }
        block_averages(&signal[begin..to.min(stop)], level, block, averaged);
        row[..width].copy_from_slice(&averaged[..width]);
    }
    rows.truncate(whole);
    if rows.len() < 2 {
        return f64::NAN;
    }
    let mut template = [0f32; ROW];
    let mut means = 0f32;
    beats.clear();
    for row in rows.iter() {
        let (sum, squares) = sum_squares_into(row, &mut template);
        let mean = sum / width as f32;
        // Σ (x − mean)² = Σ x² − mean·Σ x: the samples lie in 0..1 and a row's spread is
        // a good part of that, so nothing cancels that matters to a correlation.
        beats.push((mean, (squares - mean * sum).max(0.0)));
        means += mean;
    }
    // The padding stays zero, so the sums over whole rows below are sums over the beats.
    for t in &mut template[..width] {
        *t -= means;
    }
    let total = f64::from(dot(&template, &template));
    let drift: f32 = template.iter().sum();
    // A loop, not a closure: the closure was compiled apart, without the caller's vectors.
    correlations.clear();
    for (row, &(mean, square)) in rows.iter().zip(beats.iter()) {
        let with_all = f64::from(dot(row, &template) - mean * drift);
        let square = f64::from(square);
        // The others' sum is the template less this row.
        let with_others = with_all - square;
        let others_square = total - 2.0 * with_all + square;
        let denominator = (square * others_square).sqrt();
        correlations.push(if denominator > 0.0 {
            (with_others / denominator) as f32
        } else {
            0.0
        });
    }
    let middle = correlations.len() / 2;
    let (_, median, _) = correlations.select_nth_unstable_by(middle, f32::total_cmp);
    f64::from(*median)
}

/// f32 lanes of a beat's short sums.
const SHORT: usize = 8;

/// A beat's row, padded with zeros: a row reaches [`TEMPLATE_S`] either side of its R peak
/// at the band's rate, under 200 Hz, so 41 values at most (`Scales::for_rate` holds it so).
const ROW: usize = 48;

/// Σ x and Σ x² over a padded `row`, which is also added into `template`.
#[inline(always)]
fn sum_squares_into(row: &[f32; ROW], template: &mut [f32; ROW]) -> (f32, f32) {
    let (mut sum, mut squares) = ([0f32; SHORT], [0f32; SHORT]);
    for (x, t) in row
        .as_chunks::<SHORT>()
        .0
        .iter()
        .zip(template.as_chunks_mut::<SHORT>().0)
    {
        for k in 0..SHORT {
            t[k] += x[k];
            sum[k] += x[k];
            squares[k] += x[k] * x[k];
        }
    }
    (sum.iter().sum(), squares.iter().sum())
}

/// Σ a[i]·b[i] over two padded rows.
#[inline(always)]
fn dot(a: &[f32; ROW], b: &[f32; ROW]) -> f32 {
    let mut acc = [0f32; SHORT];
    for (x, y) in a
        .as_chunks::<SHORT>()
        .0
        .iter()
        .zip(b.as_chunks::<SHORT>().0)
    {
        for k in 0..SHORT {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum()
}

/// Over the wavelet's outputs but its first, Σ w², Σ w⁴ and Σ (w − the one before)²: in
/// [`LANES`] f32 sums each, added up in f64 every 1024 terms, in one pass.
#[inline(always)]
fn band_sums(w: &[f32]) -> [f64; 3] {
    let mut total = [0f64; 3];
    let (now, before) = (&w[1..], &w[..w.len() - 1]);
    for (now, before) in now.chunks(1024).zip(before.chunks(1024)) {
        let (mut second, mut fourth, mut steps) = ([0f32; LANES], [0f32; LANES], [0f32; LANES]);
        let (whole, rest) = now.as_chunks::<LANES>();
        let (whole_before, rest_before) = before.as_chunks::<LANES>();
        for (v, b) in whole.iter().zip(whole_before) {
            for t in 0..LANES {
                let square = v[t] * v[t];
                second[t] += square;
                fourth[t] += square * square;
                steps[t] += (v[t] - b[t]) * (v[t] - b[t]);
            }
        }
        for (&v, &b) in rest.iter().zip(rest_before) {
            second[0] += v * v;
            fourth[0] += (v * v) * (v * v);
            steps[0] += (v - b) * (v - b);
        }
        for (sum, lanes) in total.iter_mut().zip([second, fourth, steps]) {
            *sum += lanes.iter().map(|&x| f64::from(x)).sum::<f64>();
        }
    }
    total
}

/// Marks flat the windows whose range is under [`FLAT_RELATIVE`] of the median range of the
/// windows that vary at all.
fn mark_flat(codes: &mut [Quality], stats: &[WindowStats]) {
    let mut ranges: Vec<f32> = stats.iter().map(|s| s.range).filter(|&r| r > 0.0).collect();
    if ranges.is_empty() {
        return;
    }
    let middle = ranges.len() / 2;
    let (_, median, _) = ranges.select_nth_unstable_by(middle, f32::total_cmp);
    let floor = f64::from(*median) * FLAT_RELATIVE;
    for (code, s) in codes.iter_mut().zip(stats) {
        if f64::from(s.range) < floor {
            *code = Quality::Flat;
        }
    }
}

#[cfg(test)]
mod tests;
