//! The wire format of pickled tensors and tables: the state that travels beside the data (or
//! a handle to it), and the checks that hold a received state against its data before any
//! view is built, so that a truncated, tampered or hostile state is an [`Error::Wire`] and
//! never a view past the end of a buffer. Python's `__reduce_ex__` and its rebuild functions
//! only convert this state to and from a dict; the checks and the views live here, where Rust
//! tests, Miri and the `wire_state` fuzz target reach them.

mod across;
#[cfg(feature = "cuda")]
mod cuda_ipc;
mod pickle;
#[cfg(test)]
mod pickle_tests;
#[cfg(feature = "cuda")]
mod staging;
mod table;
mod tensor;
#[cfg(test)]
mod tests;

pub use crate::tensor::span;
pub use crate::value::{DictBuilder, Fields, Value, MAX_DEPTH};
pub use across::{across_machines, AcrossMachines};
pub use pickle::{
    reduce_table, reduce_tensor, Incoming, Outgoing, Rebuilt, Reduced, SoaWire, TableWire,
    TensorWire,
};
#[cfg(feature = "cuda")]
pub use staging::{host_copy, receiving_device};
pub use table::{schema_from_wire, schema_to_wire, TableState, WireColumn};
pub use tensor::TensorState;

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The layout of the state; a pickle written with another is refused.
pub const FORMAT: u32 = 1;

/// Refuses a state of another format.
pub fn check_format(format: Option<u32>, shown: &str) -> Result<()> {
    match format {
        Some(FORMAT) => Ok(()),
        _ => Err(Error::Wire(format!(
            "this pickle's zerohop format is {shown}; this zerohop reads format {FORMAT} (was \
             it written by another version?)"
        ))),
    }
}

/// A dtype by the name `Display` gives it, lanes ("float32x4") included.
pub fn parse_dtype(name: &str) -> Result<DType> {
    if let Ok(dtype) = DType::from_name(name) {
        return Ok(dtype);
    }
    let lanes = name
        .rsplit_once('x')
        .and_then(|(base, lanes)| Some((DType::from_name(base).ok()?, lanes.parse::<u16>().ok()?)));
    match lanes {
        Some((base, lanes)) => DType::from_raw(base.code as u8, base.bits, lanes),
        None => Err(Error::Wire(format!(
            "pickled data: {name:?} is not a dtype name"
        ))),
    }
}

/// Refuses received data whose length is not the state's.
pub fn check_len(buffer: &Buffer, nbytes: usize) -> Result<()> {
    if buffer.len() != nbytes {
        return Err(Error::Wire(format!(
            "pickled zerohop data: the buffer holds {} bytes, its metadata says {nbytes} \
             (truncated or mismatched buffers?)",
            buffer.len()
        )));
    }
    Ok(())
}

/// `buffer`, or a private copy aligned to `copy_align` when it does not start on a multiple
/// of `needed` (some transports deliver frames at any offset); the flag says whether it was
/// copied, for the caller to report.
pub fn aligned(buffer: Buffer, needed: usize, copy_align: usize) -> Result<(Buffer, bool)> {
    if buffer.is_empty() || (buffer.as_ptr() as usize).is_multiple_of(needed.max(1)) {
        return Ok((buffer, false));
    }
    let copy = Buffer::zeroed_host(buffer.len(), copy_align.max(needed))?;
    // SAFETY: two distinct host buffers of `buffer.len()` bytes (received data is host
    // memory); the copy is private to this call until returned.
    unsafe { std::ptr::copy_nonoverlapping(buffer.as_ptr(), copy.as_ptr(), buffer.len()) };
    Ok((copy, true))
}
