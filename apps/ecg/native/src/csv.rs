//! The CSV reader and the detector's windows (`zerohop_ecg::csv`, `zerohop_ecg::segment`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop_ecg::csv::{read_csv as read, CsvOptions, EmptyField, NanPolicy};
use zerohop_ecg::gpu::csv::CsvReport;
use zerohop_ecg::segment::Params;
use zerohop_ecg::{DetectParams, Method};
use zerohop_pyo3::args::{extract_optional, MAX_NAMES};

use crate::handoff::table_parts;
use crate::{to_py, zerohop_error};

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

/// Reads a numeric CSV into an SoA table of float32 columns, returned as the parts
/// `zerohop.Table.wrap` takes (see `handoff::table_parts`), on all cores. `columns`: names
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
    let place = zerohop::Device::parse(device).map_err(zerohop_error)?;
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
            let stream = crate::cuda_stream(stream)?;
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
    let table = table_parts(py, &table)?.into_any();
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
pub(crate) fn params<'py>(
    py: Python<'py>,
    rate: f64,
    method: &str,
) -> PyResult<Bound<'py, PyDict>> {
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(csv_header, m)?)?;
    m.add_function(wrap_pyfunction!(params, m)?)?;
    Ok(())
}
