//! The state of a pickled SoA table.

use super::{aligned, check_len, parse_dtype};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::soa::{ColumnKind, ColumnSpec, ComponentOrder, Layout, Schema, SoaTable};

/// One column as it travels: (name, dtype name, kind, K or R, C, order), kind one of
/// "scalar", "column", "vector", "matrix" and order "row" or "col".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireColumn {
    pub name: String,
    pub dtype: String,
    pub kind: String,
    pub a: usize,
    pub b: usize,
    pub order: String,
}

/// The schema's columns as they travel.
pub fn schema_to_wire(schema: &Schema) -> Vec<WireColumn> {
    schema
        .columns()
        .iter()
        .map(|c| {
            let (kind, a, b, order) = match c.kind {
                ColumnKind::TableScalar => ("scalar", 0, 0, "row"),
                ColumnKind::Column => ("column", 0, 0, "row"),
                ColumnKind::Vector(k) => ("vector", k, 0, "row"),
                ColumnKind::Matrix { rows, cols, order } => (
                    "matrix",
                    rows,
                    cols,
                    if order == ComponentOrder::RowMajor {
                        "row"
                    } else {
                        "col"
                    },
                ),
            };
            WireColumn {
                name: c.name.clone(),
                dtype: c.dtype.to_string(),
                kind: kind.into(),
                a,
                b,
                order: order.into(),
            }
        })
        .collect()
}

/// The schema the columns describe, with every check `Schema::new` makes.
pub fn schema_from_wire(columns: Vec<WireColumn>) -> Result<Schema> {
    let mut specs = Vec::with_capacity(columns.len());
    for c in columns {
        let kind = match (c.kind.as_str(), c.order.as_str()) {
            ("scalar", _) => ColumnKind::TableScalar,
            ("column", _) => ColumnKind::Column,
            ("vector", _) => ColumnKind::Vector(c.a),
            ("matrix", "row") => ColumnKind::Matrix {
                rows: c.a,
                cols: c.b,
                order: ComponentOrder::RowMajor,
            },
            ("matrix", "col") => ColumnKind::Matrix {
                rows: c.a,
                cols: c.b,
                order: ComponentOrder::ColumnMajor,
            },
            _ => {
                return Err(Error::Wire(format!(
                    "pickled table: column {:?} has kind {:?} / order {:?}",
                    c.name, c.kind, c.order
                )))
            }
        };
        specs.push(ColumnSpec {
            dtype: parse_dtype(&c.dtype)?,
            name: c.name,
            kind,
        });
    }
    Schema::new(specs)
}

/// A table as it travels: `len` rows from `first_row` of a `rows`-row layout at `alignment`,
/// whose buffer is `nbytes` long.
#[derive(Clone, Debug)]
pub struct TableState {
    pub schema: Schema,
    pub rows: usize,
    pub alignment: usize,
    pub first_row: usize,
    pub len: usize,
    pub readonly: bool,
    pub nbytes: usize,
}

impl TableState {
    /// The state of `table`.
    pub fn of(table: &SoaTable) -> Self {
        let layout = table.layout();
        TableState {
            schema: table.schema().clone(),
            rows: layout.rows,
            alignment: layout.alignment,
            first_row: table.first_row(),
            len: table.len(),
            readonly: table.is_readonly(),
            nbytes: layout.total_bytes,
        }
    }

    /// The alignment the widest element of the schema needs: what received host data must
    /// start on to be viewed where it lies.
    pub fn element_alignment(&self) -> usize {
        self.schema
            .columns()
            .iter()
            .map(|c| c.dtype.alignment())
            .max()
            .unwrap_or(1)
    }

    /// Refuses a layout whose size is not `nbytes` (or that is not a layout at all).
    pub fn check(&self) -> Result<Layout> {
        let layout = Layout::new(&self.schema, self.rows, self.alignment)?;
        if layout.total_bytes != self.nbytes {
            return Err(Error::Wire(format!(
                "pickled table: {} rows of its schema at alignment {} take {} bytes, its \
                 metadata says {}",
                self.rows, self.alignment, layout.total_bytes, self.nbytes
            )));
        }
        Ok(layout)
    }

    /// The table over `buffer` (host data as received, or device memory an IPC import
    /// mapped): checked against it; host data not aligned for the widest dtype is copied
    /// (data that came `in_band` is a private copy already, and is copied to the table's own
    /// alignment). The flag says whether it was copied; read-only stays read-only.
    pub fn table_over(
        self,
        buffer: Buffer,
        writable: bool,
        in_band: bool,
    ) -> Result<(SoaTable, bool)> {
        self.check()?;
        check_len(&buffer, self.nbytes)?;
        let (buffer, copied) = if buffer.device().is_host_accessible() {
            let widest = self.element_alignment();
            // Views need only element alignment (Ray's store aligns to 64 bytes, so a
            // 128-byte table arrives as a view reporting 64).
            let needed = if in_band {
                self.alignment.max(widest)
            } else {
                widest
            };
            aligned(buffer, needed, self.alignment.max(crate::DEFAULT_ALIGNMENT))?
        } else {
            (buffer, false)
        };
        let readonly = self.readonly || !writable;
        Ok((self.laid_over(buffer, readonly)?, copied))
    }

    /// The table laid over `buffer` as it is (already checked against this state), read-only
    /// when `readonly`.
    pub fn laid_over(self, buffer: Buffer, readonly: bool) -> Result<SoaTable> {
        let table = SoaTable::over_buffer(
            self.schema,
            self.rows,
            self.alignment,
            buffer,
            self.first_row,
            self.len,
        )?;
        Ok(if readonly {
            table.into_readonly()
        } else {
            table
        })
    }
}
