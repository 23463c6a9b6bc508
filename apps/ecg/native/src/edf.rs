//! `edf_header` and `read_edf`: EDF, EDF+ and BDF(+) recordings through `zerohop_ecg::edf`,
//! on the host or straight into device memory.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyList, PyString, PyTuple};
use zerohop_ecg::edf::{self, Header, Recording};

use crate::handoff::table_parts;
use crate::wfdb::lead_list;
use crate::{to_py, zerohop_error};

/// The recording-wide fields both functions report.
fn header_items(d: &Bound<'_, PyDict>, h: &Header) -> PyResult<()> {
    d.set_item("format", h.variant())?;
    d.set_item("patient", &h.patient)?;
    d.set_item("recording", &h.recording)?;
    d.set_item(
        "start_date",
        h.start_date
            .map(|(y, m, day)| format!("{y:04}-{m:02}-{day:02}")),
    )?;
    d.set_item("start_time", h.start_time)?;
    d.set_item("records", h.records)?;
    d.set_item("record_duration", h.record_duration)?;
    Ok(())
}

/// Reads an EDF/BDF file's header. Returns a dict: "format" ("EDF", "EDF+C", "EDF+D", "BDF",
/// …), "patient", "recording", "start_date" ("YYYY-MM-DD" or None), "start_time" (seconds
/// after midnight or None), "records" (None: -1, unknown), "record_duration" (s), and
/// "signals": a list of dicts with "label", "units", "rate", "transducer", "prefiltering",
/// "physical_range", "digital_range", "annotations" (True for an EDF+ annotation signal).
#[pyfunction]
fn edf_header<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let h = py.detach(|| edf::read_header(&path)).map_err(to_py)?;
    let d = PyDict::new(py);
    header_items(&d, &h)?;
    let signals = PyList::empty(py);
    for (i, s) in h.signals.iter().enumerate() {
        let one = PyDict::new(py);
        one.set_item("label", &s.label)?;
        one.set_item("units", &s.units)?;
        one.set_item("rate", h.rate(i))?;
        one.set_item("transducer", &s.transducer)?;
        one.set_item("prefiltering", &s.prefiltering)?;
        one.set_item("physical_range", (s.physical_min, s.physical_max))?;
        one.set_item("digital_range", (s.digital_min, s.digital_max))?;
        one.set_item("annotations", h.is_annotations(i))?;
        signals.append(one)?;
    }
    d.set_item("signals", signals)?;
    Ok(d)
}

/// Reads an EDF/BDF file's chosen signals (`leads`: labels or indices; default: every
/// signal, which must share one rate) into an SoA table of float32 columns in physical units
/// (the parts `zerohop.Table.wrap` takes), on the host or with `device="cuda:N"` straight into
/// that device's memory. EDF+D gaps read as NaN. Returns (table parts, info): the header's
/// fields (as `edf_header`), "leads", "units", "rate", "samples", "records_read",
/// "truncated" (the header's record count when the file holds fewer, else None), "gaps" (a
/// list of (first sample, samples, onset s)), "first_onset" (s after the start time),
/// "at_limits" (per lead: samples at the digital minimum or maximum), "annotations" (a dict
/// of "onset" and "duration" arrays, s, NaN for none, and a list "text"), "beats" (a dict of NumPy arrays "sample" and
/// "symbol": the annotations whose text is an MIT-BIH beat symbol, on the table's
/// timeline), "fallback" (why a device read went through the host, or None), "bytes" (moved
/// to the device) and "timings".
#[pyfunction]
#[pyo3(signature = (path, *, leads=None, device="cpu", stream=None))]
fn read_edf<'py>(
    py: Python<'py>,
    path: PathBuf,
    leads: Option<&Bound<'py, PyAny>>,
    device: &str,
    stream: Option<usize>,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
    let leads = lead_list(leads)?;
    let place = zerohop::Device::parse(device).map_err(zerohop_error)?;
    let (r, fallback, bytes, timings) = match place.kind {
        zerohop::DeviceKind::Cpu => {
            let started = std::time::Instant::now();
            let r = py.detach(|| edf::read_edf(&path, &leads)).map_err(to_py)?;
            let seconds = started.elapsed().as_secs_f64();
            (r, None, 0, vec![("read on host", seconds)])
        }
        zerohop::DeviceKind::Cuda => {
            let stream = crate::cuda_stream(stream)?;
            let read = py
                .detach(|| zerohop_ecg::gpu::edf::read_edf_cuda(&path, &leads, place.id, stream))
                .map_err(to_py)?;
            (read.recording, read.fallback, read.bytes, read.timings)
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "device {device:?} must be 'cpu' or 'cuda:N'"
            )))
        }
    };
    let info = PyDict::new(py);
    header_items(&info, &r.header)?;
    info.set_item("leads", &r.names)?;
    let units: Vec<&str> = r
        .signals
        .iter()
        .map(|&i| r.header.signals[i].units.as_str())
        .collect();
    info.set_item("units", units)?;
    info.set_item("rate", r.rate)?;
    info.set_item("samples", r.table.len())?;
    info.set_item("records_read", r.records)?;
    info.set_item("truncated", r.truncated)?;
    let gaps: Vec<(usize, usize, f64)> = r
        .gaps
        .iter()
        .map(|g| (g.sample, g.samples, g.onset))
        .collect();
    info.set_item("gaps", gaps)?;
    info.set_item("first_onset", r.first_onset)?;
    info.set_item("at_limits", &r.at_limits)?;
    info.set_item("annotations", annotation_arrays(py, &r)?)?;
    info.set_item("beats", beats(py, &r)?)?;
    info.set_item("fallback", fallback)?;
    info.set_item("bytes", bytes)?;
    info.set_item("timings", timings)?;
    Ok((table_parts(py, &r.table)?, info))
}

/// Every annotation as a dict of "onset" and "duration" (float64 NumPy arrays, seconds; NaN:
/// no duration) and "text" (a list; each distinct text is one str object, as a day of beat
/// annotations repeats a handful of them).
fn annotation_arrays<'py>(py: Python<'py>, r: &Recording) -> PyResult<Bound<'py, PyDict>> {
    let numpy = py.import("numpy")?;
    let onsets: Vec<f64> = r.annotations.iter().map(|a| a.onset).collect();
    let durations: Vec<f64> = r
        .annotations
        .iter()
        .map(|a| a.duration.unwrap_or(f64::NAN))
        .collect();
    let mut seen: std::collections::HashMap<&str, Bound<'py, PyString>> = Default::default();
    let texts = PyList::empty(py);
    for a in &r.annotations {
        let text = seen
            .entry(a.text.as_str())
            .or_insert_with(|| PyString::new(py, &a.text));
        texts.append(text.clone())?;
    }
    let d = PyDict::new(py);
    d.set_item("onset", float64_array(&numpy, &onsets)?)?;
    d.set_item("duration", float64_array(&numpy, &durations)?)?;
    d.set_item("text", texts)?;
    Ok(d)
}

/// `values` as a NumPy array, through one bytearray (writable, as NumPy arrays are): a day of annotations is 86,400
/// values, which a list of Python floats made 15 ms of the read.
fn float64_array<'py>(numpy: &Bound<'py, PyModule>, values: &[f64]) -> PyResult<Bound<'py, PyAny>> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    numpy.call_method1(
        "frombuffer",
        (PyByteArray::new(numpy.py(), &bytes), "float64"),
    )
}

/// The beat annotations on the table's timeline, in time order.
fn beats<'py>(py: Python<'py>, r: &Recording) -> PyResult<Bound<'py, PyDict>> {
    let mut found: Vec<(usize, &str)> = r
        .annotations
        .iter()
        .filter_map(|a| Some((r.sample_of(a.onset)?, edf::beat_symbol(&a.text)?)))
        .collect();
    found.sort_by_key(|&(sample, _)| sample);
    let numpy = py.import("numpy")?;
    let d = PyDict::new(py);
    let samples: Vec<u8> = found
        .iter()
        .flat_map(|&(s, _)| (s as i64).to_ne_bytes())
        .collect();
    let symbols: Vec<&str> = found.iter().map(|&(_, s)| s).collect();
    let samples = numpy.call_method1("frombuffer", (PyByteArray::new(py, &samples), "int64"))?;
    d.set_item("sample", samples)?;
    d.set_item("symbol", symbols)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(edf_header, m)?)?;
    m.add_function(wrap_pyfunction!(read_edf, m)?)?;
    Ok(())
}
