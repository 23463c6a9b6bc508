//! Results out to zerohop and inputs in from any producer, through public protocols only.
//!
//! A tensor leaves as a versioned DLPack capsule (`zerohop.from_dlpack` takes it); a table
//! leaves as its one buffer (a capsule of bytes) with its schema, rows and alignment, which
//! `zerohop.Table.wrap` lays over the same memory. Inputs are asked for a capsule as any
//! DLPack consumer asks.

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList, PyTuple};
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::soa::{ColumnKind, ComponentOrder, SoaTable};
use zerohop::{DType, TensorView};
use zerohop_pyo3::{capsule, request_capsule};

use crate::zerohop_error;

/// `view` as a DLPack capsule for `zerohop.from_dlpack` (or any consumer).
pub(crate) fn tensor_capsule<'py>(
    py: Python<'py>,
    view: &TensorView,
) -> PyResult<Bound<'py, PyCapsule>> {
    let managed =
        export_versioned(view, ExportOptions { is_copied: false }).map_err(zerohop_error)?;
    capsule::versioned_capsule(py, managed)
}

/// `(buffer, schema, rows, alignment)`: what `zerohop.Table.wrap` takes to make `table`
/// again over the same memory. The schema in the constructor's tuple forms.
pub(crate) fn table_parts<'py>(py: Python<'py>, table: &SoaTable) -> PyResult<Bound<'py, PyTuple>> {
    let buffer = table.buffer().clone();
    let bytes = buffer.len() as i64;
    let view = TensorView::from_buffer(buffer, DType::U8, &[bytes]).map_err(zerohop_error)?;
    let schema = PyList::empty(py);
    for column in table.schema().columns() {
        let dtype = column.dtype.to_string();
        let item = match column.kind {
            ColumnKind::Column => (column.name.as_str(), dtype).into_pyobject(py)?.into_any(),
            ColumnKind::TableScalar => (column.name.as_str(), dtype, "scalar")
                .into_pyobject(py)?
                .into_any(),
            ColumnKind::Vector(k) => (column.name.as_str(), dtype, k)
                .into_pyobject(py)?
                .into_any(),
            ColumnKind::Matrix { rows, cols, order } => {
                let order = match order {
                    ComponentOrder::RowMajor => "row",
                    ComponentOrder::ColumnMajor => "col",
                };
                (column.name.as_str(), dtype, (rows, cols), order)
                    .into_pyobject(py)?
                    .into_any()
            }
        };
        schema.append(item)?;
    }
    let layout = table.layout();
    (
        tensor_capsule(py, &view)?,
        schema,
        layout.rows,
        layout.alignment,
    )
        .into_pyobject(py)
}

/// The memory of `obj` (any DLPack producer, or a capsule) as a view, no copy, ready for work
/// on `stream` (a device producer orders itself before it; None: the legacy stream); a legacy
/// capsule's view is read-only (the core's `Import::into_view`).
pub(crate) fn view_of(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<zerohop::handoff::CudaStream>,
) -> PyResult<TensorView> {
    let requested;
    let capsule = if obj.is_instance_of::<PyCapsule>() {
        obj
    } else {
        requested = request_capsule(py, obj, stream)?;
        &requested
    };
    Ok(capsule::consume(capsule, zerohop_error)?.into_view(false))
}
