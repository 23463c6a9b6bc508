//! `Table`: any table zerohop maps — one SoA buffer, adopted columns, or (with `arrow`) an
//! Arrow record batch — behind one set of calls, so the C and Python faces hold the same type
//! and dispatch nothing themselves.

#[cfg(feature = "arrow")]
use arrow_array::{Array, RecordBatch};

use crate::buffer::Buffer;
use crate::device::{Device, DeviceKind};
#[cfg(feature = "arrow")]
use crate::error::Error;
use crate::error::Result;
use crate::handoff::{ready_on, ConsumerStream};
use crate::memory::Stream;
use crate::tensor::TensorView;

use super::{ColumnTable, MapOptions, MappedTensor, SoaTable, TensorMap};

/// A table of any storage.
#[derive(Clone)]
pub enum Table {
    /// One buffer, every column padded to the alignment (zerohop's or wrapped memory).
    Soa(SoaTable),
    /// Separate tensors of one length on one device, adopted as they are.
    Columns(ColumnTable),
    /// An Arrow record batch, its buffers shared.
    #[cfg(feature = "arrow")]
    Arrow(RecordBatch),
}

/// How a column of an Arrow table becomes a tensor (copies the caller allows); SoA tables and
/// adopted columns are always shared as they are.
#[derive(Clone, Copy, Debug, Default)]
pub struct ColumnOptions {
    /// Arrow booleans (bits, where a tensor takes a byte each) may be copied to bytes.
    pub allow_copy: bool,
    /// Nulls of an Arrow column are filled with this value (a copy); without it, a column
    /// with nulls is refused.
    pub fill: Option<f64>,
}

impl Table {
    /// "soa", "columns" or "arrow".
    pub fn kind(&self) -> &'static str {
        match self {
            Table::Soa(_) => "soa",
            Table::Columns(_) => "columns",
            #[cfg(feature = "arrow")]
            Table::Arrow(_) => "arrow",
        }
    }

    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            Table::Soa(t) => t.len(),
            Table::Columns(c) => c.len(),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => b.num_rows(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The columns' names, in order.
    pub fn column_names(&self) -> Vec<String> {
        match self {
            Table::Soa(t) => t
                .schema()
                .columns()
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            Table::Columns(c) => c.names().into_iter().map(str::to_owned).collect(),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => b
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        }
    }

    /// Where the data lives (Arrow record batches: the host).
    pub fn device(&self) -> Device {
        match self {
            Table::Soa(t) => t.device(),
            Table::Columns(c) => c.device(),
            #[cfg(feature = "arrow")]
            Table::Arrow(_) => Device::CPU,
        }
    }

    /// Makes this table's data, produced on `producer`, ready for a consumer's stream (see
    /// [`crate::handoff::ready_on`]); each block behind it remembers the consumer's stream, so
    /// its free waits for the consumer's work.
    pub fn ready_on(&self, producer: Stream, consumer: ConsumerStream) -> Result<()> {
        let device = self.device();
        match self {
            Table::Soa(t) => ready_on(device, Some(&t.buffer().owner()), producer, consumer),
            Table::Columns(c) => {
                ready_on(device, None, producer, consumer)?;
                if let (DeviceKind::Cuda, Some(stream)) = (device.kind, consumer.for_cuda()) {
                    for (_, view) in c.columns() {
                        Buffer::note_consumer(view.owner(), stream);
                    }
                }
                Ok(())
            }
            #[cfg(feature = "arrow")]
            Table::Arrow(_) => ready_on(device, None, producer, consumer),
        }
    }

    /// Bytes of memory behind the table (an SoA table's whole buffer, padding included).
    pub fn nbytes(&self) -> usize {
        match self {
            Table::Soa(t) => t.layout().total_bytes,
            Table::Columns(c) => c.columns().iter().map(|(_, v)| v.nbytes()).sum(),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => b.get_array_memory_size(),
        }
    }

    /// Whether the data may not be written through this table (Arrow data never may).
    pub fn is_readonly(&self) -> bool {
        match self {
            Table::Soa(t) => t.is_readonly(),
            Table::Columns(c) => c.columns().iter().any(|(_, v)| v.is_readonly()),
            #[cfg(feature = "arrow")]
            Table::Arrow(_) => true,
        }
    }

    /// The stream adopted columns are produced on; None for the other kinds, which leave
    /// that to their holder.
    pub fn stream(&self) -> Option<Stream> {
        match self {
            Table::Columns(c) => Some(c.stream()),
            _ => None,
        }
    }

    /// The SoA table, when this is one.
    pub fn as_soa(&self) -> Option<&SoaTable> {
        match self {
            Table::Soa(t) => Some(t),
            _ => None,
        }
    }

    /// The adopted columns, when this is a table of them.
    pub fn as_columns(&self) -> Option<&ColumnTable> {
        match self {
            Table::Columns(c) => Some(c),
            _ => None,
        }
    }

    /// Column `name` as a tensor, and whether it had to be copied (only Arrow columns with
    /// nulls filled, or booleans, are).
    pub fn column(
        &self,
        name: &str,
        options: ColumnOptions,
    ) -> Result<(TensorView, Option<crate::handoff::CopyReason>)> {
        #[cfg(not(feature = "arrow"))]
        let _ = options;
        match self {
            Table::Soa(t) => Ok((t.column_view(name)?, None)),
            Table::Columns(c) => Ok((c.column(name)?, None)),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => {
                let array = b.column_by_name(name).ok_or_else(|| Error::NoSuchColumn {
                    name: name.to_owned(),
                    columns: self.column_names().join(", "),
                })?;
                let imported = crate::arrow::array_to_tensor(
                    &array.to_data(),
                    &format!("column {name:?}"),
                    crate::arrow::ImportOptions {
                        allow_copy: options.allow_copy,
                        fill: options.fill,
                    },
                )?;
                Ok((imported.view, imported.copy))
            }
        }
    }

    /// `map`'s tensors over this table; `fill` as in `column`, for Arrow tables.
    pub fn map(
        &self,
        map: &TensorMap,
        options: MapOptions,
        fill: Option<f64>,
    ) -> Result<Vec<MappedTensor>> {
        #[cfg(not(feature = "arrow"))]
        let _ = fill;
        match self {
            Table::Soa(t) => map.apply(t, options),
            Table::Columns(c) => c.map(map, options),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => map.apply_arrow(
                b,
                options,
                crate::arrow::ImportOptions {
                    allow_copy: options.allow_copy,
                    fill,
                },
            ),
        }
    }

    /// Rows `start..stop` as a table over the same memory.
    pub fn slice_rows(&self, start: usize, stop: usize) -> Result<Table> {
        Ok(match self {
            Table::Soa(t) => Table::Soa(t.slice_rows(start, stop)?),
            Table::Columns(c) => Table::Columns(c.slice_rows(start, stop)?),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => {
                // RecordBatch::slice panics outside the batch.
                super::table::check_row_range(start, stop, b.num_rows())?;
                Table::Arrow(b.slice(start, stop - start))
            }
        })
    }

    /// A human-readable account of the columns and where they live.
    pub fn describe(&self) -> String {
        match self {
            Table::Soa(t) => t.describe(),
            Table::Columns(c) => c.describe(),
            #[cfg(feature = "arrow")]
            Table::Arrow(b) => {
                let mut out = format!("Arrow record batch, {} rows\n", b.num_rows());
                for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                    out += &format!(
                        "  {:<16} {:<28} nulls {:<6} {} bytes\n",
                        f.name(),
                        f.data_type().to_string(),
                        c.null_count(),
                        c.get_array_memory_size()
                    );
                }
                out
            }
        }
    }
}

impl From<SoaTable> for Table {
    fn from(t: SoaTable) -> Self {
        Table::Soa(t)
    }
}

impl From<ColumnTable> for Table {
    fn from(c: ColumnTable) -> Self {
        Table::Columns(c)
    }
}
