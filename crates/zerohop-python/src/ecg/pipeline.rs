//! `zerohop._zerohop.ecg`: the Rust stages of the ECG pipeline for the Python job.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::DType;
use zerohop_ecg::csv::{read_csv as read, CsvOptions, EmptyField, NanPolicy};
use zerohop_ecg::gpu::csv::CsvReport;
use zerohop_ecg::segment::Params;
use zerohop_ecg::synth::{generate, score as run_score, write_csv, SynthOptions};
use zerohop_ecg::{segment_with, DetectParams, Method};

use crate::base::tensor::PyTensor;
use crate::tables::table::PyTable;
use zerohop_pyo3::args::{extract_items, extract_optional, MAX_NAMES, MAX_NUMBERS};

use super::to_py;

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

/// Reads a numeric CSV into a zerohop Table of float32 columns, on all cores. `columns`: names
/// (without the file's quotes) or 0-based indices, int or digit string (a column named "1"
/// wins over index 1); `header`: None detects it; `delimiter`: None sniffs ",", ";" or tab,
/// or one ASCII character ("tab" too). A units row after the header is skipped (see
/// `csv_header`). `empty`: "error" (default), "nan", or a number; `nan`: "reject" (default)
/// or "allow". `device="cuda:N"` reads the file through pinned buffers into device memory
/// and parses it there (the columns come from the device's current zerohop resource; values
/// and errors are the CPU reader's, bit for bit), ordered on `stream` (default the legacy
/// stream) and finished on return. `report=True` returns (table, dict) with the bytes, rows,
/// lines the host parsed, whether the host parsed the whole file (and why) and step times.
#[pyfunction]
#[pyo3(signature = (path, *, columns=None, header=None, delimiter=None, empty=None, nan="reject", device="cpu", stream=None, report=false))]
#[allow(clippy::too_many_arguments)]
fn read_csv<'py>(
    py: Python<'py>,
    path: PathBuf,
    columns: Option<&Bound<'py, PyAny>>,
    header: Option<bool>,
    delimiter: Option<&str>,
    empty: Option<&Bound<'py, PyAny>>,
    nan: &str,
    device: &str,
    stream: Option<usize>,
    report: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let delimiter = match delimiter {
        None => zerohop_ecg::csv::SNIFF_DELIMITER,
        Some(text) => zerohop_ecg::csv::delimiter_from_str(text).map_err(to_py)?,
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
    // A column is a name (str) or a 0-based index (int), which the reader takes as its
    // decimal string; bool is an int to Python but never a column.
    let columns = extract_optional::<Bound<'py, PyAny>>(columns, "columns", MAX_NAMES)?
        .unwrap_or_default()
        .iter()
        .map(|c| {
            if c.is_instance_of::<pyo3::types::PyString>() {
                return c.extract::<String>();
            }
            if c.is_instance_of::<pyo3::types::PyBool>() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "columns must be names (str) or 0-based indices (int), not bool",
                ));
            }
            match c.extract::<i64>() {
                Ok(i) if i >= 0 => Ok(i.to_string()),
                Ok(i) => Err(PyValueError::new_err(format!(
                    "column index {i} must be 0 or more"
                ))),
                Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "columns must be names (str) or 0-based indices (int), not {}",
                    c.get_type().name()?
                ))),
            }
        })
        .collect::<PyResult<Vec<String>>>()?;
    let options = CsvOptions {
        has_header: header,
        delimiter,
        empty: parse_empty(empty)?,
        nan,
        columns,
    };
    let place = zerohop::Device::parse(device).map_err(crate::base::errors::to_py)?;
    let (table, details) = match place.kind {
        zerohop::DeviceKind::Cpu => {
            let started = std::time::Instant::now();
            let table = py.detach(|| read(&path, &options)).map_err(to_py)?;
            let details = CsvReport {
                bytes: std::fs::metadata(&path).map_or(0, |m| m.len() as usize),
                rows: table.len(),
                timings: vec![("parse on host", started.elapsed().as_secs_f64())],
                ..Default::default()
            };
            (table, details)
        }
        zerohop::DeviceKind::Cuda => {
            let stream = zerohop::Stream(stream.unwrap_or(zerohop::cuda::LEGACY_STREAM.0));
            let read = py
                .detach(|| zerohop_ecg::gpu::csv::read_csv_cuda(&path, &options, place.id, stream))
                .map_err(to_py)?;
            (read.table, read.report)
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "device {device:?} must be 'cpu' or 'cuda:N'"
            )))
        }
    };
    let table = Bound::new(py, PyTable::from_table(table))?.into_any();
    if !report {
        return Ok(table);
    }
    let d = PyDict::new(py);
    d.set_item("bytes", details.bytes)?;
    d.set_item("rows", details.rows)?;
    d.set_item("host_lines", details.host_lines)?;
    d.set_item("fallback", details.fallback)?;
    d.set_item("timings", details.timings)?;
    Ok((table, d).into_pyobject(py)?.into_any())
}

/// The layout of a CSV file, read from its first lines only: a dict with "names" (without
/// quotes; "c0", "c1", … without a header), "units" (the units row after the header, such as
/// PhysioNet's 'seconds','mV', or None), "delimiter" (given, or sniffed among ",", ";" and
/// tab), "has_header" and "first_data_line" (1-based). Lets a caller pick the columns (and
/// see a time column) before `read_csv`.
#[pyfunction]
#[pyo3(signature = (path, *, delimiter=None))]
fn csv_header<'py>(
    py: Python<'py>,
    path: PathBuf,
    delimiter: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let delimiter = delimiter
        .map(zerohop_ecg::csv::delimiter_from_str)
        .transpose()
        .map_err(to_py)?;
    let header = py
        .detach(|| zerohop_ecg::csv::read_header(&path, delimiter))
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("names", header.names)?;
    d.set_item("units", header.units)?;
    d.set_item("delimiter", char::from(header.delimiter).to_string())?;
    d.set_item("has_header", header.has_header)?;
    d.set_item("first_data_line", header.first_data_line)?;
    Ok(d)
}

/// The windows a `method` uses at `rate` Hz, as a dict ("blog": the blog's windows scaled from
/// 250 Hz; "adaptive": the detector's windows and the beat rows around each R peak).
#[pyfunction]
#[pyo3(signature = (rate, method="adaptive"))]
fn params<'py>(py: Python<'py>, rate: f64, method: &str) -> PyResult<Bound<'py, PyDict>> {
    let method = Method::parse(method).map_err(to_py)?;
    let p = Params::for_rate(rate).map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("method", method.name())?;
    d.set_item("rate", p.rate)?;
    d.set_item("ricker_width", p.ricker_width)?;
    match method {
        Method::Blog => {
            d.set_item("window", p.window)?;
            d.set_item("min_length", p.min_length)?;
            d.set_item("max_length", p.max_length)?;
            d.set_item("width", p.width)?;
            d.set_item("gate_to_peak", p.gate_to_peak())?;
        }
        Method::Adaptive => {
            let a = DetectParams::for_rate(rate).map_err(to_py)?;
            d.set_item("integration", a.integration)?;
            d.set_item("candidate_window", a.candidate_window)?;
            d.set_item("refractory", a.refractory)?;
            d.set_item("t_wave", a.t_wave)?;
            d.set_item("before", a.before)?;
            d.set_item("after", a.after)?;
            d.set_item("width", a.width)?;
        }
    }
    Ok(d)
}

/// The signal as a compact float32 host or device tensor: float32 producers are shared;
/// float64 and other real inputs (lists, NumPy float64 from WFDB readers) are converted.
fn signal_tensor<'py>(py: Python<'py>, signal: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let zerohop = py.import("zerohop")?;
    let shared = zerohop.getattr("from_dlpack")?.call1((signal,));
    if let Ok(t) = &shared {
        let view = &t.cast::<PyTensor>()?.get().view;
        if view.dtype() == DType::F32 && view.ndim() == 1 {
            return shared;
        }
        if view.device().kind == zerohop::DeviceKind::Cuda {
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
    let ndim: usize = converted.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(PyValueError::new_err(format!(
            "signal must be 1-d, got shape {}",
            converted.getattr("shape")?
        )));
    }
    zerohop.getattr("from_dlpack")?.call1((converted,))
}

/// Segments a 1-d signal (any DLPack producer; a table's column is a view; other real dtypes
/// and lists are converted to float32) with `method` ("adaptive": R peaks at any rate from 30
/// to 250 bpm, one beat row per R peak; "blog": the Part 3 blog's gates). Returns a dict of
/// zerohop tensors — curvature, energy (adaptive), gates (blog: gate positions; adaptive:
/// candidate positions), lengths (blog: gate to gate; adaptive: RR intervals), r_peaks (every
/// detected R peak), beat_peaks (the R peak of each row), beat_starts, beat_lengths, beats
/// (rows) — plus "edge_dropped" (beats whose window crosses an end), "method", "params" and
/// "timings" [(stage, seconds)]. `device="cuda:N"` runs the CUDA kernels on `stream` (default
/// the legacy stream; a host signal is copied over once) and returns device tensors carrying
/// that stream; the results equal the CPU's bit for bit. The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (signal, rate, *, method="adaptive", device="cpu", stream=None))]
fn segment<'py>(
    py: Python<'py>,
    signal: &Bound<'py, PyAny>,
    rate: f64,
    method: &str,
    device: &str,
    stream: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let method = Method::parse(method).map_err(to_py)?;
    let tensor = signal_tensor(py, signal)?;
    let source = tensor.cast::<PyTensor>()?.get();
    let view = source.view.clone();
    let p = Params::for_rate(rate).map_err(to_py)?;
    let place = zerohop::Device::parse(device).map_err(crate::base::errors::to_py)?;
    let (seg, stream) = match place.kind {
        zerohop::DeviceKind::Cpu => {
            let values = view.as_slice::<f32>().map_err(crate::base::errors::to_py)?;
            (
                py.detach(|| segment_with(values, &p, method))
                    .map_err(to_py)?,
                0,
            )
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
                .map_err(crate::base::errors::to_py)?;
            }
            let seg = py
                .detach(|| {
                    zerohop_ecg::gpu::segment_cuda_with(
                        &view,
                        &p,
                        method,
                        place.id,
                        zerohop::Stream(stream),
                    )
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
        let tensor = if stream == 0 {
            PyTensor::new(v, false)
        } else {
            PyTensor::with_stream(v, false, stream)
        };
        out.set_item(name, tensor)?;
    }
    out.set_item("method", method.name())?;
    out.set_item("edge_dropped", seg.edge_dropped)?;
    out.set_item("params", params(py, rate, method.name())?)?;
    out.set_item("timings", seg.timings)?;
    Ok(out)
}

/// A synthetic ECG (ECGSYN-style) with known R peaks: (signal in mV as float32, R peaks as
/// int64, ectopic flags). With `csv`, also writes it (header `mv`), and the R peaks to `peaks`.
/// `day_swing` swings the mean heart rate over a 24-hour day by that fraction (0.25: ±25 %,
/// fastest at 14:00 and slowest at 02:00 of a recording starting at midnight).
#[pyfunction]
#[pyo3(signature = (seconds, *, rate=250.0, heart_rate=70.0, noise_mv=0.02, wander_mv=0.1, ectopic=0.0, day_swing=0.0, seed=1, csv=None, peaks=None))]
#[allow(clippy::too_many_arguments)]
fn synthesize(
    py: Python<'_>,
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
) -> PyResult<(PyTensor, PyTensor, Vec<bool>)> {
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
    let signal = zerohop::TensorView::from_slice(&synthetic.signal, &[n])
        .map_err(crate::base::errors::to_py)?;
    let r: Vec<i64> = synthetic.r_peaks.iter().map(|&p| p as i64).collect();
    let peaks_view = zerohop::TensorView::from_slice(&r, &[r.len() as i64])
        .map_err(crate::base::errors::to_py)?;
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
    detected: &Bound<'_, PyAny>,
    truth: &Bound<'_, PyAny>,
    tolerance: f64,
    margin: usize,
    length: usize,
) -> PyResult<(f64, f64, usize, usize, usize)> {
    let detected: Vec<f64> = extract_items(detected, "detected", MAX_NUMBERS)?;
    let truth: Vec<usize> = extract_items(truth, "truth", MAX_NUMBERS)?;
    let a = run_score(&detected, &truth, tolerance, margin, length);
    Ok((
        a.sensitivity(),
        a.positive_predictive_value(),
        a.true_positives,
        a.false_positives,
        a.false_negatives,
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(csv_header, m)?)?;
    m.add_function(wrap_pyfunction!(params, m)?)?;
    m.add_function(wrap_pyfunction!(segment, m)?)?;
    m.add_function(wrap_pyfunction!(synthesize, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    Ok(())
}
