//! Structural checks on a foreign `ArrowArray` before anything reads through it.
//!
//! arrow-rs's accessors assert (panic) on NULL buffer or child tables and trust the counts; a
//! producer's mistakes must instead become errors. This walks the struct as the C ABI lays it
//! out and checks every count and pointer the import will follow. Buffer *sizes* cannot be
//! checked: the C data interface does not carry them.

use std::ffi::c_void;

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Schema};

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
    Error::Arrow {
        what: format!("Arrow array {what}"),
        reason,
    }
}

/// Checks `array` (of `data_type`) and its children, whose buffers the host may read: a live
/// struct, non-negative length, offset and null count (or -1), the buffer and child counts the
/// type requires, non-NULL tables behind them, extents that can exist, children as long as
/// their parent needs, and offsets that never decrease.
pub fn check_array(array: &FFI_ArrowArray, data_type: &DataType, what: &str) -> Result<()> {
    check_raw(raw(array), data_type, what, 0, true)
}

/// [`check_array`] for an array whose buffers the host must not read (device memory): every
/// check that needs only the structs, none that reads a buffer; types that cannot be checked
/// without reading one (offsets, dictionaries, unions, views) are refused.
pub(crate) fn check_unreadable_array(
    array: &FFI_ArrowArray,
    data_type: &DataType,
    what: &str,
) -> Result<()> {
    check_raw(raw(array), data_type, what, 0, false)
}

const MAX_DEPTH: usize = 64;

fn check_raw(
    a: &RawArrowArray,
    data_type: &DataType,
    what: &str,
    depth: usize,
    readable: bool,
) -> Result<()> {
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
    let Some(slots) = a.length.checked_add(a.offset) else {
        return Err(bad(what, "length + offset overflows".into()));
    };
    check_fixed_sizes(data_type, what)?;
    if !readable && needs_reading(data_type) {
        return Err(bad(
            what,
            format!(
                "of type {data_type} lives in memory the host cannot read, and its offsets or \
                 keys would have to be read to check it; only numeric primitives and \
                 FixedSizeLists or structs of them are taken from a device"
            ),
        ));
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
    check_extents(a, data_type, &layout, slots as usize, what)?;
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
        let child = unsafe { &*child };
        check_raw(child, child_type, child_what, depth + 1, readable)?;
        check_child_length(child, data_type, slots, child_what)?;
    }
    if let DataType::Dictionary(_, value_type) = data_type {
        if a.dictionary.is_null() {
            return Err(bad(
                what,
                "is dictionary-encoded but has no dictionary".into(),
            ));
        }
        // SAFETY: a non-NULL dictionary points to a live ArrowArray owned by the parent.
        check_raw(
            unsafe { &*a.dictionary },
            value_type,
            what,
            depth + 1,
            readable,
        )?;
    }
    if !readable {
        return Ok(());
    }
    let last = match data_type {
        DataType::Utf8 | DataType::Binary | DataType::List(_) | DataType::Map(..) => {
            check_offsets::<i32>(a, what)?
        }
        DataType::LargeUtf8 | DataType::LargeBinary | DataType::LargeList(_) => {
            check_offsets::<i64>(a, what)?
        }
        _ => return Ok(()),
    };
    if matches!(
        data_type,
        DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)
    ) && a.length > 0
    {
        // SAFETY: the children table was checked above to hold one non-NULL live child.
        let items = unsafe { &**a.children }.length;
        if last > items {
            return Err(bad(
                what,
                format!("ends at offset {last}, but its items array has {items} entries"),
            ));
        }
    }
    Ok(())
}

/// Types whose structure cannot be checked without reading a buffer (offsets, dictionary
/// keys, type ids, run ends, view headers).
fn needs_reading(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Utf8 | LargeUtf8
            | Binary
            | LargeBinary
            | Utf8View
            | BinaryView
            | List(_)
            | LargeList(_)
            | ListView(_)
            | LargeListView(_)
            | Map(..)
            | Dictionary(..)
            | Union(..)
            | RunEndEncoded(..)
    )
}

/// arrow-rs panics on negative fixed sizes (`w:-1`, `+w:-1`) when it lays out the type.
fn check_fixed_sizes(data_type: &DataType, what: &str) -> Result<()> {
    match data_type {
        DataType::FixedSizeBinary(n) | DataType::FixedSizeList(_, n) if *n < 0 => Err(bad(
            what,
            format!("of type {data_type} has a negative fixed size ({n})"),
        )),
        _ => Ok(()),
    }
}

/// [`check_fixed_sizes`] through every level of a type (a schema names them all at once).
fn check_type_tree(data_type: &DataType, depth: usize) -> Result<()> {
    check_fixed_sizes(data_type, "schema")?;
    if depth > MAX_DEPTH {
        return Err(bad(
            "schema",
            format!("nesting deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut result = Ok(());
    let mut visit = |t: &DataType| {
        if result.is_ok() {
            result = check_type_tree(t, depth + 1);
        }
    };
    match data_type {
        DataType::Struct(fields) => fields.iter().for_each(|f| visit(f.data_type())),
        DataType::Union(fields, _) => fields.iter().for_each(|(_, f)| visit(f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => visit(f.data_type()),
        DataType::Dictionary(k, v) => {
            visit(k);
            visit(v);
        }
        DataType::RunEndEncoded(r, v) => {
            visit(r.data_type());
            visit(v.data_type());
        }
        _ => {}
    }
    result
}

/// Every fixed-width buffer must be able to hold `slots` (offset + length) entries somewhere
/// in an address space: a length that says otherwise is refused before anything is sized by
/// it. Variable-width buffers are sized by their offsets, checked separately.
fn check_extents(
    a: &RawArrowArray,
    data_type: &DataType,
    layout: &arrow_data::DataTypeLayout,
    slots: usize,
    what: &str,
) -> Result<()> {
    use arrow_data::BufferSpec;
    let bitmap = slots.div_ceil(8);
    let offsets_extra = usize::from(matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::Map(..)
    ));
    let mask = usize::from(layout.can_contain_null_mask);
    let specs = std::iter::repeat_n(None, mask).chain(layout.buffers.iter().map(Some));
    for (i, spec) in specs.enumerate() {
        let bytes = match spec {
            None | Some(BufferSpec::BitMap) => Some(bitmap),
            Some(BufferSpec::FixedWidth { byte_width, .. }) => {
                let entries = if i == mask {
                    slots + offsets_extra
                } else {
                    slots
                };
                entries.checked_mul(*byte_width)
            }
            Some(BufferSpec::VariableWidth | BufferSpec::AlwaysNull) => continue,
        };
        // SAFETY: the buffer table is non-NULL and holds n_buffers ≥ the layout's entries.
        let start = unsafe { *a.buffers.add(i) } as usize;
        if start == 0 {
            continue;
        }
        let bytes =
            bytes.ok_or_else(|| bad(what, format!("buffer {i} of {slots} entries overflows")))?;
        crate::gate::check_extent(start, bytes, &format!("Arrow array {what} buffer {i}"))?;
    }
    Ok(())
}

/// A child must hold every entry its parent addresses (`parent_slots`: the parent's offset +
/// length): a struct's children one per row, a FixedSizeList's `size` per row.
fn check_child_length(
    child: &RawArrowArray,
    parent_type: &DataType,
    parent_slots: i64,
    what: &str,
) -> Result<()> {
    let needed = match parent_type {
        DataType::Struct(_) => Some(parent_slots),
        DataType::FixedSizeList(_, size) => parent_slots.checked_mul(i64::from(*size)),
        _ => return Ok(()),
    };
    let needed = needed.ok_or_else(|| bad(what, "its parent's entry count overflows".into()))?;
    if child.length < needed {
        return Err(bad(
            what,
            format!(
                "has {} entries, its parent addresses {needed} (offset + length of the parent \
                 × entries per row); a child shorter than its parent would be read past its \
                 end",
                child.length
            ),
        ));
    }
    Ok(())
}

/// Offsets must start at or above 0 and never decrease: arrow-rs sizes the values buffer
/// (or child) by the last offset and trusts the rest, so a bad one would turn into reads
/// outside the producer's memory. The offsets buffer itself holds `offset + length + 1`
/// entries: the one size the C data interface does promise.
fn check_offsets<O: Copy + Into<i64>>(a: &RawArrowArray, what: &str) -> Result<i64> {
    if a.length == 0 {
        return Ok(0);
    }
    // SAFETY: the buffer table is non-NULL with n_buffers ≥ 2 entries (checked above for
    // these types: validity, offsets, …).
    let offsets = unsafe { *a.buffers.add(1) } as *const O;
    if offsets.is_null() {
        return Err(bad(what, "has a NULL offsets buffer".into()));
    }
    let (first, count) = (a.offset as usize, a.length as usize + 1);
    // SAFETY: by the C data interface the offsets buffer holds `offset + length + 1` entries;
    // they are read unaligned because nothing guarantees a foreign buffer's alignment.
    let at = |i: usize| -> i64 { unsafe { offsets.add(first + i).read_unaligned() }.into() };
    let mut previous = at(0);
    if previous < 0 {
        return Err(bad(
            what,
            format!("starts at a negative offset ({previous})"),
        ));
    }
    for i in 1..count {
        let next = at(i);
        if next < previous {
            return Err(bad(
                what,
                format!(
                    "has decreasing offsets ({previous} then {next} at row {})",
                    i - 1
                ),
            ));
        }
        previous = next;
    }
    Ok(previous)
}

/// The C ABI layout of `struct ArrowSchema` (arrow-rs keeps its fields private).
#[repr(C)]
struct RawArrowSchema {
    format: *const std::ffi::c_char,
    name: *const std::ffi::c_char,
    metadata: *const std::ffi::c_char,
    flags: i64,
    n_children: i64,
    children: *const *const RawArrowSchema,
    dictionary: *const RawArrowSchema,
    release: Option<unsafe extern "C" fn(*mut RawArrowSchema)>,
    private_data: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<RawArrowSchema>() == 72);
const _: () = assert!(std::mem::size_of::<FFI_ArrowSchema>() == 72);

/// Checks a foreign `ArrowSchema` before arrow-rs reads it (its accessors assert, and panic,
/// on NULL or non-UTF-8 formats and names and on missing children), then converts it: the
/// data type, and the schema with metadata for structs.
pub fn schema_data_type(schema: &FFI_ArrowSchema) -> Result<(DataType, Option<Schema>)> {
    // SAFETY: FFI_ArrowSchema is `#[repr(C)]` with exactly the fields of `struct ArrowSchema`,
    // as RawArrowSchema is (sizes asserted above).
    let raw = unsafe { &*(schema as *const FFI_ArrowSchema as *const RawArrowSchema) };
    check_schema(raw, "schema", 0)?;
    let data_type = DataType::try_from(schema).map_err(|e| bad("schema", e.to_string()))?;
    check_type_tree(&data_type, 0)?;
    let full = matches!(data_type, DataType::Struct(_))
        .then(|| Schema::try_from(schema).ok())
        .flatten();
    Ok((data_type, full))
}

fn check_schema(s: &RawArrowSchema, what: &str, depth: usize) -> Result<()> {
    let what = format!("Arrow {what}");
    if depth > MAX_DEPTH {
        return Err(bad(
            &what,
            format!("nesting deeper than {MAX_DEPTH} levels"),
        ));
    }
    if s.release.is_none() {
        return Err(bad(&what, "was already released (release is NULL)".into()));
    }
    if s.format.is_null() {
        return Err(bad(&what, "has a NULL format string".into()));
    }
    // SAFETY: non-NULL, and the C data interface makes format a NUL-terminated string.
    let format = unsafe { std::ffi::CStr::from_ptr(s.format) }
        .to_str()
        .map_err(|_| bad(&what, "has a format string that is not UTF-8".into()))?;
    if !s.name.is_null() {
        // SAFETY: as for the format.
        unsafe { std::ffi::CStr::from_ptr(s.name) }
            .to_str()
            .map_err(|_| bad(&what, "has a name that is not UTF-8".into()))?;
    }
    let needed = match format {
        "+l" | "+L" | "+vl" | "+vL" | "+m" => Some(1),
        f if f.starts_with("+w:") => Some(1),
        "+r" => Some(2),
        _ => None,
    };
    if s.n_children < 0 || s.n_children > 1 << 20 {
        return Err(bad(&what, format!("has {} children", s.n_children)));
    }
    if let Some(n) = needed.filter(|&n| n != s.n_children) {
        return Err(bad(
            &what,
            format!(
                "of format {format:?} has {} children, the format needs {n}",
                s.n_children
            ),
        ));
    }
    if s.n_children > 0 && s.children.is_null() {
        return Err(bad(&what, "has a NULL children table".into()));
    }
    for i in 0..s.n_children as usize {
        // SAFETY: the table is non-NULL and holds n_children entries.
        let child = unsafe { *s.children.add(i) };
        if child.is_null() {
            return Err(bad(&what, format!("child {i} is NULL")));
        }
        // SAFETY: a non-NULL child points to a live schema owned by its parent.
        check_schema(unsafe { &*child }, &format!("schema child {i}"), depth + 1)?;
    }
    if !s.dictionary.is_null() {
        // SAFETY: a non-NULL dictionary points to a live schema owned by its parent.
        check_schema(unsafe { &*s.dictionary }, "schema dictionary", depth + 1)?;
    }
    Ok(())
}
