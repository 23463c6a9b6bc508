//! What the C ABI's test files share: C strings and the calling thread's last error message.

use std::ffi::{CStr, CString};

use zerohop_capi::zh_last_error;

pub fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

pub fn last_error() -> String {
    // SAFETY: zh_last_error returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(zh_last_error()) }
        .to_string_lossy()
        .into_owned()
}
