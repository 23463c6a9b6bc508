//! Synthetic ECG with known R peaks, in the spirit of McSharry et al.'s ECGSYN (IEEE TBME
//! 2003): each beat is a turn of a limit cycle, and the P, Q, R, S and T waves are Gaussian
//! events at fixed phases. This is the model's phase-domain form (no ODE integration), with
//! its RR process (low- and high-frequency heart-rate variability plus jitter), respiratory
//! baseline wander, measurement noise and optional premature ventricular (ectopic) beats.

use std::io::Write;
use std::path::Path;

use crate::error::{invalid, EcgError, Result};

/// Bytes of memory the ECG job needs per sample of a recording: the signal, its curvature and
/// energy, scratch and the beat rows.
pub const JOB_BYTES_PER_SAMPLE: u64 = 32;

/// Refuses, before anything is allocated, a recording of `samples` samples that the ECG job
/// could not hold: one needing more than half of this machine's memory at
/// [`JOB_BYTES_PER_SAMPLE`]. `what` names the recording ("--synthetic 24"). The one rule for
/// the command line, [`generate`] and the Python package alike.
pub fn check_memory(samples: u64, what: &str) -> Result<()> {
    let Some(total) = physical_memory() else {
        return Ok(()); // no way to tell: the allocation will say
    };
    let need = u128::from(samples) * u128::from(JOB_BYTES_PER_SAMPLE);
    if need > u128::from(total / 2) {
        let gib = |bytes: u128| bytes as f64 / f64::from(1u32 << 30);
        return Err(invalid(
            "recording",
            format!(
                "{what}: {} samples need about {:.1} GiB, more than half of this machine's \
                 {:.1} GiB",
                grouped(samples),
                gib(need),
                gib(u128::from(total))
            ),
        ));
    }
    Ok(())
}

/// This machine's physical memory in bytes, where the system says.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf takes a constant name, touches no memory of ours and returns -1 for
        // a name it does not know.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let (pages, size) = (u64::try_from(pages).ok()?, u64::try_from(size).ok()?);
        pages.checked_mul(size)
    }
    #[cfg(not(unix))]
    None
}

/// 2500000000 as "2,500,000,000".
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() * 4 / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub rate: f64,
    pub seconds: f64,
    /// Mean heart rate, beats per minute.
    pub heart_rate: f64,
    /// Standard deviation of beat-to-beat jitter, as a fraction of the RR interval.
    pub jitter: f64,
    /// Gaussian measurement noise, mV (standard deviation).
    pub noise_mv: f64,
    /// Respiratory baseline wander amplitude, mV.
    pub wander_mv: f64,
    /// Probability that a beat is a premature ventricular contraction.
    pub ectopic: f64,
    /// How far the mean heart rate swings over a day, as a fraction of `heart_rate` (0.25:
    /// ±25 %): a 24-hour cosine, fastest at 14:00 and slowest at 02:00 of a recording that
    /// starts at midnight, as a Holter record's does. 0: a steady mean rate.
    pub day_swing: f64,
    pub seed: u64,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            rate: 250.0,
            seconds: 60.0,
            heart_rate: 70.0,
            jitter: 0.03,
            noise_mv: 0.02,
            wander_mv: 0.1,
            ectopic: 0.0,
            day_swing: 0.0,
            seed: 1,
        }
    }
}

/// A generated recording: samples in mV and the sample index of every R peak.
#[derive(Clone, Debug)]
pub struct Synthetic {
    pub signal: Vec<f32>,
    pub r_peaks: Vec<usize>,
    /// Which beats are ectopic (same order as `r_peaks`).
    pub ectopic: Vec<bool>,
}

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let u = self.next_f64().max(1e-300);
        let v = self.next_f64();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// (phase, amplitude mV, width rad) of P, Q, R, S, T for a normal and an ectopic beat.
const NORMAL: [(f64, f64, f64); 5] = [
    (-1.047, 0.15, 0.25),
    (-0.262, -0.12, 0.1),
    (0.0, 1.2, 0.1),
    (0.262, -0.3, 0.1),
    (1.745, 0.3, 0.4),
];
const ECTOPIC: [(f64, f64, f64); 5] = [
    (-1.047, 0.0, 0.25),
    (-0.35, -0.2, 0.2),
    (0.0, 1.6, 0.22),
    (0.4, -0.6, 0.25),
    (1.745, -0.35, 0.45),
];

/// The shortest interval from a beat to an ectopic beat after it, in seconds: the ventricles
/// are refractory for about that long even at high rates (the QT interval at 240 bpm).
const MIN_COUPLING_S: f64 = 0.24;

/// Generates a recording; one that the ECG job could not hold (see [`check_memory`]) is
/// refused before anything is allocated, and a signal the allocator cannot give is an
/// out-of-memory error with the bytes asked for, not an abort.
pub fn generate(options: &SynthOptions) -> Result<Synthetic> {
    let o = options;
    let finite = o.rate.is_finite() && o.seconds.is_finite();
    if !(finite && o.rate >= 50.0 && o.seconds > 0.0 && (20.0..=250.0).contains(&o.heart_rate)) {
        return Err(invalid(
            "synthetic options",
            format!(
                "rate {} Hz (≥ 50), duration {} s (> 0), heart rate {} bpm (20..250), all \
                 finite",
                o.rate, o.seconds, o.heart_rate
            ),
        ));
    }
    let (slowest, fastest) = (
        o.heart_rate * (1.0 - o.day_swing),
        o.heart_rate * (1.0 + o.day_swing),
    );
    if !((0.0..1.0).contains(&o.day_swing) && slowest >= 20.0 && fastest <= 250.0) {
        return Err(invalid(
            "synthetic options",
            format!(
                "day swing {} must be in [0, 1) and keep the heart rate within 20..250 bpm \
                 ({slowest:.0} to {fastest:.0} bpm)",
                o.day_swing
            ),
        ));
    }
    let samples = (o.seconds * o.rate).round();
    // Huge values in exponent form: a hostile 1e300 is not three hundred digits long.
    let short = |x: f64| {
        if x < 1e15 {
            x.to_string()
        } else {
            format!("{x:e}")
        }
    };
    let what = || {
        format!(
            "synthetic ECG of {} s at {} Hz",
            short(o.seconds),
            short(o.rate)
        )
    };
    // Through u64 only below 2^64 (the cast saturates); the check refuses far less than that.
    check_memory(samples.min(u64::MAX as f64) as u64, &what())?;
    let n = usize::try_from(samples as u64)
        .map_err(|_| invalid("recording", format!("{}: too many samples", what())))?;
    let mut rng = Rng(o.seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
    let two_pi = 2.0 * std::f64::consts::PI;

    // Beat times (R peaks) from the RR process, starting half a beat in.
    let mean_rr = 60.0 / o.heart_rate;
    // The mean RR interval at time t (s) of the day.
    let mean_rr_at = |t: f64| {
        if o.day_swing == 0.0 {
            return mean_rr;
        }
        let hours = t / 3600.0;
        mean_rr / (1.0 + o.day_swing * (two_pi * (hours - 14.0) / 24.0).cos())
    };
    let mut beats: Vec<(f64, f64, bool)> = Vec::new(); // (R time, RR to next, ectopic)
    let mut t = mean_rr / 2.0;
    let mut compensate = false;
    while t < o.seconds + 2.0 * mean_rr {
        let modulation = 1.0
            + 0.04 * (two_pi * 0.1 * t).sin()
            + 0.03 * (two_pi * 0.25 * t).sin()
            + o.jitter * rng.normal();
        let mut rr = mean_rr_at(t) * modulation.clamp(0.7, 1.3);
        let is_ectopic = !compensate && rng.next_f64() < o.ectopic;
        if compensate {
            rr *= 1.35;
            compensate = false;
        }
        beats.push((t, rr, false));
        if is_ectopic {
            // The next beat comes early and is followed by a compensatory pause.
            let len = beats.len();
            // Premature, but not before the ventricles have recovered from the beat before.
            beats[len - 1].1 = (rr * 0.65).max(MIN_COUPLING_S);
            compensate = true;
        }
        t += beats.last().expect("just pushed").1;
        if compensate {
            beats.push((t, 0.0, true));
            let rr_next = mean_rr_at(t) * (1.0 + o.jitter * rng.normal()).clamp(0.7, 1.3);
            beats.last_mut().expect("just pushed").1 = rr_next;
            t += rr_next;
        }
    }

    let mut signal = zeroed(n)?;
    for (k, &(r_time, rr, ectopic)) in beats.iter().enumerate() {
        let waves = if ectopic { &ECTOPIC } else { &NORMAL };
        let prev_rr = if k > 0 { beats[k - 1].1 } else { rr };
        // Wave timing follows Bazett's rule (intervals scale with √RR, RR in seconds), as
        // ECGSYN's does: a QRS complex is not four times narrower at 240 bpm than at 60.
        let (clock, prev_clock) = (rr.sqrt(), prev_rr.sqrt());
        // The beat spans phases (-π, π]: before R it runs on the previous interval's clock.
        let start = ((r_time - prev_clock / 2.0) * o.rate).floor().max(0.0) as usize;
        let end = (((r_time + clock / 2.0) * o.rate).ceil() as usize).min(n);
        for (i, sample) in signal.iter_mut().enumerate().take(end).skip(start) {
            let dt = i as f64 / o.rate - r_time;
            let phase = if dt < 0.0 {
                dt / prev_clock
            } else {
                dt / clock
            } * two_pi;
            let mut v = 0.0;
            for &(at, amplitude, width) in waves {
                let d = phase - at;
                v += amplitude * (-d * d / (2.0 * width * width)).exp();
            }
            *sample += v as f32;
        }
    }
    for (i, sample) in signal.iter_mut().enumerate() {
        let t = i as f64 / o.rate;
        let wander = o.wander_mv * ((two_pi * 0.25 * t).sin() + 0.5 * (two_pi * 0.05 * t).sin());
        *sample += (wander + o.noise_mv * rng.normal()) as f32;
    }
    let mut r_peaks = Vec::new();
    let mut ectopic = Vec::new();
    for &(r_time, _, e) in &beats {
        let idx = (r_time * o.rate).round() as usize;
        if idx < n {
            r_peaks.push(idx);
            ectopic.push(e);
        }
    }
    Ok(Synthetic {
        signal,
        r_peaks,
        ectopic,
    })
}

/// `n` zero samples, allocated fallibly.
fn zeroed(n: usize) -> Result<Vec<f32>> {
    let mut signal = Vec::new();
    signal.try_reserve_exact(n).map_err(|e| {
        EcgError::Zerohop(zerohop::Error::OutOfMemory {
            requested: n.saturating_mul(std::mem::size_of::<f32>()),
            device: zerohop::Device::CPU,
            reason: format!("{n} float32 samples of a synthetic ECG: {e}"),
        })
    })?;
    signal.resize(n, 0.0);
    Ok(signal)
}

/// Writes the signal as a one-column CSV with header `mv`, and the R peaks (one sample index
/// per line, header `r_peak`) beside it.
pub fn write_csv(synthetic: &Synthetic, csv: &Path, peaks: Option<&Path>) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| EcgError::Io { path, source }
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(csv).map_err(io(csv))?);
    writeln!(out, "mv").map_err(io(csv))?;
    for v in &synthetic.signal {
        writeln!(out, "{v:.4}").map_err(io(csv))?;
    }
    out.flush().map_err(io(csv))?;
    if let Some(peaks) = peaks {
        let mut out = std::io::BufWriter::new(std::fs::File::create(peaks).map_err(io(peaks))?);
        writeln!(out, "r_peak").map_err(io(peaks))?;
        for p in &synthetic.r_peaks {
            writeln!(out, "{p}").map_err(io(peaks))?;
        }
        out.flush().map_err(io(peaks))?;
    }
    Ok(())
}

/// Detection quality against known R peaks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accuracy {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
}

impl Accuracy {
    /// TP / (TP + FN).
    pub fn sensitivity(&self) -> f64 {
        self.true_positives as f64 / (self.true_positives + self.false_negatives).max(1) as f64
    }
    /// TP / (TP + FP).
    pub fn positive_predictive_value(&self) -> f64 {
        self.true_positives as f64 / (self.true_positives + self.false_positives).max(1) as f64
    }
}

/// Matches detected peaks to true peaks within `tolerance` samples (each used once), ignoring
/// both lists within `margin` samples of either end of a recording of `len` samples.
pub fn score(
    detected: &[f64],
    truth: &[usize],
    tolerance: f64,
    margin: usize,
    len: usize,
) -> Accuracy {
    match_beats(detected, truth, tolerance, margin, len).0
}

/// [`score`], and which true peaks it matched: one flag per entry of `truth`, in its order
/// (false for those within `margin` of an end), so a caller can count per beat class with
/// the same matching. `truth` in time order, as annotation files give it.
pub fn match_beats(
    detected: &[f64],
    truth: &[usize],
    tolerance: f64,
    margin: usize,
    len: usize,
) -> (Accuracy, Vec<bool>) {
    let inside = |p: f64| p >= margin as f64 && p < (len.saturating_sub(margin)) as f64;
    let detected: Vec<f64> = detected.iter().copied().filter(|&p| inside(p)).collect();
    // (position in `truth`, sample) of the peaks that count.
    let counted: Vec<(usize, f64)> = truth
        .iter()
        .map(|&p| p as f64)
        .enumerate()
        .filter(|&(_, p)| inside(p))
        .collect();
    let mut found = vec![false; truth.len()];
    let (mut i, mut j, mut tp) = (0, 0, 0);
    while i < detected.len() && j < counted.len() {
        let d = detected[i] - counted[j].1;
        if d.abs() <= tolerance {
            found[counted[j].0] = true;
            tp += 1;
            i += 1;
            j += 1;
        } else if d < 0.0 {
            i += 1;
        } else {
            j += 1;
        }
    }
    let accuracy = Accuracy {
        true_positives: tp,
        false_positives: detected.len() - tp,
        false_negatives: counted.len() - tp,
    };
    (accuracy, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_beats_flags_each_true_peak_score_counts() {
        // 0 and 1000 lie in the margins; 300 has no detection near it; 700 has two.
        let truth = [0, 100, 300, 500, 700, 1000];
        let detected = [1.0, 102.0, 498.0, 699.0, 705.0, 900.0];
        let (accuracy, found) = match_beats(&detected, &truth, 5.0, 50, 1001);
        assert_eq!(found, [false, true, false, true, true, false]);
        assert_eq!(accuracy.true_positives, 3);
        assert_eq!(accuracy.false_positives, 2); // 705 and 900
        assert_eq!(accuracy.false_negatives, 1); // 300
        let pooled = score(&detected, &truth, 5.0, 50, 1001);
        assert_eq!(pooled.true_positives, accuracy.true_positives);
        assert_eq!(pooled.false_positives, accuracy.false_positives);
    }

    fn bpm_between(s: &Synthetic, rate: f64, from_h: f64, to_h: f64) -> f64 {
        let (from, to) = (
            (from_h * 3600.0 * rate) as usize,
            (to_h * 3600.0 * rate) as usize,
        );
        let beats = s.r_peaks.iter().filter(|&&r| r >= from && r < to).count();
        beats as f64 / (to_h - from_h) / 60.0
    }

    #[test]
    fn the_heart_rate_swings_over_the_day() {
        let rate = 50.0;
        let day = generate(&SynthOptions {
            rate,
            seconds: 24.0 * 3600.0,
            heart_rate: 70.0,
            day_swing: 0.3,
            ..Default::default()
        })
        .unwrap();
        let (night, afternoon) = (
            bpm_between(&day, rate, 1.0, 3.0),
            bpm_between(&day, rate, 13.0, 15.0),
        );
        // 70 × (1 ± 0.3 · cos(±15°)) ≈ 49.7 and 90.3 bpm
        assert!((night - 49.7).abs() < 2.0, "{night} bpm at night");
        assert!(
            (afternoon - 90.3).abs() < 2.5,
            "{afternoon} bpm in the afternoon"
        );
        let steady = SynthOptions {
            seconds: 600.0,
            ..Default::default()
        };
        let swung = SynthOptions {
            day_swing: 0.0,
            ..steady.clone()
        };
        assert_eq!(
            generate(&steady).unwrap().r_peaks,
            generate(&swung).unwrap().r_peaks
        );
    }

    #[test]
    fn a_recording_the_job_could_not_hold_is_refused_with_its_numbers() {
        for seconds in [1e7, 1e9, 1e300] {
            let err = generate(&SynthOptions {
                seconds,
                ..Default::default()
            })
            .unwrap_err()
            .to_string();
            // Huge durations in exponent form, the others as plain numbers.
            let duration = if seconds < 1e15 {
                format!("{seconds} s")
            } else {
                format!("{seconds:e} s")
            };
            assert!(
                err.starts_with(&format!("invalid recording: synthetic ECG of {duration}"))
                    && err.contains(" samples need about ")
                    && err.contains(" GiB, more than half of this machine's "),
                "{err}"
            );
        }
        let err = check_memory(2_500_000_000, "--synthetic 9").unwrap_err();
        assert!(
            err.to_string()
                .contains("--synthetic 9: 2,500,000,000 samples need about 74.5 GiB")
                || physical_memory().unwrap() >= 160 << 30,
            "{err}"
        );
        assert!(check_memory(1_000_000, "a minute").is_ok());
        for seconds in [f64::INFINITY, f64::NAN] {
            let err = generate(&SynthOptions {
                seconds,
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.to_string().contains("all finite"), "{err}");
        }
    }

    #[test]
    fn a_signal_the_allocator_cannot_give_is_an_out_of_memory_error() {
        let n = usize::MAX / 2;
        let Err(EcgError::Zerohop(zerohop::Error::OutOfMemory { requested, .. })) = zeroed(n)
        else {
            panic!("allocated {n} samples");
        };
        assert_eq!(requested, usize::MAX);
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(grouped(999), "999");
    }

    #[test]
    fn a_swing_that_leaves_the_heart_rates_is_refused() {
        for (heart_rate, day_swing) in [(70.0, 1.0), (70.0, -0.1), (200.0, 0.3), (25.0, 0.3)] {
            let err = generate(&SynthOptions {
                heart_rate,
                day_swing,
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.to_string().contains("day swing"), "{err}");
        }
    }
}
