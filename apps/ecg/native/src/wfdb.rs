//! `read_wfdb` and `read_annotations`: PhysioNet WFDB records and
//! MIT-format annotation files, through `zerohop_ecg::wfdb`.

use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use zerohop_ecg::wfdb;

use zerohop_pyo3::args::{items, MAX_NAMES};

use crate::handoff::table_parts;
use crate::to_py;

/// `leads`: None (all), one name, or a sequence of names and indices.
pub(crate) fn lead_list(leads: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(leads) = leads else {
        return Ok(Vec::new());
    };
    if let Ok(name) = leads.cast::<PyString>() {
        return Ok(vec![name.to_string()]);
    }
    if leads.try_iter().is_err() {
        return Err(PyTypeError::new_err(
            "leads must be None, a lead name, or a sequence of names and indices",
        ));
    }
    let mut out = Vec::new();
    for item in items(leads, "leads", MAX_NAMES)? {
        if let Ok(name) = item.extract::<String>() {
            out.push(name);
        } else if let Ok(index) = item.extract::<i64>() {
            out.push(index.to_string());
        } else {
            return Err(PyTypeError::new_err(format!(
                "leads must hold names (str) or indices (int), got {}",
                item.get_type().name()?
            )));
        }
    }
    Ok(out)
}

/// Reads a PhysioNet WFDB record (`record`: the path without extension, as PhysioNet tools
/// take it, or the `.hea` file) into an SoA table with one float32 column per lead (the parts `zerohop.Table.wrap` takes), in
/// physical units ((ADC − baseline) / gain; invalid samples are NaN). `leads`: names or
/// indices (default: all). Returns (table parts, info) where info holds "record", "rate",
/// "samples", "header_samples", "leads", "units", "gains", "baselines", "adc_zero",
/// "checksums_ok" (per lead: True/False when the whole signal was read and the header has a
/// checksum, else None), "comments", "base_time" and "base_date".
#[pyfunction]
#[pyo3(signature = (record, *, leads=None))]
fn read_wfdb<'py>(
    py: Python<'py>,
    record: PathBuf,
    leads: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
    let leads = lead_list(leads)?;
    let r = py
        .detach(|| wfdb::read_record(&record, &leads))
        .map_err(to_py)?;
    let info = PyDict::new(py);
    let h = &r.header;
    info.set_item("record", &h.record)?;
    info.set_item("rate", h.rate)?;
    info.set_item("samples", r.table.len())?;
    info.set_item("header_samples", h.samples)?;
    info.set_item("leads", &r.names)?;
    info.set_item(
        "units",
        r.leads().map(|s| s.units.clone()).collect::<Vec<_>>(),
    )?;
    info.set_item("gains", r.leads().map(|s| s.gain).collect::<Vec<_>>())?;
    info.set_item(
        "baselines",
        r.leads().map(|s| s.baseline).collect::<Vec<_>>(),
    )?;
    info.set_item(
        "adc_zero",
        r.leads().map(|s| s.adc_zero).collect::<Vec<_>>(),
    )?;
    info.set_item("checksums_ok", &r.checksums)?;
    info.set_item("comments", &h.comments)?;
    info.set_item("base_time", &h.base_time)?;
    info.set_item("base_date", &h.base_date)?;
    Ok((table_parts(py, &r.table)?, info))
}

/// Reads an MIT-format annotation file (`100.atr`). Returns a dict of NumPy arrays "sample"
/// (int64), "code" (uint8), "symbol" (str), "is_beat" (bool: the AAMI EC57 beat codes),
/// "subtype" (int8), "chan" (uint8), "num" (int8), plus "aux" (a list of str or None) and
/// "time_resolution" (the file's own sample rate, or None: the record's).
#[pyfunction]
fn read_annotations<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let file = py
        .detach(|| wfdb::read_annotation_file(&path))
        .map_err(to_py)?;
    let a = &file.annotations;
    let numpy = py.import("numpy")?;
    let out = PyDict::new(py);
    // Small integers go over as Python ints of a wider Rust type: pyo3 would turn a Vec<u8>
    // into bytes, which NumPy does not read as numbers.
    let column = |name: &str, values: Vec<i64>, dtype: &str| -> PyResult<()> {
        out.set_item(name, numpy.call_method1("asarray", (values, dtype))?)
    };
    column("sample", a.iter().map(|x| x.sample).collect(), "int64")?;
    column("code", a.iter().map(|x| x.code.into()).collect(), "uint8")?;
    column(
        "subtype",
        a.iter().map(|x| x.subtype.into()).collect(),
        "int8",
    )?;
    column("chan", a.iter().map(|x| x.chan.into()).collect(), "uint8")?;
    column("num", a.iter().map(|x| x.num.into()).collect(), "int8")?;
    let beats: Vec<bool> = a.iter().map(|x| wfdb::is_beat(x.code)).collect();
    out.set_item("is_beat", numpy.call_method1("asarray", (beats, "bool"))?)?;
    let symbols: Vec<&str> = a.iter().map(|x| x.symbol.as_ref()).collect();
    out.set_item("symbol", numpy.call_method1("asarray", (symbols, "str"))?)?;
    out.set_item("aux", a.iter().map(|x| x.aux.clone()).collect::<Vec<_>>())?;
    out.set_item("time_resolution", file.time_resolution)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_wfdb, m)?)?;
    m.add_function(wrap_pyfunction!(read_annotations, m)?)?;
    Ok(())
}
