//! The adaptive detector on the GPU: curvature, energy and candidates as kernels, the decision
//! on the host from the candidates alone (the function the CPU runs), then the R peaks and the
//! beat rows as kernels. Results equal the CPU's bit for bit.

use zerohop::{DType, Stream, TensorView};

use super::{
    arg, curvature_on, download, embed_on, kernels, launch, maxima_on, ptr, rising_edge_indices,
    signal_on_device, upload, Kernels, Laps, THREADS,
};
use crate::adaptive::rows_inside;
use crate::detect::{self, DetectParams, Method};
use crate::error::{invalid, Result};
use crate::segment::{Params, Segmentation};

/// Every stage of [`crate::adaptive::segment_adaptive`] on `device`, on `stream`.
pub fn segment_adaptive_cuda(
    signal: &TensorView,
    params: &Params,
    device: i32,
    stream: Stream,
) -> Result<Segmentation> {
    let n = super::check_signal(signal, device)?;
    let p = DetectParams::for_rate(params.rate)?;
    if n < p.before + p.after {
        return Err(invalid(
            "signal",
            format!(
                "{n} samples is shorter than one beat window ({} samples, 0.7 s at {} Hz)",
                p.before + p.after,
                p.rate
            ),
        ));
    }
    let k = kernels(device)?;
    let mut laps = Laps::new(device, stream)?;
    let x = signal_on_device(signal, n, device, stream)?;
    laps.lap("host→device")?;
    let curvature = curvature_on(&k, &mut laps, &x, n, p.ricker_width)?;
    laps.lap("curvature")?;
    let energy = energy_on(&k, &mut laps, &curvature, n, p.integration)?;
    laps.lap("energy")?;

    let (flags, outputs) = maxima_on(&k, device, &energy, n, p.candidate_window, stream)?;
    let (gate_indices, total) = rising_edge_indices(&k, &mut laps, &flags, outputs)?;
    laps.hold(flags);
    let shift = p.gate_to_candidate();
    let values = gather_on(&k, device, &energy, &gate_indices, total, shift, stream)?;
    // Downloads wait for the stream, so nothing queued still reads what they return.
    let gates: Vec<i64> = download(device, ptr(&gate_indices), total, stream)?;
    let values: Vec<f32> = download(device, ptr(&values), total, stream)?;
    let cands: Vec<(usize, f32)> = gates
        .iter()
        .zip(&values)
        .map(|(&g, &v)| (g as usize + shift, v))
        .filter(|&(pos, v)| p.is_candidate(pos, v))
        .collect();
    laps.lap("candidates")?;

    let beats = detect::decide(&cands, &p);
    let ends: Vec<i64> = beats.iter().map(|&b| cands[b].0 as i64).collect();
    let r_peaks = locate_on(&k, &mut laps, &curvature, n, &ends, &p)?;
    laps.lap("decide")?;

    let peaks: Vec<i64> = download(device, ptr(&r_peaks), ends.len(), stream)?;
    let kept = rows_inside(&peaks, n, &p);
    let starts: Vec<i64> = kept.iter().map(|&r| r - p.before as i64).collect();
    let span = (p.before + p.after) as i64;
    let beat_starts = upload(device, &starts, DType::I64, stream)?;
    let beat_lengths = upload(device, &vec![span; kept.len()], DType::I64, stream)?;
    let beats = embed_on(
        &k,
        device,
        &x,
        (&beat_starts, &beat_lengths),
        kept.len(),
        p.width,
        stream,
    )?;
    laps.lap("embed")?;
    let timings = laps.finish()?;

    let positions: Vec<i64> = cands.iter().map(|c| c.0 as i64).collect();
    let rr: Vec<i64> = peaks.windows(2).map(|w| w[1] - w[0]).collect();
    Ok(Segmentation {
        params: params.clone(),
        method: Method::Adaptive,
        curvature,
        energy: Some(energy),
        gates: upload(device, &positions, DType::I64, stream)?,
        lengths: upload(device, &rr, DType::I64, stream)?,
        r_peaks,
        beat_peaks: upload(device, &kept, DType::I64, stream)?,
        beat_starts,
        beat_lengths,
        beats,
        edge_dropped: peaks.len() - kept.len(),
        timings,
    })
}

/// The integrated squared slope of the curvature (`detect::squared_slope`, `integrate`).
fn energy_on(
    k: &Kernels,
    laps: &mut Laps,
    curvature: &TensorView,
    n: usize,
    window: usize,
) -> Result<TensorView> {
    let (device, stream) = (laps.device, laps.stream);
    let slope = super::device_tensor(device, DType::F32, n, stream)?;
    let energy = super::device_tensor(device, DType::F32, n, stream)?;
    let blocks = (n as u64).div_ceil(THREADS as u64);
    let (mut cp, mut nn, mut sp, mut w, mut ep) = (
        ptr(curvature),
        n as i64,
        ptr(&slope),
        window as i32,
        ptr(&energy),
    );
    // SAFETY: squared_slope(curv: f32*, n: i64, slope: f32*) and integrate(slope: f32*, w:
    // i32, n: i64, energy: f32*), every buffer n floats on this device.
    unsafe {
        launch(
            k.squared_slope,
            blocks,
            THREADS,
            0,
            stream,
            &mut [arg(&mut cp), arg(&mut nn), arg(&mut sp)],
        )?;
        launch(
            k.integrate,
            blocks,
            THREADS,
            0,
            stream,
            &mut [arg(&mut sp), arg(&mut w), arg(&mut nn), arg(&mut ep)],
        )?;
    }
    laps.hold(slope);
    Ok(energy)
}

/// `values[c] = energy[indices[c] + shift]` for the `count` candidates.
fn gather_on(
    k: &Kernels,
    device: i32,
    energy: &TensorView,
    indices: &TensorView,
    count: usize,
    shift: usize,
    stream: Stream,
) -> Result<TensorView> {
    let values = super::device_tensor(device, DType::F32, count, stream)?;
    let (mut src, mut idx, mut c, mut sh, mut out) = (
        ptr(energy),
        ptr(indices),
        count as i64,
        shift as i64,
        ptr(&values),
    );
    // SAFETY: gather_shifted(src: f32*, idx: i64* of count, count, shift, values: f32* of
    // count); every idx + shift is a local-maximum centre, inside the energy.
    unsafe {
        launch(
            k.gather_shifted,
            (count as u64).div_ceil(THREADS as u64),
            THREADS,
            0,
            stream,
            &mut [
                arg(&mut src),
                arg(&mut idx),
                arg(&mut c),
                arg(&mut sh),
                arg(&mut out),
            ],
        )?
    };
    Ok(values)
}

/// The R peak of each beat (`detect::locate_peaks`), as a device tensor.
fn locate_on(
    k: &Kernels,
    laps: &mut Laps,
    curvature: &TensorView,
    n: usize,
    ends: &[i64],
    p: &DetectParams,
) -> Result<TensorView> {
    let (device, stream) = (laps.device, laps.stream);
    let ends_view = upload(device, ends, DType::I64, stream)?;
    let peaks = super::device_tensor(device, DType::I64, ends.len(), stream)?;
    let (mut cp, mut nn, mut ep, mut c, mut w, mut delay, mut pp) = (
        ptr(curvature),
        n as i64,
        ptr(&ends_view),
        ends.len() as i64,
        p.integration as i32,
        p.curvature_delay() as i64,
        ptr(&peaks),
    );
    // SAFETY: locate_peaks(curv: f32* of n, n, ends: i64* of count, count, w, delay, peaks:
    // i64* of count); the kernel clips every window to the signal.
    unsafe {
        launch(
            k.locate_peaks,
            (ends.len() as u64).div_ceil(THREADS as u64),
            THREADS,
            0,
            stream,
            &mut [
                arg(&mut cp),
                arg(&mut nn),
                arg(&mut ep),
                arg(&mut c),
                arg(&mut w),
                arg(&mut delay),
                arg(&mut pp),
            ],
        )?
    };
    laps.hold(ends_view);
    Ok(peaks)
}
