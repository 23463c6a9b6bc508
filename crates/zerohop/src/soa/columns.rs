//! A table of adopted columns: named tensors of equal length, each in the memory its producer
//! allocated (a model's outputs, a framework's device arrays), shared rather than copied into
//! one SoA buffer. Row `i` of the table is index `i` along every column's first axis.

use std::collections::HashSet;
use std::sync::Arc;

use super::{MapOptions, MappedTensor, TensorMap};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::Stream;
use crate::tensor::TensorView;

/// Named columns of one length on one device, and the stream their data is produced on.
#[derive(Clone, Debug)]
pub struct ColumnTable {
    columns: Vec<(String, TensorView)>,
    stream: Stream,
}

impl ColumnTable {
    /// Adopts `columns` as they are: at least one, names non-empty and distinct, every tensor
    /// at least 1-D with the same first extent (the rows), all on one device.
    pub fn new(columns: Vec<(String, TensorView)>, stream: Stream) -> Result<Self> {
        let invalid = |reason: String| Error::Schema {
            what: "columns".into(),
            reason,
        };
        let Some((first, view)) = columns.first() else {
            return Err(invalid("a table needs at least one column".into()));
        };
        if view.ndim() == 0 {
            return Err(invalid(format!(
                "column {first:?} is 0-d; a column needs a first axis of rows"
            )));
        }
        let (rows, device) = (view.shape()[0], view.device());
        let mut seen = HashSet::with_capacity(columns.len());
        for (name, v) in &columns {
            if name.is_empty() {
                return Err(invalid("a column has an empty name".into()));
            }
            if !seen.insert(name.as_str()) {
                return Err(invalid(format!("column {name:?} is given twice")));
            }
            if v.ndim() == 0 || v.shape()[0] != rows {
                return Err(invalid(format!(
                    "column {name:?} has shape {:?}; column {first:?} has {rows} rows",
                    v.shape()
                )));
            }
            if v.device() != device {
                return Err(invalid(format!(
                    "column {name:?} is on {}, column {first:?} on {device}",
                    v.device()
                )));
            }
        }
        Ok(ColumnTable { columns, stream })
    }

    pub fn len(&self) -> usize {
        self.columns[0].1.shape()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn device(&self) -> Device {
        self.columns[0].1.device()
    }

    pub fn stream(&self) -> Stream {
        self.stream
    }

    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(n, _)| n.as_str()).collect()
    }

    pub fn columns(&self) -> &[(String, TensorView)] {
        &self.columns
    }

    /// Column `name` (a view of the adopted tensor), or `Error::NoSuchColumn`.
    pub fn column(&self, name: &str) -> Result<TensorView> {
        self.columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::NoSuchColumn {
                name: name.to_owned(),
                columns: self.names().join(", "),
            })
    }

    /// Rows `start..stop` of every column, over the same memory.
    pub fn slice_rows(&self, start: usize, stop: usize) -> Result<Self> {
        super::table::check_row_range(start, stop, self.len())?;
        let columns = self
            .columns
            .iter()
            .map(|(name, v)| Ok((name.clone(), v.slice_axis(0, start as i64, stop as i64, 1)?)))
            .collect::<Result<_>>()?;
        Ok(ColumnTable {
            columns,
            stream: self.stream,
        })
    }

    /// The map's tensors: each group must name one column (adopted columns are separate
    /// allocations, so a group of several has no strided form), handed out as that column,
    /// with the rank an SoA table or an Arrow batch gives the same spec: a plain column (n,)
    /// becomes (n, 1), the k axis CMS models expect of a one-column group; vectors (n, R) and
    /// matrices (n, R, C) keep their shape.
    pub fn map(&self, map: &TensorMap, options: MapOptions) -> Result<Vec<MappedTensor>> {
        map.names()
            .into_iter()
            .map(|name| {
                let columns = map.columns_of(name).unwrap_or_default();
                let [column] = columns.as_slice() else {
                    // The fault the SoA and Arrow maps report for a group no strides describe.
                    return Err(Error::Spec {
                        what: format!("tensor {name:?}"),
                        reason: format!(
                            "its columns {columns:?} live in separate allocations, which no \
                             strides can join; map them one by one"
                        ),
                    });
                };
                let mut view = self.column(column)?;
                if view.ndim() == 1 {
                    view = view.unsqueeze(1)?;
                }
                Ok(MappedTensor {
                    name: name.into(),
                    columns: Arc::from(columns.clone()),
                    view: if options.readonly {
                        view.into_readonly()
                    } else {
                        view
                    },
                    copy: None,
                })
            })
            .collect()
    }

    /// A few lines for people: rows, stream, each column's dtype, shape, device and address.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "adopted columns, {} rows, stream {}\n",
            self.len(),
            self.stream.raw()
        );
        for (name, v) in &self.columns {
            out += &format!(
                "  {name:<16} {} {:?} on {} at 0x{:x}\n",
                v.dtype(),
                v.shape(),
                v.device(),
                v.data_ptr() as usize
            );
        }
        out
    }
}
