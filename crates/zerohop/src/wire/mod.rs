//! The wire format of pickled tensors and tables: the state that travels beside the data (or
//! a handle to it), and the checks that hold a received state against its data before any
//! view is built, so that a truncated, tampered or hostile state is an [`Error::Wire`] and
//! never a view past the end of a buffer. Python's `__reduce_ex__` and its rebuild functions
//! only convert this state to and from a dict; the checks and the views live here, where Rust
//! tests, Miri and the `wire_state` fuzz target reach them.

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

pub use crate::value::{DictBuilder, Fields, Value, MAX_DEPTH};
pub use pickle::{
    across_machines, reduce_table, reduce_tensor, set_across_machines, Incoming, Outgoing, Rebuilt,
    Reduced, SoaWire, TableWire, TensorWire,
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

/// (bytes from the span's start to element 0, bytes of the span) of a strided layout: the
/// memory between its lowest and highest element. Zero elements span nothing; `None` for a
/// layout that is not one (negative extents, ranks that differ, overflow).
pub fn span(shape: &[i64], strides: &[i64], itemsize: usize) -> Option<(i128, i128)> {
    if shape.len() != strides.len() || shape.iter().any(|&n| n < 0) {
        return None;
    }
    if shape.contains(&0) {
        return Some((0, 0));
    }
    // Checked throughout: a hostile state may hold 64 axes of extent and stride near 2^63.
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::from(n - 1).checked_mul(i128::from(s))?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let item = i128::try_from(itemsize).ok()?;
    let len = high.checked_sub(low)?.checked_add(1)?.checked_mul(item)?;
    Some((low.checked_neg()?.checked_mul(item)?, len))
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
