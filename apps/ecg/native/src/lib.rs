//! `zerohop_ecg._native`: the ECG app's Rust readers and kernels (`zerohop-ecg`) for its
//! Python job. Results leave as DLPack capsules and table buffers that the app's Python side
//! hands to zerohop's public API (`zerohop.from_dlpack`, `zerohop.Table.wrap`); inputs come
//! from any DLPack producer. Nothing here reaches into zerohop's own extension.

use std::io::ErrorKind;

use pyo3::exceptions::{
    PyBufferError, PyFileNotFoundError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use zerohop_ecg::{EcgError, ParseProblem};

mod csv;
mod edf;
mod handoff;
mod quality;
mod segment;
mod vae;
mod wfdb;

pyo3::create_exception!(
    zerohop_ecg._native,
    MissingCellError,
    PyValueError,
    "A cell holds no number (empty, or NaN where NaN is refused): the app offers --fill."
);

/// The ECG crate's errors in Python: a missing file is FileNotFoundError (what `open`
/// raises), other I/O errors OSError, a missing cell MissingCellError (a ValueError: the
/// crate's typed problem, so nobody reads the message to tell), zerohop's errors as
/// [`zerohop_error`], everything else ValueError; the message is the crate's, naming the
/// file, line, column or parameter.
pub(crate) fn to_py(err: EcgError) -> PyErr {
    match err {
        EcgError::Parse {
            problem: ParseProblem::MissingCell,
            ..
        } => MissingCellError::new_err(err.to_string()),
        EcgError::Io { ref source, .. } if source.kind() == ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(err.to_string())
        }
        EcgError::Io { .. } => PyOSError::new_err(err.to_string()),
        EcgError::Zerohop(e) => zerohop_error(e),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// zerohop's errors by Python's built-in classes, which zerohop's own exception classes
/// derive from (its `OutOfMemoryError` is a MemoryError, its `CudaError` a RuntimeError).
pub(crate) fn zerohop_error(err: zerohop::Error) -> PyErr {
    use zerohop::Error as E;
    let message = err.to_string();
    match err {
        E::LimitExceeded { .. } | E::OutOfMemory { .. } => PyMemoryError::new_err(message),
        E::Cuda { .. } => PyRuntimeError::new_err(message),
        E::System { errno, .. } => PyOSError::new_err((errno, message)),
        E::DTypeMismatch { .. } | E::WrongType(_) => PyTypeError::new_err(message),
        E::UnsupportedDType { .. }
        | E::UnsupportedDevice { .. }
        | E::InvalidTensor(_)
        | E::UnsupportedVersion { .. }
        | E::NotHostAccessible { .. }
        | E::ReadOnly(_)
        | E::NotContiguous(_)
        | E::Export(_) => PyBufferError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// The CUDA stream a reader's work is ordered on: the caller's handle, or the legacy default
/// stream.
pub(crate) fn cuda_stream(stream: Option<usize>) -> PyResult<zerohop::Stream> {
    stream
        .map_or(Ok(zerohop::Stream::LEGACY), zerohop::Stream::cuda)
        .map_err(zerohop_error)
}

/// Makes this module's allocations on `device` come from zerohop's current resource for it,
/// through the C allocator zerohop's extension exports (`zerohop.memory.library_path()`,
/// `C_MALLOC_SYMBOL`, `C_FREE_SYMBOL`: `malloc` and `free` are their addresses), as torch's
/// pluggable allocator does; `follow=False` goes back to this module's defaults (the system
/// allocator, plain device memory). This module links its own copy of zerohop's core, whose
/// registry of current resources is its own: without this, a shared-memory pool made current
/// in zerohop would not see the app's tables.
#[pyfunction]
fn allocate_through(malloc: usize, free: usize, device: &str, follow: bool) -> PyResult<()> {
    use zerohop::memory::{AllocateFn, DeallocateFn, ExternalResource};
    let place = zerohop::Device::parse(device).map_err(zerohop_error)?;
    if !follow {
        zerohop::memory::reset_current_resource(place);
        return Ok(());
    }
    if malloc == 0 || free == 0 {
        return Err(PyValueError::new_err(
            "malloc and free must be the addresses of zerohop's C allocator functions",
        ));
    }
    // SAFETY: the addresses are those of `zerohop_malloc` and `zerohop_free` (the app's
    // kernels module reads them from zerohop's library, which stays loaded for the process),
    // functions of exactly these signatures; the caller is the app's own Python code.
    let (allocate, deallocate) = unsafe {
        (
            std::mem::transmute::<usize, AllocateFn>(malloc),
            std::mem::transmute::<usize, DeallocateFn>(free),
        )
    };
    // SAFETY: zerohop's allocator keeps the C contract (POOL_ALIGNMENT-aligned blocks).
    let resource = unsafe { ExternalResource::new(allocate, deallocate, place) };
    zerohop::memory::set_current_resource(place, std::sync::Arc::new(resource));
    Ok(())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(allocate_through, m)?)?;
    m.add("MissingCellError", m.py().get_type::<MissingCellError>())?;
    csv::register(m)?;
    edf::register(m)?;
    quality::register(m)?;
    segment::register(m)?;
    vae::register(m)?;
    wfdb::register(m)
}
