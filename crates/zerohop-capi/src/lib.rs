//! The C ABI of zerohop, for C and C++ programs (the CMS software's way in, say): SoA tables
//! on host or device memory from a chosen resource, tensor maps from the same spec language as
//! Python's `Table.tensors`, every tensor exported as a DLPack 1.3 `DLManagedTensorVersioned`,
//! and DLPack tensors written into columns (a model's outputs landing in the table).
//!
//! Conventions (the header, `include/zerohop.h`, is generated from this crate by cbindgen):
//! * Objects are opaque handles (`zh_schema`, `zh_resource`, `zh_table`, `zh_tensors`) made
//!   by `zh_*_new`-style calls and released by their `zh_*_free`; freeing NULL does nothing.
//! * Every fallible call returns a `zh_status`; on anything but `ZH_OK` the calling thread's
//!   `zh_last_error()` says what went wrong, naming the input. Out-parameters are written
//!   only on success.
//! * No panic crosses the boundary: every entry point runs inside one guard, and a bug inside
//!   zerohop becomes `ZH_INTERNAL` with its message. Calls that return no status (the frees,
//!   `zh_tensors_len`, `zh_tensors_name`, …) record the message and return what they return
//!   for a NULL handle. After `ZH_INTERNAL`, an input whose ownership passes to the call was
//!   released if it had been taken, and is leaked if not: never released twice.
//! * Exported tensors keep the table's memory alive: a table may be freed while tensors of
//!   it are still held; the memory goes when the last deleter has run.
//!
//! This is a crate of its own, not a module of the Python extension: a C++ program links it
//! without a Python interpreter, and the extension's library needs libpython's symbols.

#![allow(non_camel_case_types)]

mod batches;
mod blocks;
mod layout;
mod map;
mod resource;
mod rows;
mod schema;
mod status;
mod stream;
mod table;
mod wording;

pub use batches::*;
pub use blocks::*;
pub use layout::*;
pub use map::*;
pub use resource::*;
pub use rows::*;
pub use schema::*;
pub use status::*;
pub use stream::*;
pub use table::*;

use std::ffi::{c_char, CStr};

/// The library's version ("0.1.0"), a static string.
#[no_mangle]
pub extern "C" fn zh_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the version has no interior NUL"),
        };
    // Guarded like every entry point, though a constant cannot fail.
    status::guarded(|| Ok(VERSION.as_ptr())).unwrap_or(VERSION.as_ptr())
}

/// The DLPack version of the tensors this library exports: major * 100 + minor (103).
#[no_mangle]
pub extern "C" fn zh_dlpack_version() -> u32 {
    use zerohop::dlpack::ffi::{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    const VERSION: u32 = DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION;
    status::guarded(|| Ok(VERSION)).unwrap_or(VERSION)
}
