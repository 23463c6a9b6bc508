//! `zerohop._zerohop.ecg`: the Rust stages of the ECG pipeline for the Python job.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::DType;
use zerohop_ecg::csv::{read_csv as read, CsvOptions, EmptyField, NanPolicy};
use zerohop_ecg::segment::{segment as run_segment, Params};
use zerohop_ecg::synth::{generate, score as run_score, write_csv, SynthOptions};
use zerohop_ecg::EcgError;

use crate::table::PyTable;
use crate::tensor::PyTensor;

fn to_py(err: EcgError) -> PyErr {
    match err {
        EcgError::Io { .. } => PyOSError::new_err(err.to_string()),
        EcgError::Zerohop(e) => crate::errors::to_py(e),
        other => PyValueError::new_err(other.to_string()),
    }
}

fn parse_empty(empty: Option<&Bound<'_, PyAny>>) -> PyResult<EmptyField> {
    let Some(e) = empty else {
        return Ok(EmptyField::Error);
    };
    match e.extract::<String>() {
        Ok(word) if word == "error" => Ok(EmptyField::Error),
        Ok(word) if word == "nan" => Ok(EmptyField::Nan),
        Ok(word) => Err(PyValueError::new_err(format!(
            "empty={word:?} must be 'error', 'nan' or a number"
        ))),
        Err(_) => Ok(EmptyField::Value(e.extract::<f32>()?)),
    }
}

/// Reads a numeric CSV into a zerohop Table of float32 columns, on all cores.
/// `empty`: "error" (default), "nan", or a number; `nan`: "reject" (default) or "allow".
#[pyfunction]
#[pyo3(signature = (path, *, columns=None, header=None, delimiter=",", empty=None, nan="reject"))]
fn read_csv(
    py: Python<'_>,
    path: PathBuf,
    columns: Option<Vec<String>>,
    header: Option<bool>,
    delimiter: &str,
    empty: Option<&Bound<'_, PyAny>>,
    nan: &str,
) -> PyResult<PyTable> {
    let delimiter = match delimiter.as_bytes() {
        [d] => *d,
        _ => {
            return Err(PyValueError::new_err(
                "delimiter must be one ASCII character",
            ))
        }
    };
    let nan = match nan {
        "reject" => NanPolicy::Reject,
        "allow" => NanPolicy::Allow,
        other => {
            return Err(PyValueError::new_err(format!(
                "nan={other:?} must be 'reject' or 'allow'"
            )))
        }
    };
    let options = CsvOptions {
        has_header: header,
        delimiter,
        empty: parse_empty(empty)?,
        nan,
        columns: columns.unwrap_or_default(),
    };
    let table = py.detach(|| read(&path, &options)).map_err(to_py)?;
    Ok(PyTable::from_table(table))
}

/// The blog's windows scaled to `rate` Hz, as a dict.
#[pyfunction]
fn params(py: Python<'_>, rate: f64) -> PyResult<Bound<'_, PyDict>> {
    let p = Params::for_rate(rate).map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("rate", p.rate)?;
    d.set_item("ricker_width", p.ricker_width)?;
    d.set_item("window", p.window)?;
    d.set_item("min_length", p.min_length)?;
    d.set_item("max_length", p.max_length)?;
    d.set_item("width", p.width)?;
    d.set_item("gate_to_peak", p.gate_to_peak())?;
    Ok(d)
}

/// Segments a 1-d float32 signal (any DLPack producer; a table's column is a view). Returns
/// a dict of zerohop tensors (curvature, gates, lengths, beat_starts, beat_lengths, beats)
/// plus "params" and "timings" [(stage, seconds)]. `device="cuda:N"` runs the CUDA kernels
/// on `stream` (default the legacy stream; a host signal is copied over once) and returns
/// device tensors carrying that stream; the results equal the CPU's bit for bit. The GIL is
/// released while it runs.
#[pyfunction]
#[pyo3(signature = (signal, rate, *, device="cpu", stream=None))]
fn segment<'py>(
    py: Python<'py>,
    signal: &Bound<'py, PyAny>,
    rate: f64,
    device: &str,
    stream: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let tensor = py
        .import("zerohop")?
        .getattr("from_dlpack")?
        .call1((signal,))?;
    let source = tensor.cast::<PyTensor>()?.get();
    let view = source.view.clone();
    if view.dtype() != DType::F32 || view.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "signal must be 1-d float32, got {} of shape {:?}",
            view.dtype(),
            view.shape()
        )));
    }
    let p = Params::for_rate(rate).map_err(to_py)?;
    let place = zerohop::Device::parse(device).map_err(crate::errors::to_py)?;
    let (seg, stream) = match place.kind {
        zerohop::DeviceKind::Cpu => {
            let values = view.as_slice::<f32>().map_err(crate::errors::to_py)?;
            (py.detach(|| run_segment(values, &p)).map_err(to_py)?, 0)
        }
        zerohop::DeviceKind::Cuda => {
            let stream = stream.unwrap_or(zerohop::cuda::LEGACY_STREAM.0);
            if view.device().kind == zerohop::DeviceKind::Cuda && source.stream() != stream {
                // The kernels read data produced on the signal's stream.
                zerohop::cuda::order_streams(
                    place.id,
                    zerohop::Stream(source.stream()),
                    zerohop::Stream(stream),
                )
                .map_err(crate::errors::to_py)?;
            }
            let seg = py
                .detach(|| {
                    zerohop_ecg::gpu::segment_cuda(&view, &p, place.id, zerohop::Stream(stream))
                })
                .map_err(to_py)?;
            (seg, stream)
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "device {device:?} must be 'cpu' or 'cuda:N'"
            )))
        }
    };
    let out = PyDict::new(py);
    for (name, v) in [
        ("curvature", seg.curvature),
        ("gates", seg.gates),
        ("lengths", seg.lengths),
        ("beat_starts", seg.beat_starts),
        ("beat_lengths", seg.beat_lengths),
        ("beats", seg.beats),
    ] {
        let tensor = if stream == 0 {
            PyTensor::new(v, false)
        } else {
            PyTensor::with_stream(v, false, stream)
        };
        out.set_item(name, tensor)?;
    }
    out.set_item("params", params(py, rate)?)?;
    out.set_item("timings", seg.timings)?;
    Ok(out)
}

/// A synthetic ECG (ECGSYN-style) with known R peaks: (signal in mV as float32, R peaks as
/// int64, ectopic flags). With `csv`, also writes it (header `mv`), and the R peaks to `peaks`.
#[pyfunction]
#[pyo3(signature = (seconds, *, rate=250.0, heart_rate=70.0, noise_mv=0.02, wander_mv=0.1, ectopic=0.0, seed=1, csv=None, peaks=None))]
#[allow(clippy::too_many_arguments)]
fn synthesize(
    py: Python<'_>,
    seconds: f64,
    rate: f64,
    heart_rate: f64,
    noise_mv: f64,
    wander_mv: f64,
    ectopic: f64,
    seed: u64,
    csv: Option<PathBuf>,
    peaks: Option<PathBuf>,
) -> PyResult<(PyTensor, PyTensor, Vec<bool>)> {
    let options = SynthOptions {
        rate,
        seconds,
        heart_rate,
        noise_mv,
        wander_mv,
        ectopic,
        seed,
        ..Default::default()
    };
    let synthetic = py.detach(|| generate(&options)).map_err(to_py)?;
    if let Some(csv) = csv {
        py.detach(|| write_csv(&synthetic, &csv, peaks.as_deref()))
            .map_err(to_py)?;
    }
    let n = synthetic.signal.len() as i64;
    let signal =
        zerohop::TensorView::from_slice(&synthetic.signal, &[n]).map_err(crate::errors::to_py)?;
    let r: Vec<i64> = synthetic.r_peaks.iter().map(|&p| p as i64).collect();
    let peaks_view =
        zerohop::TensorView::from_slice(&r, &[r.len() as i64]).map_err(crate::errors::to_py)?;
    Ok((
        PyTensor::new(signal, false),
        PyTensor::new(peaks_view, false),
        synthetic.ectopic,
    ))
}

/// (sensitivity, positive predictive value, TP, FP, FN) of detected peaks against true ones,
/// matched within `tolerance` samples, ignoring `margin` samples at both ends.
#[pyfunction]
fn score(
    detected: Vec<f64>,
    truth: Vec<usize>,
    tolerance: f64,
    margin: usize,
    length: usize,
) -> (f64, f64, usize, usize, usize) {
    let a = run_score(&detected, &truth, tolerance, margin, length);
    (
        a.sensitivity(),
        a.positive_predictive_value(),
        a.true_positives,
        a.false_positives,
        a.false_negatives,
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(params, m)?)?;
    m.add_function(wrap_pyfunction!(segment, m)?)?;
    m.add_function(wrap_pyfunction!(synthesize, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    Ok(())
}
