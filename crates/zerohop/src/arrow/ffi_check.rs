//! Structural checks on a foreign `ArrowArray` before anything reads through it.
//!
//! arrow-rs's accessors assert (panic) on NULL buffer or child tables and trust the counts; a
//! producer's mistakes must instead become errors. This walks the struct as the C ABI lays it
//! out and checks every count and pointer the import will follow. Buffer *sizes* cannot be
//! checked: the C data interface does not carry them.

use std::ffi::c_void;

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// The C ABI layout of `struct ArrowArray` (arrow-rs keeps its fields private).
#[repr(C)]
pub(crate) struct RawArrowArray {
    pub length: i64,
    pub null_count: i64,
    pub offset: i64,
    pub n_buffers: i64,
    pub n_children: i64,
    pub buffers: *const *const c_void,
    pub children: *const *const RawArrowArray,
    pub dictionary: *const RawArrowArray,
    pub release: Option<unsafe extern "C" fn(*mut RawArrowArray)>,
    pub private_data: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<RawArrowArray>() == 80);
const _: () = assert!(std::mem::size_of::<FFI_ArrowArray>() == 80);

/// The raw fields of `array`.
pub(crate) fn raw(array: &FFI_ArrowArray) -> &RawArrowArray {
    // SAFETY: FFI_ArrowArray is `#[repr(C)]` with exactly the fields of `struct ArrowArray`,
    // as RawArrowArray is (sizes asserted above); reading plain fields is sound.
    unsafe { &*(array as *const FFI_ArrowArray as *const RawArrowArray) }
}

fn bad(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: format!("Arrow array {what}"),
        reason,
    }
}

/// Checks `array` (of `data_type`) and its children: a live struct, non-negative length,
/// offset and null count (or -1), the buffer and child counts the type requires, and non-NULL
/// tables behind them.
pub fn check_array(array: &FFI_ArrowArray, data_type: &DataType, what: &str) -> Result<()> {
    check_raw(raw(array), data_type, what, 0)
}

const MAX_DEPTH: usize = 64;

fn check_raw(a: &RawArrowArray, data_type: &DataType, what: &str, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(bad(what, format!("nesting deeper than {MAX_DEPTH} levels")));
    }
    if a.release.is_none() {
        return Err(bad(what, "was already released (release is NULL)".into()));
    }
    if a.length < 0 || a.offset < 0 || a.null_count < -1 {
        return Err(bad(
            what,
            format!(
                "has length {}, offset {}, null_count {} (must be ≥ 0, ≥ 0, ≥ -1)",
                a.length, a.offset, a.null_count
            ),
        ));
    }
    if a.length.checked_add(a.offset).is_none() {
        return Err(bad(what, "length + offset overflows".into()));
    }
    let layout = arrow_data::layout(data_type);
    let expected = layout.buffers.len() + usize::from(layout.can_contain_null_mask);
    let n_buffers = usize::try_from(a.n_buffers).unwrap_or(usize::MAX);
    let count_ok = if layout.variadic {
        n_buffers >= expected && n_buffers < 1 << 20
    } else {
        n_buffers == expected
    };
    if !count_ok {
        return Err(bad(
            what,
            format!(
                "of type {data_type} has {} buffers, the type has {expected}",
                a.n_buffers
            ),
        ));
    }
    if n_buffers > 0 && a.buffers.is_null() {
        return Err(bad(what, "has a NULL buffer table".into()));
    }
    let children: Vec<(DataType, String)> = match data_type {
        DataType::Struct(fields) => fields
            .iter()
            .map(|f| (f.data_type().clone(), format!("{what}.{}", f.name())))
            .collect(),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![(f.data_type().clone(), format!("{what}.item"))],
        DataType::Union(fields, _) => fields
            .iter()
            .map(|(_, f)| (f.data_type().clone(), format!("{what}.{}", f.name())))
            .collect(),
        DataType::RunEndEncoded(r, v) => vec![
            (r.data_type().clone(), format!("{what}.run_ends")),
            (v.data_type().clone(), format!("{what}.values")),
        ],
        _ => vec![],
    };
    if a.n_children != children.len() as i64 {
        return Err(bad(
            what,
            format!(
                "of type {data_type} has {} children, the type has {}",
                a.n_children,
                children.len()
            ),
        ));
    }
    if !children.is_empty() && a.children.is_null() {
        return Err(bad(what, "has a NULL children table".into()));
    }
    for (i, (child_type, child_what)) in children.iter().enumerate() {
        // SAFETY: the children table is non-NULL and, by the C data interface, holds
        // `n_children` entries (checked equal to `children.len()`).
        let child = unsafe { *a.children.add(i) };
        if child.is_null() {
            return Err(bad(child_what, "is NULL".into()));
        }
        // SAFETY: a non-NULL child entry points to a live ArrowArray owned by the parent.
        check_raw(unsafe { &*child }, child_type, child_what, depth + 1)?;
    }
    if let DataType::Dictionary(_, value_type) = data_type {
        if a.dictionary.is_null() {
            return Err(bad(
                what,
                "is dictionary-encoded but has no dictionary".into(),
            ));
        }
        // SAFETY: a non-NULL dictionary points to a live ArrowArray owned by the parent.
        check_raw(unsafe { &*a.dictionary }, value_type, what, depth + 1)?;
    }
    Ok(())
}
