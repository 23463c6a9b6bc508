//! DLPack capsules: making them for consumers, and consuming producers' capsules.
//!
//! A capsule's name says whether it is still owned by the producer (`dltensor[_versioned]`)
//! or was taken by a consumer (`used_dltensor[_versioned]`). The destructor frees the tensor
//! only in the first case, so a consumed capsule never double-frees.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use zerohop::dlpack::ffi::*;
use zerohop::dlpack::{import_legacy, import_versioned, Import};

/// # Safety
/// Called by CPython with a capsule about to be destroyed, with the interpreter attached.
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule. IsValid fails silently (no exception) when the
    // name was changed to the used_ form, meaning a consumer owns the tensor now.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE_VERSIONED.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED.as_ptr())
                as *mut DLManagedTensorVersioned;
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

/// # Safety
/// As [`destroy_versioned`], for legacy capsules.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_versioned`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE_LEGACY.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(capsule, CAPSULE_LEGACY.as_ptr()) as *mut DLManagedTensor;
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

/// Wraps a fresh versioned export in a capsule. If the capsule cannot be made, the tensor
/// is deleted here, so nothing leaks.
pub fn versioned_capsule(
    py: Python<'_>,
    managed: NonNull<DLManagedTensorVersioned>,
) -> PyResult<Bound<'_, PyCapsule>> {
    // SAFETY: the pointer is a live export owned by us; the destructor frees it exactly once
    // unless a consumer renames the capsule and takes ownership.
    let made = unsafe {
        PyCapsule::new_with_pointer_and_destructor(
            py,
            managed.cast::<c_void>(),
            CAPSULE_VERSIONED,
            Some(destroy_versioned),
        )
    };
    if made.is_err() {
        // SAFETY: no capsule took ownership, so we still own the export.
        unsafe { (managed.as_ref().deleter.unwrap())(managed.as_ptr()) };
    }
    made
}

/// As [`versioned_capsule`], for legacy exports.
pub fn legacy_capsule(
    py: Python<'_>,
    managed: NonNull<DLManagedTensor>,
) -> PyResult<Bound<'_, PyCapsule>> {
    // SAFETY: as in `versioned_capsule`.
    let made = unsafe {
        PyCapsule::new_with_pointer_and_destructor(
            py,
            managed.cast::<c_void>(),
            CAPSULE_LEGACY,
            Some(destroy_legacy),
        )
    };
    if made.is_err() {
        // SAFETY: no capsule took ownership.
        unsafe { (managed.as_ref().deleter.unwrap())(managed.as_ptr()) };
    }
    made
}

/// Takes ownership of the tensor inside a DLPack capsule (either kind) and validates it.
/// The capsule is renamed `used_*` before anything can fail, so its destructor will not
/// free what the returned view (or the failed import, via the deleter) now owns. A refusal
/// of the core's reaches the caller through `to_py`.
pub fn consume(
    capsule: &Bound<'_, PyAny>,
    to_py: impl FnOnce(zerohop::Error) -> PyErr,
) -> PyResult<Import> {
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a DLPack capsule or an object with __dlpack__, got {}",
            capsule
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live capsule; GetName returns NULL only for an unnamed capsule.
    let name_ptr = unsafe { ffi::PyCapsule_GetName(raw) };
    if name_ptr.is_null() {
        return Err(PyTypeError::new_err(
            "capsule has no name: not a DLPack capsule",
        ));
    }
    // SAFETY: capsule names are NUL-terminated C strings that live as long as the capsule.
    let name = unsafe { CStr::from_ptr(name_ptr) };
    let (used, versioned) = if name == CAPSULE_VERSIONED {
        (CAPSULE_VERSIONED_USED, true)
    } else if name == CAPSULE_LEGACY {
        (CAPSULE_LEGACY_USED, false)
    } else if name == CAPSULE_VERSIONED_USED || name == CAPSULE_LEGACY_USED {
        return Err(PyBufferError::new_err(
            "this DLPack capsule was already consumed; a capsule can be imported only once",
        ));
    } else {
        return Err(PyTypeError::new_err(format!(
            "capsule named {name:?} is not a DLPack capsule"
        )));
    };
    // SAFETY: the name was just read from this capsule, so GetPointer succeeds.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(raw, name_ptr) };
    let Some(pointer) = NonNull::new(pointer) else {
        return Err(PyBufferError::new_err("DLPack capsule holds a NULL tensor"));
    };
    // SAFETY: `used` is a static name, as CPython requires.
    if unsafe { ffi::PyCapsule_SetName(raw, used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    // SAFETY: the renamed capsule gave up ownership; the importer now owns the tensor and
    // calls its deleter exactly once (also when validation fails).
    unsafe {
        if versioned {
            import_versioned(pointer.cast())
        } else {
            import_legacy(pointer.cast())
        }
    }
    .map_err(to_py)
}
