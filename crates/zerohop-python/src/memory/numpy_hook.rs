//! NumPy's memory handler hook (NEP 49): NumPy arrays allocate their data from a zerohop
//! resource. NumPy keeps a reference to the handler capsule in every array it allocates, so
//! the resource outlives the last array that uses it, whatever is installed afterwards.

use std::ffi::{c_char, c_uint, c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::{ffi, intern};
use zerohop::memory::MemoryResource;
use zerohop::Stream;

use crate::memory::resource::PyResource;

const HANDLER_NAME: &CStr = c"mem_handler";
/// NumPy's C-API table slots (stable since NumPy 1.22, C feature version 0x0f).
const SLOT_FEATURE_VERSION: usize = 211;
const SLOT_SET_HANDLER: usize = 304;
const NEP49_FEATURE_VERSION: c_uint = 0x0f;
/// Bytes in front of each block that remember its size (realloc and free need it); a
/// multiple of 64 so arrays stay cache-line aligned.
const HEADER: usize = 128;
const BLOCK_ALIGN: usize = 256;

#[repr(C)]
struct PyDataMemAllocator {
    ctx: *mut c_void,
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
}

#[repr(C)]
struct PyDataMemHandler {
    name: [c_char; 127],
    version: u8,
    allocator: PyDataMemAllocator,
}

const _: () = assert!(std::mem::offset_of!(PyDataMemHandler, allocator) == 128);

/// The handler NumPy sees, plus the resource it allocates from. `handler` comes first so
/// the capsule pointer is also the handler pointer.
#[repr(C)]
struct Hook {
    handler: PyDataMemHandler,
    resource: Arc<dyn MemoryResource>,
}

/// # Safety
/// `ctx` is the `Hook` this handler belongs to, alive while NumPy can call it.
unsafe fn resource<'a>(ctx: *mut c_void) -> &'a dyn MemoryResource {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(*(ctx as *const Hook)).resource }
}

unsafe extern "C" fn hook_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    let Some(total) = size.checked_add(HEADER) else {
        return std::ptr::null_mut();
    };
    // SAFETY: NumPy passes the ctx we registered.
    let resource = unsafe { resource(ctx) };
    let block = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        resource.allocate(total, BLOCK_ALIGN, Stream::HOST)
    }));
    match block {
        Ok(Ok(block)) => {
            // SAFETY: the block has HEADER spare bytes in front, aligned for a usize.
            unsafe {
                (block.as_ptr() as *mut usize).write(size);
                block.as_ptr().add(HEADER) as *mut c_void
            }
        }
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn hook_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    let Some(size) = nelem.checked_mul(elsize) else {
        return std::ptr::null_mut();
    };
    // SAFETY: same ctx contract.
    let p = unsafe { hook_malloc(ctx, size) };
    if !p.is_null() {
        // SAFETY: `p` has `size` writable bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, size) };
    }
    p
}

unsafe extern "C" fn hook_free(ctx: *mut c_void, ptr: *mut c_void, _size: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: `ptr` came from `hook_malloc`, so its header sits HEADER bytes before it.
    unsafe {
        let block = (ptr as *mut u8).sub(HEADER);
        let size = (block as *const usize).read();
        let resource = resource(ctx);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            resource.deallocate(
                NonNull::new_unchecked(block),
                size + HEADER,
                BLOCK_ALIGN,
                Stream::HOST,
            )
        }));
    }
}

unsafe extern "C" fn hook_realloc(
    ctx: *mut c_void,
    ptr: *mut c_void,
    new_size: usize,
) -> *mut c_void {
    // SAFETY: same ctx contract; `ptr` (when non-null) came from `hook_malloc`.
    unsafe {
        let fresh = hook_malloc(ctx, new_size);
        if fresh.is_null() || ptr.is_null() {
            return fresh;
        }
        let old_size = ((ptr as *mut u8).sub(HEADER) as *const usize).read();
        std::ptr::copy_nonoverlapping(ptr as *const u8, fresh as *mut u8, old_size.min(new_size));
        hook_free(ctx, ptr, old_size);
        fresh
    }
}

/// # Safety
/// Called by CPython when the handler capsule dies: no array uses the handler any more.
unsafe extern "C" fn destroy_hook(capsule: *mut ffi::PyObject) {
    // SAFETY: the capsule was made in `install` over a leaked Box<Hook>.
    unsafe {
        let hook = ffi::PyCapsule_GetPointer(capsule, HANDLER_NAME.as_ptr()) as *mut Hook;
        if hook.is_null() {
            ffi::PyErr_Clear();
        } else {
            drop(Box::from_raw(hook));
        }
    }
}

type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;

fn set_handler_fn(py: Python<'_>) -> PyResult<SetHandler> {
    let module = py
        .import(intern!(py, "numpy._core._multiarray_umath"))
        .or_else(|_| py.import(intern!(py, "numpy.core._multiarray_umath")))?;
    let api = module.getattr(intern!(py, "_ARRAY_API"))?;
    // SAFETY: `_ARRAY_API` is NumPy's unnamed capsule over its C-API function table.
    let table = unsafe { ffi::PyCapsule_GetPointer(api.as_ptr(), std::ptr::null()) }
        as *const *const c_void;
    if table.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: slot 211 is PyArray_GetNDArrayCFeatureVersion in every NumPy with this table;
    // from feature version 0x0f on, slot 304 is PyDataMem_SetHandler.
    unsafe {
        let feature: unsafe extern "C" fn() -> c_uint =
            std::mem::transmute(*table.add(SLOT_FEATURE_VERSION));
        if feature() < NEP49_FEATURE_VERSION {
            return Err(PyRuntimeError::new_err(
                "this NumPy predates memory handlers (NEP 49 needs NumPy >= 1.22)",
            ));
        }
        Ok(std::mem::transmute::<*const c_void, SetHandler>(
            *table.add(SLOT_SET_HANDLER),
        ))
    }
}

/// Makes NumPy allocate from `resource` in the current context; returns the previous handler
/// (a capsule) for `restore_numpy_handler`.
#[pyfunction]
fn install_numpy_handler(py: Python<'_>, resource: &Bound<'_, PyResource>) -> PyResult<Py<PyAny>> {
    let set_handler = set_handler_fn(py)?;
    let mut name = [0 as c_char; 127];
    for (slot, byte) in name.iter_mut().zip(b"zerohop") {
        *slot = *byte as c_char;
    }
    let hook = Box::into_raw(Box::new(Hook {
        handler: PyDataMemHandler {
            name,
            version: 1,
            allocator: PyDataMemAllocator {
                ctx: std::ptr::null_mut(),
                malloc: hook_malloc,
                calloc: hook_calloc,
                realloc: hook_realloc,
                free: hook_free,
            },
        },
        resource: resource.get().inner.clone(),
    }));
    // SAFETY: `hook` is a fresh, uniquely owned allocation.
    unsafe { (*hook).handler.allocator.ctx = hook as *mut c_void };
    // SAFETY: the capsule takes ownership of `hook` and frees it in `destroy_hook`.
    let capsule = unsafe {
        ffi::PyCapsule_New(
            hook as *mut c_void,
            HANDLER_NAME.as_ptr(),
            Some(destroy_hook),
        )
    };
    if capsule.is_null() {
        // SAFETY: no capsule took ownership.
        drop(unsafe { Box::from_raw(hook) });
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `capsule` is a new reference we own.
    let capsule = unsafe { Bound::from_owned_ptr(py, capsule) };
    // SAFETY: SetHandler takes a borrowed handler capsule and returns a new reference to the
    // previous one (NULL with an exception set on failure).
    let previous = unsafe { set_handler(capsule.as_ptr()) };
    if previous.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `previous` is a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, previous) }.unbind())
}

/// Puts back a handler returned by `install_numpy_handler`.
#[pyfunction]
fn restore_numpy_handler(py: Python<'_>, previous: &Bound<'_, PyAny>) -> PyResult<()> {
    let set_handler = set_handler_fn(py)?;
    // SAFETY: as in `install_numpy_handler`.
    let replaced = unsafe { set_handler(previous.as_ptr()) };
    if replaced.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `replaced` is a new reference; dropping it releases it.
    drop(unsafe { Bound::from_owned_ptr(py, replaced) });
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(install_numpy_handler, m)?)?;
    m.add_function(wrap_pyfunction!(restore_numpy_handler, m)?)?;
    Ok(())
}
