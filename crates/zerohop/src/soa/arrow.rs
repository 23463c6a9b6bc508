//! SoA tables and tensor maps meet Arrow record batches.
//!
//! SoA → Arrow: plain columns become primitive arrays over the table's own buffer (no copy);
//! vector and matrix columns become FixedSizeLists, which store a row's components together
//! while SoA stores them apart — a transpose, done only when the caller allows a copy and then
//! reported. Table scalars travel in the schema metadata (`zerohop.scalar.<name>` =
//! `<dtype>:<hex bytes>`), and a column-major matrix says so in its field metadata, so a
//! round trip gives the same schema back.
//!
//! Arrow → SoA is always a copy into one aligned buffer. To use Arrow memory without copying,
//! map tensors straight off the batch with [`TensorMap::apply_arrow`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};

use super::schema::{ColumnKind, ColumnSpec, ComponentOrder, Schema};
use super::table::SoaTable;
use super::tensormap::{MapOptions, MappedTensor, TensorMap};
use crate::arrow::{
    array_to_tensor, dtype_of_arrow, share_as_arrow_buffer, tensor_to_array_within,
    values_allocation, ImportOptions,
};
use crate::buffer::Owner;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::handoff::CopyReason;
use crate::tensor::TensorView;

const SCALAR_PREFIX: &str = "zerohop.scalar.";
const ORDER_KEY: &str = "zerohop.order";

/// A record batch made from an SoA table.
#[derive(Clone, Debug)]
pub struct ArrowExport {
    pub batch: RecordBatch,
    /// Columns whose arrays are copies (transposed vectors and matrices); the rest share the
    /// table's memory.
    pub copied_columns: Vec<String>,
}

fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Spec {
        what: what.into(),
        reason: reason.into(),
    }
}

impl SoaTable {
    /// This table as a record batch; see the module docs for what is shared and what copied.
    /// Without `allow_copy`, a vector or matrix column is an error naming it.
    pub fn to_record_batch(&self, allow_copy: bool) -> Result<ArrowExport> {
        let mut fields = Vec::new();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        let mut metadata = HashMap::new();
        let mut copied_columns = Vec::new();
        // One Arrow buffer over the whole table; each column is a slice of it.
        let whole = TensorView::from_buffer(
            self.buffer().clone(),
            DType::U8,
            &[self.buffer().len() as i64],
        )?;
        let parent = share_as_arrow_buffer(&whole)?;
        for spec in self.schema().columns() {
            let view = self.column_view(&spec.name)?;
            if spec.kind == ColumnKind::TableScalar {
                metadata.insert(
                    format!("{SCALAR_PREFIX}{}", spec.name),
                    format!("{}:{}", spec.dtype, hex(&scalar_bytes(&view)?)),
                );
                continue;
            }
            let what = format!("column {:?} ({})", spec.name, spec.kind);
            // The view is logical (n, R, C) whatever the component order; a compact copy of it
            // is row-major per row, the order FixedSizeList keeps.
            let row_major = view;
            let exported = if spec.kind == ColumnKind::Column {
                tensor_to_array_within(&row_major, &what, false, Some(&parent))?
            } else if allow_copy {
                tensor_to_array_within(&row_major, &what, true, Some(&parent))?
            } else {
                return Err(invalid(
                    what,
                    "SoA stores its components apart and Arrow's FixedSizeList stores them \
                     together, so exporting it is a transpose copy; allow the copy explicitly",
                ));
            };
            if exported.copied {
                copied_columns.push(spec.name.clone());
            }
            let mut field = Field::new(&spec.name, exported.array.data_type().clone(), false);
            if let ColumnKind::Matrix {
                order: ComponentOrder::ColumnMajor,
                ..
            } = spec.kind
            {
                field = field
                    .with_metadata(HashMap::from([(ORDER_KEY.to_string(), "col".to_string())]));
            }
            fields.push(field);
            arrays.push(exported.array);
        }
        let schema = Arc::new(ArrowSchema::new(fields).with_metadata(metadata));
        let options = RecordBatchOptions::new().with_row_count(Some(self.len()));
        let batch = RecordBatch::try_new_with_options(schema, arrays, &options)
            .map_err(|e| invalid("record batch", e.to_string()))?;
        Ok(ArrowExport {
            batch,
            copied_columns,
        })
    }

    /// A new table holding a copy of `batch`: primitives → columns, `FixedSizeList<K>` →
    /// `vector[K]`, `FixedSizeList<R>` of `FixedSizeList<C>` → `matrix[R, C]`, scalars from the
    /// schema metadata. Null rows take `import.fill` (an error without it).
    pub fn from_record_batch(batch: &RecordBatch, import: ImportOptions) -> Result<SoaTable> {
        let mut specs = Vec::new();
        let mut sources = Vec::new();
        for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
            let what = format!("column {:?}", field.name());
            let imported = array_to_tensor(&array.to_data(), &what, import)?;
            let view = imported.view;
            let kind = match view.shape().len() {
                1 => ColumnKind::Column,
                2 => ColumnKind::Vector(view.shape()[1] as usize),
                3 => ColumnKind::Matrix {
                    rows: view.shape()[1] as usize,
                    cols: view.shape()[2] as usize,
                    order: if field.metadata().get(ORDER_KEY).map(String::as_str) == Some("col") {
                        ComponentOrder::ColumnMajor
                    } else {
                        ComponentOrder::RowMajor
                    },
                },
                _ => return Err(invalid(what, "lists nested deeper than a matrix")),
            };
            specs.push(ColumnSpec {
                name: field.name().clone(),
                dtype: view.dtype(),
                kind,
            });
            sources.push(view);
        }
        let mut scalars: Vec<(&String, &String)> = batch
            .schema_ref()
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with(SCALAR_PREFIX))
            .collect();
        scalars.sort();
        let mut scalar_values = Vec::new();
        for (key, value) in scalars {
            let name = &key[SCALAR_PREFIX.len()..];
            let (dtype, bytes) = parse_scalar(name, value)?;
            specs.push(ColumnSpec {
                name: name.to_string(),
                dtype,
                kind: ColumnKind::TableScalar,
            });
            scalar_values.push((name.to_string(), bytes));
        }
        let table = SoaTable::new(Schema::new(specs)?, batch.num_rows())?;
        for (spec, src) in table.schema().columns().iter().zip(&sources) {
            let dst = table.column_view(&spec.name)?;
            // SAFETY: `table` is fresh and private to this call; sources are Arrow memory.
            unsafe { dst.copy_from(src)? };
        }
        for (name, bytes) in scalar_values {
            let dst = table.column_view(&name)?;
            // SAFETY: a fresh table's scalar slot of exactly `bytes.len()` bytes (the dtype's
            // item size, checked by `parse_scalar`).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.data_ptr(), bytes.len()) };
        }
        Ok(table)
    }
}

fn scalar_bytes(view: &TensorView) -> Result<Vec<u8>> {
    if !view.device().is_host_accessible() {
        return Err(Error::NotHostAccessible {
            device: view.device(),
        });
    }
    let n = view.dtype().itemsize();
    // SAFETY: a table scalar view points at one element of `n` bytes of host memory that its
    // owner keeps alive; the bytes are copied out at once.
    Ok(unsafe { std::slice::from_raw_parts(view.data_ptr(), n) }.to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_scalar(name: &str, value: &str) -> Result<(DType, Vec<u8>)> {
    let what = format!("table scalar {name:?} in the schema metadata");
    let (dtype, digits) = value
        .split_once(':')
        .ok_or_else(|| invalid(&what, format!("{value:?} is not <dtype>:<hex bytes>")))?;
    let dtype = DType::from_name(dtype)?;
    if digits.len() != 2 * dtype.itemsize() || !digits.is_ascii() {
        return Err(invalid(
            &what,
            format!(
                "{value:?} does not hold {} bytes of {dtype}",
                dtype.itemsize()
            ),
        ));
    }
    let bytes = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16))
        .collect::<std::result::Result<Vec<u8>, _>>()
        .map_err(|_| invalid(&what, format!("{value:?} has a non-hex digit")))?;
    Ok((dtype, bytes))
}

impl TensorMap {
    /// The tensors of a record batch, without copying where strides can describe them: one
    /// column is always a view; a group of columns is a view when their buffers sit at equal
    /// distances (as they do for a batch exported from an SoA table), else a reported copy
    /// with `options.allow_copy`. Shapes follow [`TensorMap::apply`].
    pub fn apply_arrow(
        &self,
        batch: &RecordBatch,
        options: MapOptions,
        import: ImportOptions,
    ) -> Result<Vec<MappedTensor>> {
        self.groups()
            .iter()
            .map(|g| {
                let mut allocations = Vec::new();
                let views = g
                    .columns
                    .iter()
                    .map(|c| {
                        let array = batch.column_by_name(c).ok_or_else(|| {
                            invalid(
                                format!("column {c:?}"),
                                format!("not in the batch (columns {:?})", column_names(batch)),
                            )
                        })?;
                        allocations.push(values_allocation(&array.to_data()));
                        let import = ImportOptions {
                            allow_copy: import.allow_copy || options.allow_copy,
                            ..import
                        };
                        array_to_tensor(&array.to_data(), &format!("column {c:?}"), import)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let copy = views.iter().find_map(|v| v.copy.clone());
                let views: Vec<TensorView> = views.into_iter().map(|v| v.view).collect();
                let one_allocation =
                    allocations[0].is_some() && allocations.iter().all(|a| *a == allocations[0]);
                let (view, grouped_copy) =
                    group_views(&g.name, &g.columns, &views, one_allocation, options)?;
                Ok(MappedTensor {
                    name: g.name.clone(),
                    columns: g.columns.clone(),
                    view: if options.readonly {
                        view.into_readonly()
                    } else {
                        view
                    },
                    copy: copy.or_else(|| {
                        grouped_copy.then(|| CopyReason::Gathered {
                            columns: g.columns.to_vec(),
                        })
                    }),
                })
            })
            .collect()
    }
}

fn column_names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

/// Stacks per-column views of shape (n, inner…) into one (n, k, inner…) tensor — a view if
/// they share `one_allocation` and their data pointers are evenly spaced in it, else a copy
/// (allowed by `options.allow_copy`). A
/// single vector or matrix column keeps its own shape, as in [`TensorMap::apply`].
fn group_views(
    name: &str,
    columns: &[String],
    views: &[TensorView],
    one_allocation: bool,
    options: MapOptions,
) -> Result<(TensorView, bool)> {
    let what = format!("tensor {name:?} (columns {columns:?})");
    let first = &views[0];
    for (c, v) in columns.iter().zip(views).skip(1) {
        if v.dtype() != first.dtype() || v.shape() != first.shape() {
            return Err(invalid(
                &what,
                format!(
                    "mixes columns: {:?} is {} {:?}, {c:?} is {} {:?}",
                    columns[0],
                    first.dtype(),
                    first.shape(),
                    v.dtype(),
                    v.shape()
                ),
            ));
        }
    }
    if views.len() == 1 && first.ndim() > 1 {
        return Ok((first.clone(), false));
    }
    let item = first.dtype().itemsize() as isize;
    let base = first.data_ptr() as isize;
    let distance = |v: &TensorView| (v.data_ptr() as isize - base) / item;
    let step = if views.len() == 1 {
        Some(1)
    } else if !one_allocation {
        None
    } else {
        let d = distance(&views[1]);
        let even = views.iter().enumerate().all(|(j, v)| {
            (v.data_ptr() as isize - base) % item == 0 && distance(v) == d * j as isize
        }) && views.iter().all(|v| v.strides() == first.strides());
        (d > 0).then_some(d as i64).filter(|_| even)
    };
    let mut shape = vec![first.shape()[0], views.len() as i64];
    shape.extend(&first.shape()[1..]);
    if let Some(step) = step {
        let mut strides = vec![first.strides()[0], step];
        strides.extend(&first.strides()[1..]);
        // Every element the strides reach is an element of one of the columns, all inside one
        // allocation, so keeping all of their owners alive keeps the whole view valid.
        let owners: Vec<Owner> = views.iter().map(|v| v.owner().clone()).collect();
        let owner: Owner = Arc::new(owners);
        // SAFETY: element (r, j, …) sits at column j's own address of (r, …) because the
        // columns share strides and start `step * j` elements apart; `owner` keeps every
        // column's memory alive.
        let view = unsafe {
            TensorView::from_raw_parts(
                first.data_ptr(),
                first.dtype(),
                shape,
                strides,
                first.device(),
                owner,
                views.iter().any(|v| v.is_readonly()),
            )?
        };
        return Ok((view, false));
    }
    if !options.allow_copy {
        return Err(invalid(
            what,
            "its columns live in separate Arrow allocations (or unevenly spaced in one), \
             which no strides can join; ask for each column on its own, or allow a copy \
             (copy=True)",
        ));
    }
    let out = TensorView::zeros(first.dtype(), &shape)?;
    for (j, v) in views.iter().enumerate() {
        // SAFETY: `out` is fresh and private; the sources are other memory.
        unsafe { out.select(1, j as i64)?.copy_from(v)? };
    }
    Ok((out.into_readonly(), true))
}

/// The element type a record batch column would have as a tensor, if it has one.
pub fn tensor_dtype_of(data_type: &DataType) -> Option<DType> {
    match data_type {
        DataType::FixedSizeList(field, _) => tensor_dtype_of(field.data_type()),
        DataType::Boolean => Some(DType::BOOL),
        other => dtype_of_arrow(other),
    }
}
