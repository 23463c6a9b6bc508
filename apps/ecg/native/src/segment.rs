//! Beat detection and segmentation (`zerohop_ecg::segment_with`, its CUDA kernels), the
//! synthetic recordings, the scoring of detected peaks and the job's memory rule.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::{DType, DeviceKind, TensorView};
use zerohop_ecg::quality::segment_judged;
use zerohop_ecg::segment::Params;
use zerohop_ecg::synth::{generate, match_beats as run_match, write_csv, SynthOptions};
use zerohop_ecg::{segment_with, Method};
use zerohop_pyo3::args::{extract_items, MAX_NUMBERS};

use crate::csv::params;
use crate::handoff::{tensor_capsule, view_of};
use crate::{to_py, zerohop_error};

/// The signal as a compact 1-d float32 host or device view, ready for work on `stream`:
/// float32 producers are shared; float64 and other real host inputs (lists, NumPy float64
/// from WFDB readers) are converted.
pub(crate) fn signal_view(
    py: Python<'_>,
    signal: &Bound<'_, PyAny>,
    stream: Option<zerohop::handoff::CudaStream>,
) -> PyResult<TensorView> {
    if let Ok(view) = view_of(py, signal, stream) {
        if view.dtype() == DType::F32 && view.ndim() == 1 {
            return Ok(view);
        }
        if view.device().kind == DeviceKind::Cuda {
            return Err(PyValueError::new_err(format!(
                "signal must be 1-d float32 on the device, got {} of shape {:?}",
                view.dtype(),
                view.shape()
            )));
        }
    }
    let converted = py
        .import("numpy")?
        .call_method1("asarray", (signal, "float32"))
        .map_err(|e| PyValueError::new_err(format!("signal must be 1-d real numbers: {e}")))?;
    let view = view_of(py, &converted, None)?;
    if view.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "signal must be 1-d, got shape {:?}",
            view.shape()
        )));
    }
    Ok(view)
}

/// Segments a 1-d signal (any DLPack producer; a table's column is a view; other real dtypes
/// and lists are converted to float32) with `method` ("adaptive": R peaks at any rate from 30
/// to 250 bpm, one beat row per R peak; "blog": the Part 3 blog's gates). Returns a dict of
/// DLPack capsules — curvature, energy (adaptive), gates (blog: gate positions; adaptive:
/// candidate positions), lengths (blog: gate to gate; adaptive: RR intervals), r_peaks (every
/// detected R peak), beat_peaks (the R peak of each row), beat_starts, beat_lengths, beats
/// (rows) — plus "stream" (the CUDA stream that produces them, None on the host),
/// "edge_dropped" (beats whose window crosses an end), "method", "params" and "timings"
/// [(stage, seconds)]. `device="cuda:N"` runs the CUDA kernels on `stream` (default the
/// legacy stream; a host signal is copied over once); the results equal the CPU's bit for
/// bit. `quality=W` (host signals): also judges the signal's quality in W-second windows
/// from the detected R peaks, as `assess_quality` does, under "quality" (the rules that read
/// the signal alone beside the detection, the beats' rule beside its last stage). The GIL is
/// released while it runs.
#[pyfunction]
#[pyo3(signature = (signal, rate, *, method="adaptive", device="cpu", stream=None, quality=None))]
fn segment<'py>(
    py: Python<'py>,
    signal: &Bound<'py, PyAny>,
    rate: f64,
    method: &str,
    device: &str,
    stream: Option<usize>,
    quality: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let method = Method::parse(method).map_err(to_py)?;
    let p = Params::for_rate(rate).map_err(to_py)?;
    let place = zerohop::Device::parse(device).map_err(zerohop_error)?;
    let mut judged = None;
    let (seg, stream) = match place.kind {
        DeviceKind::Cpu => {
            let view = signal_view(py, signal, None)?;
            let values = view.as_slice::<f32>().map_err(zerohop_error)?;
            let (seg, assessment) = py
                .detach(|| {
                    let Some(window) = quality else {
                        return Ok((segment_with(values, &p, method)?, None));
                    };
                    let judged = segment_judged(values, &p, method, window)?;
                    let assessment = (judged.assessment, window, judged.seconds);
                    Ok((judged.segmentation, Some(assessment)))
                })
                .map_err(to_py)?;
            judged = assessment;
            (seg, None)
        }
        DeviceKind::Cuda if quality.is_some() => {
            return Err(PyValueError::new_err(
                "quality= needs a host signal: on a GPU, judge it with assess_quality on a \
                 host copy",
            ))
        }
        DeviceKind::Cuda => {
            let stream = crate::cuda_stream(stream)?;
            // A device signal's producer orders its work before the kernels' stream.
            let view = signal_view(py, signal, stream.cuda_stream())?;
            let seg = py
                .detach(|| zerohop_ecg::gpu::segment_cuda_with(&view, &p, method, place.id, stream))
                .map_err(to_py)?;
            (seg, Some(stream.raw()))
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "device {device:?} must be 'cpu' or 'cuda:N'"
            )))
        }
    };
    let out = PyDict::new(py);
    let mut outputs = vec![
        ("curvature", seg.curvature),
        ("gates", seg.gates),
        ("lengths", seg.lengths),
        ("r_peaks", seg.r_peaks),
        ("beat_peaks", seg.beat_peaks),
        ("beat_starts", seg.beat_starts),
        ("beat_lengths", seg.beat_lengths),
        ("beats", seg.beats),
    ];
    if let Some(energy) = seg.energy {
        outputs.push(("energy", energy));
    }
    for (name, v) in outputs {
        out.set_item(name, tensor_capsule(py, &v)?)?;
    }
    out.set_item("stream", stream)?;
    out.set_item("method", method.name())?;
    out.set_item("edge_dropped", seg.edge_dropped)?;
    out.set_item("params", params(py, rate, method.name())?)?;
    out.set_item("timings", seg.timings)?;
    if let Some((a, window, seconds)) = judged {
        let assessment = crate::quality::assessment_dict(py, &a, window, seconds)?;
        out.set_item("quality", assessment)?;
    }
    Ok(out)
}

/// A synthetic ECG (ECGSYN-style) with known R peaks: (signal in mV as float32, R peaks as
/// int64, as DLPack capsules; ectopic flags). With `csv`, also writes it (header `mv`), and
/// the R peaks to `peaks`. `day_swing` swings the mean heart rate over a 24-hour day by that
/// fraction (0.25: ±25 %, fastest at 14:00 and slowest at 02:00 of a recording starting at
/// midnight).
#[pyfunction]
#[pyo3(signature = (seconds, *, rate=250.0, heart_rate=70.0, noise_mv=0.02, wander_mv=0.1, ectopic=0.0, day_swing=0.0, seed=1, csv=None, peaks=None))]
#[allow(clippy::too_many_arguments)]
fn synthesize<'py>(
    py: Python<'py>,
    seconds: f64,
    rate: f64,
    heart_rate: f64,
    noise_mv: f64,
    wander_mv: f64,
    ectopic: f64,
    day_swing: f64,
    seed: u64,
    csv: Option<PathBuf>,
    peaks: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = SynthOptions {
        rate,
        seconds,
        heart_rate,
        noise_mv,
        wander_mv,
        ectopic,
        day_swing,
        seed,
        ..Default::default()
    };
    let synthetic = py.detach(|| generate(&options)).map_err(to_py)?;
    if let Some(csv) = csv {
        py.detach(|| write_csv(&synthetic, &csv, peaks.as_deref()))
            .map_err(to_py)?;
    }
    let n = synthetic.signal.len() as i64;
    let signal = TensorView::from_slice(&synthetic.signal, &[n]).map_err(zerohop_error)?;
    let r: Vec<i64> = synthetic.r_peaks.iter().map(|&p| p as i64).collect();
    let peaks_view = TensorView::from_slice(&r, &[r.len() as i64]).map_err(zerohop_error)?;
    Ok((
        tensor_capsule(py, &signal)?,
        tensor_capsule(py, &peaks_view)?,
        synthetic.ectopic,
    )
        .into_pyobject(py)?
        .into_any())
}

/// (sensitivity, positive predictive value, TP, FP, FN) of detected peaks against true ones,
/// matched within `tolerance` samples, ignoring `margin` samples at both ends.
#[pyfunction]
fn score(
    detected: &Bound<'_, PyAny>,
    truth: &Bound<'_, PyAny>,
    tolerance: f64,
    margin: usize,
    length: usize,
) -> PyResult<(f64, f64, usize, usize, usize)> {
    let (sens, ppv, tp, fp, fn_, _) = match_beats(detected, truth, tolerance, margin, length)?;
    Ok((sens, ppv, tp, fp, fn_))
}

/// `score`'s five figures and which true peaks it matched (a list of bool, one per entry of
/// `truth` in its order; False within `margin` of an end): per-class counts with the same
/// one-to-one matching.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn match_beats(
    detected: &Bound<'_, PyAny>,
    truth: &Bound<'_, PyAny>,
    tolerance: f64,
    margin: usize,
    length: usize,
) -> PyResult<(f64, f64, usize, usize, usize, Vec<bool>)> {
    let detected: Vec<f64> = extract_items(detected, "detected", MAX_NUMBERS)?;
    let truth: Vec<usize> = extract_items(truth, "truth", MAX_NUMBERS)?;
    let (a, found) = run_match(&detected, &truth, tolerance, margin, length);
    Ok((
        a.sensitivity(),
        a.positive_predictive_value(),
        a.true_positives,
        a.false_positives,
        a.false_negatives,
        found,
    ))
}

/// Raises ValueError, naming `what` and the numbers, when a recording of `samples` samples
/// needs more than half of this machine's memory in the ECG job (32 bytes a sample): the rule
/// `synthesize` applies too.
#[pyfunction]
fn check_memory(samples: u64, what: &str) -> PyResult<()> {
    zerohop_ecg::synth::check_memory(samples, what).map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(segment, m)?)?;
    m.add_function(wrap_pyfunction!(synthesize, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(match_beats, m)?)?;
    m.add_function(wrap_pyfunction!(check_memory, m)?)
}
