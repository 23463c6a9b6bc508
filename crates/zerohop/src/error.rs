//! One error type for the core crate. Every variant names the input that caused it, so the
//! Python layer can pass the message through unchanged.

use crate::device::Device;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unsupported dtype (code {code}, bits {bits}, lanes {lanes}): {reason}")]
    UnsupportedDType {
        code: u8,
        bits: u8,
        lanes: u16,
        reason: String,
    },
    #[error("unsupported device (type {device_type}, id {device_id}): not a DLPack 1.3 device")]
    UnsupportedDevice { device_type: i32, device_id: i32 },
    #[error("invalid DLPack tensor: {0}")]
    InvalidTensor(String),
    #[error("DLPack major version {major}.{minor} is not supported (zerohop reads 1.x)")]
    UnsupportedVersion { major: u32, minor: u32 },
    /// An argument that fits none of the kinds below (a dtype name, a log path, a pool's
    /// settings, …).
    #[error("invalid {what}: {reason}")]
    InvalidArgument { what: String, reason: String },
    /// Sizes and places in memory: a shape, strides, an alignment, a row count or range, a
    /// buffer too small or misplaced for a layout, an axis.
    #[error("invalid {what}: {reason}")]
    Layout { what: String, reason: String },
    /// What a table is made of: its columns, their names, dtypes and kinds.
    #[error("invalid {what}: {reason}")]
    Schema { what: String, reason: String },
    /// A tensor map's spec: its groups, their columns and order.
    #[error("invalid {what}: {reason}")]
    Spec { what: String, reason: String },
    /// A device named or found: one that does not exist, or not the one the data is on.
    #[error("invalid {what}: {reason}")]
    Device { what: String, reason: String },
    /// Arrow data or schemas that contradict themselves or have no tensor form.
    #[error("invalid {what}: {reason}")]
    Arrow { what: String, reason: String },
    /// A dtype named or asked for that zerohop does not know or cannot use there (a name, a
    /// NumPy type string, a dtype a move or a framework cannot take).
    #[error("invalid {what}: {reason}")]
    DType { what: String, reason: String },
    /// A memory resource's settings or handles: a pool's maximum, a chunk size, a log path, a
    /// shared-memory segment or handle, a CUDA IPC handle, a framework allocation's size or
    /// device.
    #[error("invalid {what}: {reason}")]
    Resource { what: String, reason: String },
    /// A free the allocator refuses (a block it did not hand out, a second free, another
    /// size): nothing is freed.
    #[error("invalid {what}: {reason}")]
    InvalidFree { what: String, reason: String },
    #[error("out of memory: could not allocate {requested} bytes on {device}: {reason}")]
    OutOfMemory {
        requested: usize,
        device: Device,
        reason: String,
    },
    #[error(
        "memory limit exceeded: requested {requested} bytes with {in_use} of {limit} bytes in use"
    )]
    LimitExceeded {
        requested: usize,
        in_use: usize,
        limit: usize,
    },
    #[error("data on {device} is not accessible from the host")]
    NotHostAccessible { device: Device },
    #[error("tensor is read-only: {0}")]
    ReadOnly(String),
    #[error("dtype mismatch: tensor holds {actual}, asked for {requested}")]
    DTypeMismatch { actual: String, requested: String },
    #[error("not contiguous: {0}")]
    NotContiguous(String),
    #[error("export refused: {0}")]
    Export(String),
    /// A system call failed for a reason that is neither bad input nor a lack of memory (too
    /// many open files, say); `errno` is the OS's code.
    #[error("{what} failed: {reason}")]
    System {
        what: String,
        errno: i32,
        reason: String,
    },
    /// Serialised state (a pickle's metadata, see `wire`) that contradicts itself or its
    /// data: truncated, tampered with, or written by another version.
    #[error("{0}")]
    Wire(String),
    /// A value of the wrong type where a state names what it needs (a pickled field), or an
    /// object that cannot take the path asked of it (pickling device memory).
    #[error("{0}")]
    WrongType(String),
    /// A stream a caller named cannot order this hand-off: 0 (ambiguous on a device), a
    /// stream for data that has none, a capture that cannot take the dependency.
    #[error("invalid stream {stream}: {reason}")]
    Stream { stream: String, reason: String },
    /// A consumer would need a copy (read-only memory for torch, strides for TensorFlow, …)
    /// that the caller did not allow; `reason` says why and what to do instead.
    #[error("tensor {tensor:?} cannot be shared: {reason}. Options: {}", reason.options())]
    HandOff {
        tensor: String,
        reason: crate::handoff::CopyReason,
    },
    /// A table has no column of this name (`columns`: the names it has, comma-separated).
    #[error("invalid column: no column named {name:?} (columns: {columns})")]
    NoSuchColumn { name: String, columns: String },
    /// A CUDA driver call failed: `call` says what zerohop asked, `code` is the driver's
    /// `CUresult`, `name` its symbol (`CUDA_ERROR_ILLEGAL_ADDRESS`, …).
    #[error("CUDA {call} failed: {name} (CUresult {code}): {description}")]
    Cuda {
        call: String,
        code: i32,
        name: String,
        description: String,
    },
    /// CUDA was asked for on a machine or build without it (no driver, no GPU, or zerohop
    /// built without its `cuda` feature).
    #[error("{what}: {reason}")]
    CudaUnavailable { what: String, reason: String },
}

impl Error {
    /// CUDA asked for by `what` in a build without the `cuda` feature.
    #[cfg(not(feature = "cuda"))]
    pub(crate) fn without_cuda(what: impl Into<String>) -> Error {
        Error::CudaUnavailable {
            what: what.into(),
            reason: "zerohop was built without CUDA".into(),
        }
    }
}
