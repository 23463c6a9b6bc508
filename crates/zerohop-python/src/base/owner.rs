//! A Python object used as the owner of memory that Rust code (and DLPack deleters on any
//! thread) may release.

use pyo3::prelude::*;

/// Holds a strong reference to a Python object and gives it back safely from any thread:
/// attached to the interpreter when it is alive, and by leaking it when the interpreter is
/// finalizing or gone (touching Python then would crash).
pub struct PyOwner(Option<Py<PyAny>>);

impl PyOwner {
    pub fn new(object: Py<PyAny>) -> Self {
        PyOwner(Some(object))
    }
}

impl Drop for PyOwner {
    fn drop(&mut self) {
        let Some(object) = self.0.take() else { return };
        // SAFETY: Py_IsInitialized may be called at any time, attached or not.
        if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
            std::mem::forget(object);
            return;
        }
        // try_attach refuses while the interpreter is finalizing; then the object leaks.
        let mut slot = Some(object);
        Python::try_attach(|_py| drop(slot.take()));
        if let Some(object) = slot {
            std::mem::forget(object);
        }
    }
}
