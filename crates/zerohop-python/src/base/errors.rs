//! zerohop errors become Python exceptions here and nowhere else, with the same message.

use pyo3::exceptions::{
    PyBaseException, PyBufferError, PyKeyError, PyMemoryError, PyOSError, PyRuntimeError,
    PyTypeError, PyUserWarning, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use pyo3::{intern, PyErr};
use zerohop::Error;

pyo3::create_exception!(
    zerohop,
    OutOfMemoryError,
    PyMemoryError,
    "A memory limit refused an allocation; `requested`, `in_use` and `limit` are in bytes."
);

pyo3::create_exception!(
    zerohop,
    CudaError,
    PyRuntimeError,
    "A CUDA driver call failed; `call` says which, `code` is the driver's CUresult and `name` \
     its symbol (CUDA_ERROR_ILLEGAL_ADDRESS, ...)."
);

pyo3::create_exception!(
    zerohop,
    CopyWarning,
    PyUserWarning,
    "zerohop made a copy because the caller allowed one (copy=True or materialize=...)."
);

/// An exception class with two built-in bases, made once per interpreter (PyO3's
/// `create_exception!` takes one base). Its `__str__` is BaseException's, so the message reads
/// as written (KeyError's would quote it).
fn class_with_two_bases<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    doc: &str,
    bases: (Bound<'py, PyType>, Bound<'py, PyType>),
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "zerohop")?;
        namespace.set_item("__doc__", doc)?;
        let plain_str = py
            .get_type::<PyBaseException>()
            .getattr(intern!(py, "__str__"))?;
        namespace.set_item("__str__", plain_str)?;
        let class = py.get_type::<PyType>().call1((name, bases, namespace))?;
        Ok(class.cast_into::<PyType>()?.unbind())
    })
    .map(|class| class.bind(py))
}

/// `zerohop.NoSuchColumnError`: the same exception from every call that names columns.
pub fn no_such_column_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let doc = "A table has no column of that name: the same exception from `table[\"x\"]`, \
               from `table.tensors([\"x\"])` and from every other call that names columns. \
               It is a KeyError (a lookup by name) and a ValueError (a bad argument), so code \
               catching either still works.";
    let bases = (py.get_type::<PyKeyError>(), py.get_type::<PyValueError>());
    class_with_two_bases(py, &CLASS, "NoSuchColumnError", doc, bases)
}

/// `zerohop.StreamError`: a stream that cannot order a hand-off (0 on a device, a stream for
/// host data, a capture the dependency would cross). A BufferError, as DLPack's `__dlpack__`
/// raises, and a ValueError (a bad argument).
pub fn stream_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let doc = "A stream cannot order this hand-off: stream 0 on a CUDA device (ambiguous), a \
               stream named for host data, or a dependency that would cross a CUDA graph \
               capture. It is a BufferError (what DLPack's __dlpack__ raises) and a ValueError.";
    let bases = (
        py.get_type::<PyBufferError>(),
        py.get_type::<PyValueError>(),
    );
    class_with_two_bases(py, &CLASS, "StreamError", doc, bases)
}

fn cuda_error(message: String, call: String, code: i32, name: String) -> PyErr {
    let err = CudaError::new_err(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("call", call);
        let _ = value.setattr("code", code);
        let _ = value.setattr("name", name);
    });
    err
}

fn limit_error(message: String, requested: usize, in_use: usize, limit: usize) -> PyErr {
    let err = OutOfMemoryError::new_err(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("requested", requested);
        let _ = value.setattr("in_use", in_use);
        let _ = value.setattr("limit", limit);
    });
    err
}

pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err {
        Error::LimitExceeded {
            requested,
            in_use,
            limit,
        } => limit_error(message, requested, in_use, limit),
        Error::Cuda {
            call, code, name, ..
        } => cuda_error(message, call, code, name),
        Error::NoSuchColumn { .. } => raise(no_such_column_type, message),
        Error::Stream { .. } => raise(stream_error_type, message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        Error::System { errno, .. } => PyOSError::new_err((errno, message)),
        Error::DTypeMismatch { .. } | Error::WrongType(_) => PyTypeError::new_err(message),
        Error::UnsupportedDType { .. }
        | Error::UnsupportedDevice { .. }
        | Error::InvalidTensor(_)
        | Error::UnsupportedVersion { .. }
        | Error::NotHostAccessible { .. }
        | Error::ReadOnly(_)
        | Error::NotContiguous(_)
        | Error::Export(_)
        | Error::HandOff { .. } => PyBufferError::new_err(message),
        // Arguments of every other kind (InvalidArgument, Layout, Schema, Spec, Device, Arrow,
        // DType, Resource, InvalidFree), Wire and CudaUnavailable: docs/handoff.md's table.
        _ => PyValueError::new_err(message),
    }
}

/// `zerohop.NoSuchColumnError` with `message`.
fn raise(class: fn(Python<'_>) -> PyResult<&Bound<'_, PyType>>, message: String) -> PyErr {
    Python::attach(|py| match class(py) {
        Ok(class) => PyErr::from_type(class.clone(), message),
        Err(err) => err,
    })
}

pub trait IntoPyResult<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for zerohop::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

/// Reports a copy the caller allowed, as a `zerohop.CopyWarning`.
pub fn warn_copy(py: Python<'_>, what: &str) -> PyResult<()> {
    let message = std::ffi::CString::new(what).unwrap_or_default();
    PyErr::warn(py, &py.get_type::<CopyWarning>(), &message, 2)
}
