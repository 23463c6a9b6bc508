//! Module-level constructors of `zerohop`: `zeros` and `from_arrow`.

use pyo3::prelude::*;
use pyo3::types::IntoPyDict;
use zerohop::{DType, TensorView};

use crate::base::errors::IntoPyResult;
use crate::base::tensor::PyTensor;
use crate::tables::table::PyTable;
use zerohop_pyo3::args::{self, extract_items};

/// A zero-filled tensor in fresh zerohop memory: host memory from the current host resource
/// (128-byte aligned), or device memory for `device="cuda:N"`.
#[pyfunction]
#[pyo3(signature = (shape, dtype=None, device="cpu".into()))]
#[pyo3(text_signature = "(shape, dtype='float32', device='cpu')")]
pub fn zeros(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = args::device)] device: String,
) -> PyResult<PyTensor> {
    let shape: Vec<i64> = extract_items(shape, "shape", zerohop::tensor::MAX_NDIM)?;
    // The dtypes a Table's schema takes: names, NumPy's and torch's.
    let dtype = match dtype {
        Some(d) => DType::from_name(&crate::tables::table::dtype_name(d)?).py()?,
        None => DType::F32,
    };
    let device = zerohop::Device::parse(&device).py()?;
    Ok(PyTensor::new(
        TensorView::zeros_on(device, dtype, &shape).py()?,
        false,
    ))
}

/// A table over Arrow data from any producer of the Arrow PyCapsule interface, sharing its
/// memory; with `chunks=True` a list of tables, one per chunk (see `Table.from_arrow`).
#[pyfunction]
#[pyo3(signature = (data, /, *, copy=false, chunks=false))]
pub fn from_arrow<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    copy: bool,
    chunks: bool,
) -> PyResult<Bound<'py, PyAny>> {
    py.get_type::<PyTable>().call_method(
        "from_arrow",
        (data,),
        Some(&[("copy", copy), ("chunks", chunks)].into_py_dict(py)?),
    )
}
