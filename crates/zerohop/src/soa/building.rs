//! Tables built from other data, and a table's schema whatever its storage: an SoA copy of
//! named tensors (schema inferred from their shapes), the schema items of Arrow and device
//! tables, and an SoA table moved to another device after the stream that produced it.

use std::sync::Arc;

use super::{ColumnKind, ColumnOptions, ColumnSpec, ComponentOrder, Schema, SoaTable, Table};
use crate::device::{Device, DeviceKind};
use crate::device_calls::{order_streams, synchronize};
use crate::error::{Error, Result};
use crate::memory::{MemoryResource, Stream};
use crate::tensor::TensorView;
use crate::value::Value;

impl SoaTable {
    /// A table in host memory (the current host resource) holding copies of `columns`, with
    /// the schema their shapes give: 0-d → table scalar, (n,) → column, (n, K) → vector,
    /// (n, R, C) → row-major matrix.
    pub fn from_views(columns: &[(String, TensorView)], alignment: usize) -> Result<SoaTable> {
        let mut rows: Option<i64> = None;
        let mut specs = Vec::with_capacity(columns.len());
        for (name, view) in columns {
            let bad = |reason: String| Error::Schema {
                what: format!("column {name:?}"),
                reason,
            };
            let shape = view.shape();
            let kind = match *shape {
                [] => ColumnKind::TableScalar,
                [_] => ColumnKind::Column,
                [_, k] => ColumnKind::Vector(k as usize),
                [_, r, c] => ColumnKind::Matrix {
                    rows: r as usize,
                    cols: c as usize,
                    order: ComponentOrder::RowMajor,
                },
                _ => return Err(bad(format!("has shape {shape:?}: 0 to 3 dimensions only"))),
            };
            if let Some(&n) = shape.first() {
                match rows {
                    Some(r) if r != n => {
                        return Err(bad(format!("has {n} rows, earlier columns have {r}")))
                    }
                    _ => rows = Some(n),
                }
            }
            specs.push(ColumnSpec {
                name: name.clone(),
                dtype: view.dtype(),
                kind,
            });
        }
        let resource = crate::memory::current_resource(Device::CPU)
            .unwrap_or_else(crate::memory::default_host_resource);
        let rows = rows.unwrap_or(0) as usize;
        let table = SoaTable::with_options(Schema::new(specs)?, rows, alignment, resource)?;
        for (name, src) in columns {
            let dst = table.column_view(name)?;
            // SAFETY: the table is fresh and private to this call; sources are other memory.
            unsafe { dst.copy_from(src) }?;
        }
        Ok(table)
    }

    /// This table copied to `resource`'s device on `stream`, after the work queued on
    /// `produced_on` (the stream its data comes from); a copy to the host is complete when
    /// this returns. See [`SoaTable::copy_to`].
    pub fn moved_to(
        &self,
        resource: Arc<dyn MemoryResource>,
        stream: Stream,
        produced_on: Stream,
    ) -> Result<SoaTable> {
        stream.require_cuda()?;
        let (source, target) = (self.device(), resource.device());
        let from_cuda = source.kind == DeviceKind::Cuda;
        if from_cuda && produced_on != stream {
            order_streams(source.id, produced_on, stream)?;
        }
        let copied = self.copy_to(resource, stream)?;
        if from_cuda && target.is_host_accessible() {
            synchronize(source.id, stream)?;
        }
        Ok(copied)
    }
}

/// A schema item from a column's dtype and per-row shape.
fn item(name: &str, dtype: crate::DType, inner: &[i64]) -> Value {
    let mut item = vec![Value::str(name), Value::str(dtype.to_string())];
    match inner {
        [] => {}
        [k] => item.push(Value::int(*k)),
        [r, c, ..] => item.push(Value::List(vec![Value::int(*r), Value::int(*c)])),
    }
    Value::List(item)
}

impl Table {
    /// The SoA table this one is, or becomes: an SoA table itself (shared), an Arrow table
    /// copied into one buffer (nulls take `fill`). Device columns are refused.
    pub fn to_soa(&self, fill: Option<f64>) -> Result<SoaTable> {
        match self {
            Table::Soa(t) => Ok(t.clone()),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => SoaTable::from_record_batch(
                b,
                crate::arrow::ImportOptions {
                    allow_copy: true,
                    fill,
                },
            ),
            Table::Columns(c) => {
                let _ = fill;
                Err(Error::Export(format!(
                    "adopted columns on {} stay as they are; copy them into an SoA table \
                     (host columns: Table.from_columns in Python)",
                    c.device()
                )))
            }
        }
    }

    /// The SoA table to move to another device (see [`SoaTable::moved_to`]); other storage
    /// is refused with the way to get one.
    pub fn soa_to_move(&self) -> Result<&SoaTable> {
        match self {
            Table::Soa(t) => Ok(t),
            other => Err(Error::Export(format!(
                "to() moves SoA tables; this one has {} storage (to_soa() first)",
                other.kind()
            ))),
        }
    }

    /// The schema items of this table (see [`Schema::to_value`]): an SoA table's own; for
    /// Arrow and device tables each column's dtype and per-row shape, read from the Arrow
    /// type where it tells (nothing copied), else from the column's tensor.
    pub fn schema_value(&self) -> Result<Value> {
        if let Table::Soa(t) = self {
            return Ok(t.schema().to_value());
        }
        let mut items = Vec::new();
        for name in self.column_names() {
            let (dtype, inner) = match self.arrow_layout(&name) {
                Some(layout) => layout,
                None => {
                    let filled = ColumnOptions {
                        allow_copy: true,
                        fill: Some(0.0),
                    };
                    let (view, _) = self.column(&name, filled)?;
                    (view.dtype(), view.shape()[1..].to_vec())
                }
            };
            items.push(item(&name, dtype, &inner));
        }
        Ok(Value::List(items))
    }

    /// The dtype and per-row shape of Arrow column `name`, from its data type alone; None
    /// for other storage or a type that is not a (fixed-size list of) tensor element.
    #[cfg(feature = "arrow")]
    fn arrow_layout(&self, name: &str) -> Option<(crate::DType, Vec<i64>)> {
        let Table::Arrow(batch) = self else {
            return None;
        };
        let field = batch.schema().field_with_name(name).ok()?.clone();
        let dtype = super::tensor_dtype_of(field.data_type())?;
        let mut inner = Vec::new();
        let mut data_type = field.data_type().clone();
        while let arrow_schema::DataType::FixedSizeList(child, k) = data_type {
            inner.push(i64::from(k));
            data_type = child.data_type().clone();
        }
        Some((dtype, inner))
    }

    #[cfg(not(feature = "arrow"))]
    fn arrow_layout(&self, _: &str) -> Option<(crate::DType, Vec<i64>)> {
        None
    }
}
