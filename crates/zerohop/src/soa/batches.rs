//! A table cut into batches of a fixed number of rows, the last one short: the loop CMS runs
//! over a large table (its `BatchedTensorCollection`). Every span is computed with checked
//! arithmetic, since the last batch's end is where such loops overflow (cmssw#51614: the end
//! of the last batch taken as `(index + 1) * batch`).

use std::ops::Range;

use super::Table;
use crate::error::{Error, Result};

/// Batches of `batch_rows` rows over a table of `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batches {
    rows: usize,
    batch_rows: usize,
}

impl Batches {
    /// Refuses a batch of 0 rows (it would never reach the end of the table).
    pub fn new(rows: usize, batch_rows: usize) -> Result<Self> {
        if batch_rows == 0 {
            return Err(Error::Layout {
                what: "batch size".into(),
                reason: "0 rows: a batch holds at least one".into(),
            });
        }
        Ok(Batches { rows, batch_rows })
    }

    /// How many batches cover the table (0 for a table without rows).
    pub fn len(&self) -> usize {
        // No `rows + batch_rows - 1`: that overflows for large batches.
        self.rows.div_ceil(self.batch_rows)
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The rows of batch `index`: `index * batch_rows` up to the next batch's start or the
    /// table's end, whichever comes first. An index at or past `len()` is refused, also when
    /// its start would overflow.
    pub fn span(&self, index: usize) -> Result<Range<usize>> {
        let start = index
            .checked_mul(self.batch_rows)
            .filter(|&start| start < self.rows)
            .ok_or_else(|| Error::Layout {
                what: "batch index".into(),
                reason: format!(
                    "{index} is past the last batch: {} rows in batches of {} make {}",
                    self.rows,
                    self.batch_rows,
                    self.len()
                ),
            })?;
        // `rows - start` cannot underflow (start < rows), and the sum is at most `rows`.
        Ok(start..start + self.batch_rows.min(self.rows - start))
    }

    /// Every batch's span, in order.
    pub fn spans(self) -> impl Iterator<Item = Range<usize>> {
        (0..self.len()).map(move |i| {
            let start = i * self.batch_rows; // i < len(), so start < rows
            start..start + self.batch_rows.min(self.rows - start)
        })
    }
}

impl Table {
    /// How many batches of `batch_rows` rows cover this table.
    pub fn batch_count(&self, batch_rows: usize) -> Result<usize> {
        Ok(Batches::new(self.len(), batch_rows)?.len())
    }

    /// Batch `index` of `batch_rows` rows, a table over the same memory (see
    /// [`Batches::span`]). A batch of an SoA table that starts at a row where its columns are
    /// not aligned is still exactly its rows: the views keep the table's strides.
    pub fn batch(&self, batch_rows: usize, index: usize) -> Result<Table> {
        let span = Batches::new(self.len(), batch_rows)?.span(index)?;
        self.slice_rows(span.start, span.end)
    }
}
