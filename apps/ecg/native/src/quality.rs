//! Signal quality per window (`zerohop_ecg::quality`): which stretches of a recording hold an
//! ECG its detected beats can be trusted in.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::{DType, DeviceKind, TensorView};
use zerohop_ecg::quality::{assess, Assessment, Quality, WindowStats, WINDOW_S};

use crate::handoff::{tensor_capsule, view_of};
use crate::segment::signal_view;
use crate::{to_py, zerohop_error};

/// The R peaks as a 1-d int64 host view: int64 producers shared, other integers converted.
fn peaks_view(py: Python<'_>, peaks: &Bound<'_, PyAny>) -> PyResult<TensorView> {
    if let Ok(view) = view_of(py, peaks, None) {
        let on_host = view.device().kind != DeviceKind::Cuda;
        if on_host && view.dtype() == DType::I64 && view.ndim() == 1 {
            return Ok(view);
        }
    }
    let converted = py
        .import("numpy")?
        .call_method1("asarray", (peaks, "int64"))
        .map_err(|e| PyValueError::new_err(format!("r_peaks must be 1-d integers: {e}")))?;
    let view = view_of(py, &converted, None)?;
    if view.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "r_peaks must be 1-d, got shape {:?}",
            view.shape()
        )));
    }
    Ok(view)
}

/// The rows of the "figures" array, in order.
const FIGURES: [&str; 5] = ["range", "clipped", "kurtosis", "band", "correlation"];

fn capsule_of<'py, T: zerohop::Element>(
    py: Python<'py>,
    values: &[T],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let view = TensorView::from_slice(values, &shape).map_err(zerohop_error)?;
    Ok(tensor_capsule(py, &view)?.into_any())
}

/// Judges each window of `window` seconds (default 10; a last, shorter window joins the one
/// before) of a 1-d host signal sampled at `rate` Hz, with the detector's ascending R peaks
/// (sample indices): good, flat, clipped, no QRS-like energy or too noisy (the rules are
/// `zerohop_ecg::quality`'s). Returns a dict: "window" (samples a window), "window_s",
/// "codes" (uint8 per window: 0 good, 1 flat, 2 clipped, 3 no QRS-like energy, 4 too noisy),
/// "figures" (float32, 5 × windows: the range, clipped share, kurtosis, band frequency and
/// correlation each window's rules read), "counts" (int64, 2 × windows: each window's
/// first sample, and its detected beats), as DLPack capsules; "figure_names"; "reasons" (the name of each code), "spans" [(start, end, reason)]: the
/// runs of unreliable windows, each with its commonest reason; "seconds" it took. The GIL is
/// released while it runs.
#[pyfunction]
#[pyo3(signature = (signal, rate, r_peaks, *, window=10.0))]
fn assess_quality<'py>(
    py: Python<'py>,
    signal: &Bound<'py, PyAny>,
    rate: f64,
    r_peaks: &Bound<'py, PyAny>,
    window: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let signal = signal_view(py, signal, None)?;
    if signal.device().kind == DeviceKind::Cuda {
        return Err(PyValueError::new_err(
            "signal must be in host memory for the quality assessment (copy it over first)",
        ));
    }
    let peaks = peaks_view(py, r_peaks)?;
    let values = signal.as_slice::<f32>().map_err(zerohop_error)?;
    let peak_values = peaks.as_slice::<i64>().map_err(zerohop_error)?;
    let started = std::time::Instant::now();
    let a = py
        .detach(|| assess(values, rate, peak_values, window))
        .map_err(to_py)?;
    assessment_dict(py, &a, window, started.elapsed().as_secs_f64())
}

/// The dict `assess_quality` returns, for an assessment of `window`-second windows that took
/// `seconds` (also `segment(..., quality=window)`'s "quality").
pub fn assessment_dict<'py>(
    py: Python<'py>,
    a: &Assessment,
    window: f64,
    seconds: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let codes: Vec<u8> = a.codes.iter().map(|&c| c as u8).collect();
    let starts: Vec<i64> = (0..a.windows())
        .map(|k| a.window_span(k).0 as i64)
        .collect();
    let out = PyDict::new(py);
    out.set_item("window", a.window)?;
    out.set_item("window_s", window)?;
    out.set_item("codes", capsule_of(py, &codes, &[codes.len()])?)?;
    // One array per element type, a row per figure: three hand-offs where one a figure
    // would be eight, a good part of a short record's whole assessment.
    let n = a.stats.len();
    let mut figures: Vec<f32> = Vec::with_capacity(FIGURES.len() * n);
    let rows: [fn(&WindowStats) -> f32; FIGURES.len()] = [
        |s| s.range,
        |s| s.clipped,
        |s| s.kurtosis,
        |s| s.band,
        |s| s.correlation,
    ];
    for figure in rows {
        figures.extend(a.stats.iter().map(figure));
    }
    out.set_item("figures", capsule_of(py, &figures, &[FIGURES.len(), n])?)?;
    let mut counts: Vec<i64> = starts;
    counts.extend(a.stats.iter().map(|s| i64::from(s.beats)));
    out.set_item("counts", capsule_of(py, &counts, &[2, n])?)?;
    let reasons: Vec<&str> = Quality::ALL.iter().map(|q| q.name()).collect();
    out.set_item("reasons", reasons)?;
    out.set_item("figure_names", FIGURES.to_vec())?;
    let spans: Vec<(usize, usize, &str)> = a
        .unreliable_spans()
        .iter()
        .map(|s| (s.start, s.end, s.reason.name()))
        .collect();
    out.set_item("spans", spans)?;
    out.set_item("seconds", seconds)?;
    Ok(out)
}

// The signature's default, written out so Python's signature shows it, is the crate's.
const _: () = assert!(WINDOW_S == 10.0);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(assess_quality, m)?)
}
