//! Host import through the Arrow C data interface: a foreign `ArrowArray` becomes a record
//! batch whose buffers are the producer's, after every structural check the C interface
//! allows and a full validation of the buffer contents the import will read.

use std::sync::Arc;

use arrow_array::ffi::{from_ffi_and_data_type, FFI_ArrowArray};
use arrow_array::{make_array, Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray};
use arrow_schema::{DataType, Field, Schema};

use super::ffi_check::check_array;
use crate::error::{Error, Result};

/// A batch imported from the C data interface.
#[derive(Debug)]
pub struct HostImport {
    pub batch: RecordBatch,
    /// Columns arrow-rs copied into aligned buffers because the producer's were under-aligned
    /// (empty when every buffer is shared).
    pub realigned: Vec<String>,
}

fn invalid(reason: String) -> Error {
    Error::Arrow {
        what: "Arrow import".into(),
        reason,
    }
}

/// True when the producer's values buffer of a primitive (or FixedSizeList) array is not
/// aligned to its element type: arrow-rs then copies it into an aligned buffer on import.
fn under_aligned(array: &FFI_ArrowArray, data_type: &DataType) -> bool {
    match data_type {
        DataType::FixedSizeList(f, _) if array.num_children() == 1 => {
            under_aligned(array.child(0), f.data_type())
        }
        t if t.is_primitive() && array.num_buffers() == 2 => {
            let align = t.primitive_width().unwrap_or(1).clamp(1, 16);
            !(array.buffer(1) as usize).is_multiple_of(align)
        }
        _ => false,
    }
}

/// Takes ownership of `array` (of `data_type`, checked) and makes a record batch of it:
/// a struct array gives one column per field, anything else one column named `name` (or
/// "values"). `full_schema`, when the producer sent one, keeps its field metadata.
///
/// # Safety
/// `array` must be a live C data interface array whose buffers are as long as its lengths,
/// offsets and type require (the interface carries no buffer sizes, so that part is the
/// producer's promise; counts, pointers and contents are checked here).
pub unsafe fn import_host_batch(
    array: FFI_ArrowArray,
    data_type: &DataType,
    full_schema: Option<&Schema>,
    name: &str,
) -> Result<HostImport> {
    check_array(&array, data_type, "(import)")?;
    let (names, types): (Vec<String>, Vec<DataType>) = match data_type {
        DataType::Struct(fields) => fields
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .unzip(),
        other => (
            vec![if name.is_empty() { "values" } else { name }.to_string()],
            vec![other.clone()],
        ),
    };
    let misaligned: Vec<bool> = match data_type {
        DataType::Struct(_) => (0..types.len())
            .map(|i| under_aligned(array.child(i), &types[i]))
            .collect(),
        other => vec![under_aligned(&array, other)],
    };
    // SAFETY: the struct was checked above; buffer lengths are the caller's promise.
    let data = unsafe { from_ffi_and_data_type(array, data_type.clone()) }
        .map_err(|e| invalid(e.to_string()))?;
    // arrow-rs trusts offsets, child lengths and dictionary keys it imports; a producer's
    // mistake there would become an out-of-bounds read later, so check them all now.
    data.validate_full().map_err(|e| invalid(e.to_string()))?;
    let columns: Vec<ArrayRef> = match data_type {
        DataType::Struct(_) => StructArray::from(data).columns().to_vec(),
        _ => vec![make_array(data)],
    };
    let realigned = names
        .iter()
        .zip(misaligned)
        .filter(|(_, m)| *m)
        .map(|(n, _)| n.clone())
        .collect();
    let schema = match full_schema {
        Some(s) => Arc::new(s.clone()),
        None => Arc::new(Schema::new(
            names
                .iter()
                .zip(&columns)
                .map(|(n, c)| Field::new(n, c.data_type().clone(), c.null_count() > 0))
                .collect::<Vec<_>>(),
        )),
    };
    let rows = columns.first().map_or(0, |c| c.len());
    let batch = RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| invalid(e.to_string()))?;
    Ok(HostImport { batch, realigned })
}
