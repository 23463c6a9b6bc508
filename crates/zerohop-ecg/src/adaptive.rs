//! The adaptive segmentation on the CPU: the stages of [`crate::detect`], then one row per
//! detected beat, cut at a fixed time around its R peak (0.25 s before to 0.45 s after),
//! every output in zerohop memory from the current resource.

use rayon::prelude::*;
use zerohop::TensorView;

use crate::detect::{self, DetectParams, Method};
use crate::error::{invalid, Result};
use crate::segment::{
    curvature_tensor, fill, tensor_of, uninit_rows, uninit_vector, Laps, Params, Segmentation,
};

/// Work run on the detected R peaks while the detection finishes.
pub(crate) type BesideRows<'a> = &'a mut (dyn FnMut(&[i64]) + Send);

/// Runs every stage of the adaptive detector on `signal`.
pub fn segment_adaptive(signal: &[f32], params: &Params) -> Result<Segmentation> {
    segment_adaptive_then(signal, params, None)
}

/// [`segment_adaptive`], with `beside_rows` run on the R peaks beside its last stage (the
/// beats' rows): work that needs the peaks alone overlaps the detection rather than waiting
/// for its end.
pub(crate) fn segment_adaptive_then(
    signal: &[f32],
    params: &Params,
    beside_rows: Option<BesideRows<'_>>,
) -> Result<Segmentation> {
    let p = DetectParams::for_rate(params.rate)?;
    if signal.len() < p.before + p.after {
        return Err(invalid(
            "signal",
            format!(
                "{} samples is shorter than one beat window ({} samples, 0.7 s at {} Hz)",
                signal.len(),
                p.before + p.after,
                p.rate
            ),
        ));
    }
    let mut laps = Laps::new();
    let curv_view = curvature_tensor(signal, p.ricker_width)?;
    let curv: &[f32] = curv_view.as_slice()?;
    laps.lap("curvature");

    // Every element is written below.
    let energy_view = uninit_vector::<f32>(signal.len())?;
    // SAFETY: allocated just above and still private to this function.
    let energy = unsafe { fill::<f32>(&energy_view)? };
    detect::energy(curv, p.integration, energy);
    laps.lap("energy");

    let cands = detect::candidates(energy, &p);
    let positions: Vec<i64> = cands.iter().map(|c| c.0 as i64).collect();
    laps.lap("candidates");

    let beats = detect::decide(&cands, &p);
    let ends: Vec<usize> = beats.iter().map(|&k| cands[k].0).collect();
    let peaks = detect::locate_peaks(curv, &ends, &p);
    laps.lap("decide");

    let rows = match beside_rows {
        Some(work) => rayon::join(|| embed_around(signal, &peaks, &p), || work(&peaks)).0?,
        None => embed_around(signal, &peaks, &p)?,
    };
    laps.lap("embed");

    let rr: Vec<i64> = peaks.windows(2).map(|w| w[1] - w[0]).collect();
    Ok(Segmentation {
        params: params.clone(),
        method: Method::Adaptive,
        curvature: curv_view,
        energy: Some(energy_view),
        gates: tensor_of(&positions)?,
        lengths: tensor_of(&rr)?,
        r_peaks: tensor_of(&peaks)?,
        beat_peaks: rows.peaks,
        beat_starts: rows.starts,
        beat_lengths: rows.lengths,
        beats: rows.beats,
        edge_dropped: rows.dropped,
        timings: laps.timings,
    })
}

/// Beat rows around R peaks, and what they were cut from.
pub struct Rows {
    pub peaks: TensorView,
    pub starts: TensorView,
    pub lengths: TensorView,
    pub beats: TensorView,
    /// Peaks whose window crosses an end of the signal (no row).
    pub dropped: usize,
}

/// The R peaks whose whole window lies inside a signal of `len` samples.
pub fn rows_inside(peaks: &[i64], len: usize, p: &DetectParams) -> Vec<i64> {
    peaks
        .iter()
        .copied()
        .filter(|&r| r >= p.before as i64 && r as u64 + p.after as u64 <= len as u64)
        .collect()
}

/// One row per peak: `signal[r - before .. r + after]`, then zeros to the row width.
pub fn embed_around(signal: &[f32], peaks: &[i64], p: &DetectParams) -> Result<Rows> {
    let kept = rows_inside(peaks, signal.len(), p);
    let span = p.before + p.after;
    let starts: Vec<i64> = kept.iter().map(|&r| r - p.before as i64).collect();
    let width = p.width;
    // Every element of every row is written below.
    let beats = uninit_rows(kept.len(), width)?;
    if !kept.is_empty() {
        // SAFETY: the tensor was allocated just above, holds kept.len() * width f32 and is
        // still private to this function.
        let out = unsafe { beats.as_mut_slice::<f32>()? };
        out.par_chunks_mut(width)
            .zip(starts.par_iter())
            .for_each(|(row, &start)| {
                let s = start as usize;
                row[..span].copy_from_slice(&signal[s..s + span]);
                row[span..].fill(0.0);
            });
    }
    Ok(Rows {
        peaks: tensor_of(&kept)?,
        starts: tensor_of(&starts)?,
        lengths: tensor_of(&vec![span as i64; kept.len()])?,
        beats,
        dropped: peaks.len() - kept.len(),
    })
}

/// Refuses a signal with NaN or infinite samples, naming the first.
pub fn check_finite(signal: &[f32]) -> Result<()> {
    // Chunks checked without an early exit, so the check vectorises: one rayon item per
    // sample cost more than the whole detector's curvature stage.
    const CHUNK: usize = 1 << 16;
    let any_bad = |chunk: &[f32]| chunk.iter().fold(false, |bad, v| bad | !v.is_finite());
    let first_bad_chunk = signal.par_chunks(CHUNK).position_first(any_bad);
    match first_bad_chunk.and_then(|c| {
        let chunk = &signal[c * CHUNK..signal.len().min((c + 1) * CHUNK)];
        chunk
            .iter()
            .position(|v| !v.is_finite())
            .map(|i| c * CHUNK + i)
    }) {
        None => Ok(()),
        Some(at) => {
            let count = signal.par_iter().filter(|v| !v.is_finite()).count();
            Err(invalid(
                "signal",
                format!(
                    "{count} sample(s) are NaN or infinite, the first at sample {at}; fill or \
                     drop them first"
                ),
            ))
        }
    }
}

/// Runs `method` on `signal`, which must hold numbers only: one NaN would spread through the
/// filters and cost the beats around it without a word.
pub fn segment_with(signal: &[f32], params: &Params, method: Method) -> Result<Segmentation> {
    check_finite(signal)?;
    segment_finite(signal, params, method)
}

/// [`segment_with`] on a signal known to be finite (one [`check_finite`] passes).
pub(crate) fn segment_finite(
    signal: &[f32],
    params: &Params,
    method: Method,
) -> Result<Segmentation> {
    match method {
        Method::Adaptive => segment_adaptive(signal, params),
        Method::Blog => crate::segment::segment(signal, params),
    }
}

/// [`segment_finite`], with `beside_rows` run on the R peaks: beside the cutting of the
/// beats' rows for the adaptive detector, after the whole detection for the blog's.
pub(crate) fn segment_finite_then(
    signal: &[f32],
    params: &Params,
    method: Method,
    beside_rows: BesideRows<'_>,
) -> Result<Segmentation> {
    match method {
        Method::Adaptive => segment_adaptive_then(signal, params, Some(beside_rows)),
        Method::Blog => {
            let segmentation = crate::segment::segment(signal, params)?;
            beside_rows(segmentation.r_peaks.as_slice::<i64>()?);
            Ok(segmentation)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{generate, SynthOptions};

    #[test]
    fn every_inside_beat_becomes_a_row_around_its_peak() {
        let p = DetectParams::for_rate(250.0).unwrap();
        let signal: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let rows = embed_around(&signal, &[10, 300, 700, 900], &p).unwrap();
        assert_eq!(rows.dropped, 2, "10 starts before 0, 900 ends after 1000");
        assert_eq!(rows.peaks.to_vec::<i64>().unwrap(), [300, 700]);
        let beats = rows.beats.to_vec::<f32>().unwrap();
        assert_eq!(beats[0], (300 - p.before) as f32);
        assert_eq!(
            beats[p.before], 300.0,
            "the R peak sits `before` into the row"
        );
        assert_eq!(beats[p.before + p.after - 1], (300 + p.after - 1) as f32);
        assert!(beats[p.before + p.after..p.width].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn non_finite_samples_are_refused_with_their_place() {
        let params = Params::for_rate(250.0).unwrap();
        let mut signal = vec![0.5f32; 1000];
        signal[700] = f32::NAN;
        signal[800] = f32::INFINITY;
        for method in [Method::Adaptive, Method::Blog] {
            let err = segment_with(&signal, &params, method).unwrap_err();
            assert!(err.to_string().contains("2 sample(s)"), "{err}");
            assert!(err.to_string().contains("first at sample 700"), "{err}");
        }
    }

    #[test]
    fn a_recording_cut_mid_beat_has_no_beat_wrapped_to_its_start() {
        let rate = 360.0;
        let synth = generate(&SynthOptions {
            rate,
            seconds: 30.0,
            ..Default::default()
        })
        .unwrap();
        // End the recording on an R peak: the circular curvature carries it to the start.
        let end = synth.r_peaks[synth.r_peaks.len() - 3] + 2;
        let seg = segment_adaptive(&synth.signal[..end], &Params::for_rate(rate).unwrap()).unwrap();
        let first = seg.r_peaks.to_vec::<i64>().unwrap()[0];
        assert!(
            (first - synth.r_peaks[0] as i64).abs() < (0.15 * rate) as i64,
            "first detection {first}, first beat {}",
            synth.r_peaks[0]
        );
    }

    #[test]
    fn a_signal_shorter_than_a_beat_window_is_refused_by_name() {
        let params = Params::for_rate(360.0).unwrap();
        let err = segment_adaptive(&[0.0; 100], &params).unwrap_err();
        assert!(
            err.to_string().contains("shorter than one beat window"),
            "{err}"
        );
    }
}
