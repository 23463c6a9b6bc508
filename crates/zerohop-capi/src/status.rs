//! Status codes, the thread's last error message, and the guard every entry point runs in.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call came to. `ZH_OK` is 0; everything else has a message in `zh_last_error()`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum zh_status {
    ZH_OK = 0,
    /// A NULL handle, a bad name, an unknown dtype, a spec that does not parse, a tensor of
    /// the wrong dtype or shape.
    ZH_INVALID_ARGUMENT = 1,
    /// A column or tensor name the table or map does not have.
    ZH_NOT_FOUND = 2,
    /// The resource could not give the memory (or a limit refused it).
    ZH_OUT_OF_MEMORY = 3,
    /// A write into read-only memory.
    ZH_READ_ONLY = 4,
    /// Valid, but not something zerohop does (a layout strides cannot describe, say).
    ZH_UNSUPPORTED = 5,
    /// The CUDA driver failed or is missing.
    ZH_DEVICE_ERROR = 6,
    /// A bug inside zerohop (a caught panic); the message says where.
    ZH_INTERNAL = 7,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the calling thread's last failed call ("" when none failed yet). The string
/// stays valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn zh_last_error() -> *const c_char {
    // Guarded like every entry point; whatever happens, the caller gets a C string.
    guarded(|| Ok(message())).unwrap_or_else(|_| message())
}

/// The thread's message, or "" once the thread's storage is gone (a deleter run from a
/// thread-local destructor may still ask).
fn message() -> *const c_char {
    LAST_ERROR
        .try_with(|m| m.try_borrow().map(|m| m.as_ptr()).ok())
        .ok()
        .flatten()
        .unwrap_or(c"".as_ptr())
}

/// An error on its way to the caller: a status and a message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub status: zh_status,
    pub message: String,
}

impl Failure {
    pub fn invalid(message: impl Into<String>) -> Self {
        Failure {
            status: zh_status::ZH_INVALID_ARGUMENT,
            message: message.into(),
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Failure {
            status: zh_status::ZH_NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<zerohop::Error> for Failure {
    fn from(err: zerohop::Error) -> Self {
        use zerohop::Error as E;
        let status = match &err {
            E::OutOfMemory { .. } | E::LimitExceeded { .. } => zh_status::ZH_OUT_OF_MEMORY,
            E::ReadOnly(_)
            | E::HandOff {
                reason: zerohop::handoff::CopyReason::ReadOnlyIgnored,
                ..
            } => zh_status::ZH_READ_ONLY,
            E::HandOff { .. } => zh_status::ZH_UNSUPPORTED,
            E::UnsupportedDType { .. }
            | E::UnsupportedDevice { .. }
            | E::UnsupportedVersion { .. }
            | E::NotHostAccessible { .. }
            | E::NotContiguous(_)
            | E::Export(_) => zh_status::ZH_UNSUPPORTED,
            E::Cuda { .. } | E::CudaUnavailable { .. } => zh_status::ZH_DEVICE_ERROR,
            E::NoSuchColumn { .. } => zh_status::ZH_NOT_FOUND,
            E::InvalidArgument { .. }
            | E::Layout { .. }
            | E::Schema { .. }
            | E::Spec { .. }
            | E::Device { .. }
            | E::Arrow { .. }
            | E::InvalidFree { .. }
            | E::DType { .. }
            | E::Resource { .. }
            | E::Stream { .. }
            | E::InvalidTensor(_)
            | E::DTypeMismatch { .. }
            | E::WrongType(_)
            | E::Wire(_)
            | E::System { .. } => zh_status::ZH_INVALID_ARGUMENT,
        };
        Failure {
            status,
            message: crate::wording::in_c_terms(err.to_string()),
        }
    }
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

fn remember(message: &str) {
    // Interior NULs cannot go into a C string; show them instead of dropping the message.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_`: recording a message must not panic itself (no thread storage left, a borrow).
    let _ = LAST_ERROR.try_with(|m| m.try_borrow_mut().map(|mut m| *m = text));
}

/// Runs an entry point's body: its failures and panics become a status and a message.
pub(crate) fn guard(body: impl FnOnce() -> Outcome) -> zh_status {
    match guarded(body) {
        Ok(()) => zh_status::ZH_OK,
        Err(status) => status,
    }
}

/// As [`guard`], for entry points that return a value rather than a status (frees, lengths,
/// names): the value, or the status of the failure or panic whose message is now recorded
/// for `zh_last_error`, for the caller to turn into its documented fallback.
pub(crate) fn guarded<T>(body: impl FnOnce() -> Outcome<T>) -> Result<T, zh_status> {
    let run = || {
        #[cfg(feature = "panic-injection")]
        injection::fire();
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => {
            remember(&failure.message);
            Err(failure.status)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            remember(&format!(
                "internal error in zerohop (please report): {what}"
            ));
            Err(zh_status::ZH_INTERNAL)
        }
    }
}

/// Test-only (feature `panic-injection`, enabled by this crate's own tests and never in a
/// build that ships): makes the calling thread's next entry point panic inside its guard, so
/// a test can prove, entry point by entry point, that no panic reaches C.
#[cfg(feature = "panic-injection")]
#[doc(hidden)]
pub mod injection {
    use std::cell::RefCell;

    thread_local! {
        static ARMED: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// The next guarded call on this thread panics with a message containing `tag`.
    pub fn panic_in_next_call(tag: &str) {
        ARMED.with(|a| *a.borrow_mut() = Some(tag.to_owned()));
    }

    /// Whether a panic is still armed (true after a call that no guard ran).
    pub fn armed() -> bool {
        ARMED.with(|a| a.borrow().is_some())
    }

    pub(crate) fn fire() {
        if let Some(tag) = ARMED.with(|a| a.borrow_mut().take()) {
            panic!("panic injected by a test into {tag}");
        }
    }
}

/// A non-NULL handle's referent, or an invalid-argument failure naming it.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` that nothing mutates during the borrow.
pub(crate) unsafe fn handle<'a, T>(ptr: *const T, what: &str) -> Outcome<&'a T> {
    // SAFETY: per the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// As [`handle`], mutably.
///
/// # Safety
/// A non-NULL `ptr` must point to a live `T` that nothing else uses during the borrow.
pub(crate) unsafe fn handle_mut<'a, T>(ptr: *mut T, what: &str) -> Outcome<&'a mut T> {
    // SAFETY: per the caller's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// A NUL-terminated UTF-8 argument as a `&str`.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string that outlives the borrow.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Outcome<&'a str> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: per the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| Failure::invalid(format!("{what} is not valid UTF-8")))
}

/// Checks an out-parameter before any work is done, so a NULL one fails cleanly.
pub(crate) fn out_param<T>(ptr: *mut T, what: &str) -> Outcome<()> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!(
            "{what} (the out-parameter) is NULL"
        )));
    }
    Ok(())
}

/// Boxes `value` into the out-parameter `out` (which the caller checked with `out_param`).
pub(crate) fn give<T>(out: *mut *mut T, value: T) {
    // SAFETY: `out` is non-NULL (checked by the caller) and writable per the entry point's
    // contract.
    unsafe { *out = Box::into_raw(Box::new(value)) };
}

/// Frees a handle made by [`give`] (NULL: nothing), inside the guard: a `zh_*_free` returns
/// nothing, so a panic while dropping (a resource's deallocate, say) is recorded for
/// `zh_last_error` and the call returns; the handle is gone either way.
///
/// # Safety
/// `ptr` must come from `give` for this `T` and not be used again.
pub(crate) unsafe fn release<T>(ptr: *mut T) {
    let _ = guarded(|| {
        if !ptr.is_null() {
            // SAFETY: per the contract: a Box leaked by `give`, freed once.
            drop(unsafe { Box::from_raw(ptr) });
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerohop::Error as E;

    fn status(err: E) -> zh_status {
        Failure::from(err).status
    }

    #[test]
    fn each_typed_error_has_its_status_whatever_its_words() {
        let invalid = |what: &str| E::InvalidArgument {
            what: what.into(),
            reason: "r".into(),
        };
        let cuda = E::Cuda {
            call: "memset".into(),
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            description: "an illegal memory access was encountered".into(),
        };
        let unavailable = E::CudaUnavailable {
            what: "CUDA device".into(),
            reason: "cuda:0 does not exist (0 device(s) visible)".into(),
        };
        assert_eq!(status(cuda), zh_status::ZH_DEVICE_ERROR);
        assert_eq!(status(unavailable), zh_status::ZH_DEVICE_ERROR);
        // A bad device number or a handle refused is the caller's, though it names CUDA.
        assert_eq!(
            status(invalid("CUDA device")),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(status(invalid("CUDA IPC")), zh_status::ZH_INVALID_ARGUMENT);
        let missing = E::NoSuchColumn {
            name: "x".into(),
            columns: "a".into(),
        };
        assert_eq!(status(missing), zh_status::ZH_NOT_FOUND);
        assert_eq!(status(E::Wire("w".into())), zh_status::ZH_INVALID_ARGUMENT);
        assert_eq!(status(E::ReadOnly("t".into())), zh_status::ZH_READ_ONLY);
    }
}

#[cfg(test)]
mod table_tests {
    use super::{zh_status, Failure};
    use zerohop::handoff::CopyReason;
    use zerohop::{Device, Error};

    /// One error of every kind, named as docs/handoff.md's table names it.
    fn one_of_each() -> Vec<(&'static str, Error)> {
        let s = || String::from("x");
        vec![
            (
                "InvalidArgument",
                Error::InvalidArgument {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Stream",
                Error::Stream {
                    stream: s(),
                    reason: s(),
                },
            ),
            (
                "HandOff",
                Error::HandOff {
                    tensor: s(),
                    reason: CopyReason::Requested,
                },
            ),
            (
                "NoSuchColumn",
                Error::NoSuchColumn {
                    name: s(),
                    columns: s(),
                },
            ),
            ("ReadOnly", Error::ReadOnly(s())),
            ("Export", Error::Export(s())),
            ("NotContiguous", Error::NotContiguous(s())),
            (
                "NotHostAccessible",
                Error::NotHostAccessible {
                    device: Device::CPU,
                },
            ),
            (
                "UnsupportedDType",
                Error::UnsupportedDType {
                    code: 0,
                    bits: 0,
                    lanes: 0,
                    reason: s(),
                },
            ),
            (
                "UnsupportedDevice",
                Error::UnsupportedDevice {
                    device_type: 0,
                    device_id: 0,
                },
            ),
            (
                "UnsupportedVersion",
                Error::UnsupportedVersion { major: 9, minor: 0 },
            ),
            ("InvalidTensor", Error::InvalidTensor(s())),
            (
                "DTypeMismatch",
                Error::DTypeMismatch {
                    actual: s(),
                    requested: s(),
                },
            ),
            ("WrongType", Error::WrongType(s())),
            (
                "Layout",
                Error::Layout {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Schema",
                Error::Schema {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Spec",
                Error::Spec {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Device",
                Error::Device {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Arrow",
                Error::Arrow {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "InvalidFree",
                Error::InvalidFree {
                    what: s(),
                    reason: s(),
                },
            ),
            ("Wire", Error::Wire(s())),
            (
                "DType",
                Error::DType {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "Resource",
                Error::Resource {
                    what: s(),
                    reason: s(),
                },
            ),
            (
                "OutOfMemory",
                Error::OutOfMemory {
                    requested: 1,
                    device: Device::CPU,
                    reason: s(),
                },
            ),
            (
                "LimitExceeded",
                Error::LimitExceeded {
                    requested: 1,
                    in_use: 1,
                    limit: 1,
                },
            ),
            (
                "System",
                Error::System {
                    what: s(),
                    errno: 24,
                    reason: s(),
                },
            ),
            (
                "Cuda",
                Error::Cuda {
                    call: s(),
                    code: 1,
                    name: s(),
                    description: s(),
                },
            ),
            (
                "CudaUnavailable",
                Error::CudaUnavailable {
                    what: s(),
                    reason: s(),
                },
            ),
        ]
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the docs from disk")]
    fn the_docs_table_of_kinds_and_statuses_is_the_mapping() {
        let docs = include_str!("../../../docs/handoff.md");
        for (kind, err) in one_of_each() {
            let row = docs
                .lines()
                .find(|l| l.starts_with(&format!("| `{kind}` ")))
                .unwrap_or_else(|| panic!("docs/handoff.md has no row for {kind}"));
            let status = format!("{:?}", Failure::from(err).status);
            let c_column = row.rsplit('|').nth(1).unwrap_or("");
            assert!(
                c_column.contains(&status),
                "{kind}: the docs say {c_column:?}, C gives {status}"
            );
        }
        let read_only = Error::HandOff {
            tensor: "x".into(),
            reason: CopyReason::ReadOnlyIgnored,
        };
        assert_eq!(Failure::from(read_only).status, zh_status::ZH_READ_ONLY);
    }
}
