//! What a table holds: named columns, each a table scalar, a per-row value, a fixed vector
//! or a fixed matrix of one dtype.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// How a matrix's R×C components are numbered: component `k` of element (r, c) is
/// `r*C + c` (row-major) or `c*R + r` (column-major, Eigen's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComponentOrder {
    RowMajor,
    ColumnMajor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnKind {
    /// One value for the whole table.
    TableScalar,
    /// One value per row.
    Column,
    /// K values per row, stored as K padded columns.
    Vector(usize),
    /// R×C values per row, stored as R·C padded columns in `order`.
    Matrix {
        rows: usize,
        cols: usize,
        order: ComponentOrder,
    },
}

impl ColumnKind {
    /// Values per row (1 for scalars and plain columns). Saturates rather than wraps for a
    /// matrix whose R×C overflows; a [`Schema`] refuses such a column.
    pub fn components(self) -> usize {
        self.checked_components().unwrap_or(usize::MAX)
    }

    /// Values per row, or `None` when they do not fit a tensor's dimension (`i64`).
    pub fn checked_components(self) -> Option<usize> {
        let count = match self {
            ColumnKind::TableScalar | ColumnKind::Column => 1,
            ColumnKind::Vector(k) => k,
            ColumnKind::Matrix { rows, cols, .. } => rows.checked_mul(cols)?,
        };
        (i64::try_from(count).is_ok()).then_some(count)
    }

    /// The component index of matrix element (r, c).
    pub fn component_of(self, r: usize, c: usize) -> usize {
        match self {
            ColumnKind::Matrix {
                rows,
                cols,
                order: ComponentOrder::RowMajor,
            } => {
                debug_assert!(r < rows && c < cols);
                r * cols + c
            }
            ColumnKind::Matrix {
                rows,
                order: ComponentOrder::ColumnMajor,
                ..
            } => c * rows + r,
            ColumnKind::Vector(_) => r,
            _ => 0,
        }
    }
}

impl fmt::Display for ColumnKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnKind::TableScalar => f.write_str("table scalar"),
            ColumnKind::Column => f.write_str("column"),
            ColumnKind::Vector(k) => write!(f, "vector[{k}]"),
            ColumnKind::Matrix { rows, cols, order } => write!(
                f,
                "matrix[{rows}x{cols}, {}]",
                match order {
                    ComponentOrder::RowMajor => "row-major",
                    ComponentOrder::ColumnMajor => "column-major",
                }
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: String,
    pub dtype: DType,
    pub kind: ColumnKind,
}

/// An ordered list of uniquely named columns. Build it with the chained methods; each checks
/// its input, and the first error is reported by [`SchemaBuilder::build`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schema {
    columns: Vec<ColumnSpec>,
    /// Column name → index, for O(1) lookups when mapping many columns.
    by_name: HashMap<String, usize, BuildNameHasher>,
}

/// FNV-1a over a column name's bytes: a tensor map looks up every column of every event, and
/// SipHash (the default, which resists collisions crafted against a server's keys) cost a fifth
/// of a 64-column map; a schema's own column names are no such attack surface.
#[derive(Default)]
pub(crate) struct NameHasher(u64);

type BuildNameHasher = std::hash::BuildHasherDefault<NameHasher>;

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Collects columns; `build` validates them all.
#[derive(Clone, Debug, Default)]
pub struct SchemaBuilder {
    columns: Vec<ColumnSpec>,
}

impl SchemaBuilder {
    pub fn scalar(self, name: &str, dtype: DType) -> Self {
        self.add(name, dtype, ColumnKind::TableScalar)
    }
    pub fn column(self, name: &str, dtype: DType) -> Self {
        self.add(name, dtype, ColumnKind::Column)
    }
    pub fn vector(self, name: &str, dtype: DType, len: usize) -> Self {
        self.add(name, dtype, ColumnKind::Vector(len))
    }
    pub fn matrix(
        self,
        name: &str,
        dtype: DType,
        rows: usize,
        cols: usize,
        order: ComponentOrder,
    ) -> Self {
        self.add(name, dtype, ColumnKind::Matrix { rows, cols, order })
    }
    pub fn add(mut self, name: &str, dtype: DType, kind: ColumnKind) -> Self {
        self.columns.push(ColumnSpec {
            name: name.to_owned(),
            dtype,
            kind,
        });
        self
    }

    pub fn build(self) -> Result<Schema> {
        Schema::new(self.columns)
    }
}

impl Schema {
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::default()
    }

    /// Validates names (non-empty, unique), dtypes (whole bytes) and shapes (non-zero, each
    /// dimension and the components per row within a tensor dimension's `i64`).
    pub fn new(columns: Vec<ColumnSpec>) -> Result<Self> {
        let mut schema = Schema {
            columns: Vec::with_capacity(columns.len()),
            by_name: HashMap::with_capacity_and_hasher(columns.len(), Default::default()),
        };
        for column in columns {
            schema.push(column)?;
        }
        Ok(schema)
    }

    /// Appends `column` after the checks [`Schema::new`] makes, its name against those before
    /// it; on error the schema is unchanged. For faces that add one column per call (the C
    /// ABI), so a bad column is refused by the call that brings it.
    pub fn push(&mut self, column: ColumnSpec) -> Result<()> {
        let bad = |name: &str, reason: String| Error::Schema {
            what: format!("column {name:?}"),
            reason,
        };
        let c = &column;
        if c.name.is_empty() {
            let i = self.columns.len();
            return Err(bad("", format!("column {i} has an empty name")));
        }
        if !c.dtype.is_byte_addressable() || c.dtype.lanes != 1 {
            return Err(bad(
                &c.name,
                format!("{} is not a whole-byte scalar type", c.dtype),
            ));
        }
        match c.kind.checked_components() {
            Some(0) => return Err(bad(&c.name, format!("{} has no components", c.kind))),
            None => {
                return Err(bad(
                    &c.name,
                    format!(
                        "{} has more components per row than a tensor dimension holds ({})",
                        c.kind,
                        i64::MAX
                    ),
                ))
            }
            Some(_) => {}
        }
        // A hash map, not a scan of the names before it: a pickle or a C caller may bring
        // hundreds of thousands of columns.
        match self.by_name.entry(column.name.clone()) {
            Entry::Occupied(_) => Err(bad(&column.name, "the name is used twice".into())),
            Entry::Vacant(slot) => {
                slot.insert(self.columns.len());
                self.columns.push(column);
                Ok(())
            }
        }
    }

    pub fn columns(&self) -> &[ColumnSpec] {
        &self.columns
    }

    pub fn index_of(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::NoSuchColumn {
                name: name.to_owned(),
                columns: self
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}
