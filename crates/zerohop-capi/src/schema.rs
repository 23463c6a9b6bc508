//! `zh_schema`: the columns of a table, built one column at a time.

use std::ffi::c_char;

use zerohop::soa::{ColumnKind, ColumnSpec, ComponentOrder, Schema};
use zerohop::DType;

use crate::status::{
    give, guard, guarded, handle, handle_mut, out_param, release, text, zh_status, Failure, Outcome,
};

/// A schema under construction (opaque): every column added is checked by the core when it
/// is added, so a schema handle always holds a valid schema.
pub struct zh_schema {
    pub(crate) schema: Schema,
}

/// How the R×C components of a matrix column are stored.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum zh_order {
    /// Component r*C + c (C order).
    ZH_ROW_MAJOR = 0,
    /// Component c*R + r (Fortran order, Eigen's default).
    ZH_COLUMN_MAJOR = 1,
}

impl zh_schema {
    pub(crate) fn build(&self) -> Outcome<Schema> {
        Ok(self.schema.clone())
    }
}

/// A new, empty schema in `*out`; free it with `zh_schema_free`.
///
/// # Safety
/// `out` must be writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_new(out: *mut *mut zh_schema) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        give(
            out,
            zh_schema {
                schema: Schema::default(),
            },
        );
        Ok(())
    })
}

/// Frees a schema made by `zh_schema_new` (NULL: nothing). Tables made from it are not
/// affected.
///
/// # Safety
/// `schema` must come from `zh_schema_new` and not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_free(schema: *mut zh_schema) {
    // SAFETY: per the contract.
    unsafe { release(schema) }
}

/// Adds a column, checked now by the core (a name used before, an empty one, a dtype or
/// shape no tensor holds: ZH_INVALID_ARGUMENT naming the column, the schema unchanged).
///
/// # Safety
/// `schema` must be a live handle (or NULL, an error); `name`, `dtype` NUL-terminated.
unsafe fn add(
    schema: *mut zh_schema,
    name: *const c_char,
    dtype: *const c_char,
    kind: ColumnKind,
) -> zh_status {
    guard(|| {
        // SAFETY: per this function's contract.
        let schema = unsafe { handle_mut(schema, "schema") }?;
        // SAFETY: as above.
        let name = unsafe { text(name, "column name") }?;
        // SAFETY: as above.
        let dtype_name = unsafe { text(dtype, "dtype") }?;
        let dtype = DType::from_name(dtype_name)
            .map_err(|e| Failure::invalid(format!("column {name:?}: {e}")))?;
        schema.schema.push(ColumnSpec {
            name: name.to_owned(),
            dtype,
            kind,
        })?;
        Ok(())
    })
}

/// Adds a per-row column of `dtype` ("float32", "int64", …, as NumPy names them).
///
/// # Safety
/// `schema` must be a live handle or NULL; `name` and `dtype` NUL-terminated strings or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_add_column(
    schema: *mut zh_schema,
    name: *const c_char,
    dtype: *const c_char,
) -> zh_status {
    // SAFETY: forwarded contract.
    unsafe { add(schema, name, dtype, ColumnKind::Column) }
}

/// Adds a table scalar: one value for the whole table (a stride-0 column in tensor maps).
///
/// # Safety
/// As `zh_schema_add_column`.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_add_scalar(
    schema: *mut zh_schema,
    name: *const c_char,
    dtype: *const c_char,
) -> zh_status {
    // SAFETY: forwarded contract.
    unsafe { add(schema, name, dtype, ColumnKind::TableScalar) }
}

/// Adds a vector column of `len` values per row (stored as `len` padded columns).
///
/// # Safety
/// As `zh_schema_add_column`.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_add_vector(
    schema: *mut zh_schema,
    name: *const c_char,
    dtype: *const c_char,
    len: usize,
) -> zh_status {
    if len == 0 {
        return guard(|| Err(Failure::invalid("vector length is 0")));
    }
    // SAFETY: forwarded contract.
    unsafe { add(schema, name, dtype, ColumnKind::Vector(len)) }
}

/// Adds a matrix column of `rows`×`cols` values per row, components stored in `order`
/// (`ZH_ROW_MAJOR` or `ZH_COLUMN_MAJOR`; any other value is `ZH_INVALID_ARGUMENT`). `order` is
/// an `int32_t` rather than the enum so that an out-of-range value is an error, not undefined
/// behaviour.
///
/// # Safety
/// As `zh_schema_add_column`.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_add_matrix(
    schema: *mut zh_schema,
    name: *const c_char,
    dtype: *const c_char,
    rows: usize,
    cols: usize,
    order: i32,
) -> zh_status {
    if rows == 0 || cols == 0 {
        return guard(|| {
            Err(Failure::invalid(format!(
                "matrix shape {rows}x{cols} is empty"
            )))
        });
    }
    let order = match order {
        o if o == zh_order::ZH_ROW_MAJOR as i32 => ComponentOrder::RowMajor,
        o if o == zh_order::ZH_COLUMN_MAJOR as i32 => ComponentOrder::ColumnMajor,
        other => {
            return guard(|| {
                Err(Failure::invalid(format!(
                    "matrix order {other} is neither ZH_ROW_MAJOR (0) nor ZH_COLUMN_MAJOR (1)"
                )))
            })
        }
    };
    // SAFETY: forwarded contract.
    unsafe {
        add(
            schema,
            name,
            dtype,
            ColumnKind::Matrix { rows, cols, order },
        )
    }
}

/// The number of columns added so far, or 0 for NULL.
///
/// # Safety
/// `schema` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_len(schema: *const zh_schema) -> usize {
    // SAFETY: per the contract.
    guarded(|| Ok(unsafe { handle(schema, "schema") }.map_or(0, |s| s.schema.columns().len())))
        .unwrap_or(0)
}
