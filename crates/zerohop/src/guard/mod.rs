//! Const inputs shared without a copy, checked afterwards.
//!
//! libtorch is not const-correct (pytorch#97856): any tensor handed to a model may be written,
//! so CMS copies its `const` inputs first. A [`WriteGuard`] lets them be shared instead: it
//! fingerprints the bytes of every column a map hands out when the map is made, and
//! [`WriteGuard::verify`] fingerprints them again after the model ran, naming the columns whose
//! bytes changed. On the host the fingerprint runs on the CPU; on a CUDA device, as a kernel on
//! the stream the caller names.

mod fingerprint;

#[cfg(feature = "cuda")]
mod device;
#[cfg(test)]
mod tests;

pub use fingerprint::Fingerprint;

use std::collections::HashSet;

use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::memory::Stream;
use crate::soa::{ColumnOptions, MappedTensor, Table};
use crate::tensor::{for_each_offset, TensorView};

/// One contiguous byte range of a guarded column.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Range {
    pub addr: usize,
    pub len: usize,
    /// The index of the range's first word among its column's words.
    pub first_word: u64,
    pub column: usize,
}

/// The fingerprints of some columns' bytes, taken once, checked again by `verify`.
#[derive(Debug)]
pub struct WriteGuard {
    device: Device,
    names: Vec<String>,
    ranges: Vec<Range>,
    prints: Vec<Fingerprint>,
    // The ranges point into these views' memory (range `i` into `views[ranges[i].column]`),
    // which their owners keep alive.
    views: Vec<TensorView>,
}

impl WriteGuard {
    /// Guards the columns of `table` behind `tensors` (a map of it), in the map's order, each
    /// once. Tensors the map copied are not the table's memory and are left out. `stream`: the
    /// stream the data is produced on, for device memory (the host waits for the fingerprint).
    pub fn over_mapped(table: &Table, tensors: &[MappedTensor], stream: Stream) -> Result<Self> {
        let mut seen = HashSet::new();
        let mut columns = Vec::new();
        for name in tensors
            .iter()
            .filter(|t| !t.copied())
            .flat_map(|t| t.columns.iter())
        {
            if !seen.insert(name.as_str()) {
                continue;
            }
            let (view, copy) = table.column(name, ColumnOptions::default())?;
            if copy.is_none() {
                columns.push((name.clone(), view));
            }
        }
        Self::over_columns(columns, stream)
    }

    /// Guards the bytes of each `(name, view)` (elements only: the padding between a
    /// column's components is not the column's). All views on one device.
    pub fn over_columns(columns: Vec<(String, TensorView)>, stream: Stream) -> Result<Self> {
        let device = columns.first().map_or(Device::CPU, |(_, v)| v.device());
        let mut ranges = Vec::new();
        let mut names = Vec::with_capacity(columns.len());
        let mut views = Vec::with_capacity(columns.len());
        for (index, (name, view)) in columns.into_iter().enumerate() {
            if view.device() != device {
                return Err(Error::InvalidArgument {
                    what: format!("column {name:?}"),
                    reason: format!(
                        "is on {}, the guard's other columns on {device}",
                        view.device()
                    ),
                });
            }
            ranges_of(&view, index, &mut ranges);
            names.push(name);
            views.push(view);
        }
        let mut guard = WriteGuard {
            device,
            names,
            ranges,
            prints: Vec::new(),
            views,
        };
        guard.prints = guard.take(stream)?;
        Ok(guard)
    }

    /// The guarded columns, in order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Where the guarded columns live.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The fingerprints taken when the guard was made, one per column.
    pub fn fingerprints(&self) -> &[Fingerprint] {
        &self.prints
    }

    /// The columns whose bytes changed since the guard was made, in order. `stream`: the
    /// stream the consumer's work was queued on (device memory is read after it; host memory
    /// must not be written meanwhile).
    pub fn written(&self, stream: Stream) -> Result<Vec<&str>> {
        let now = self.take(stream)?;
        Ok(self
            .names
            .iter()
            .zip(self.prints.iter().zip(&now))
            .filter(|(_, (before, after))| before != after)
            .map(|(name, _)| name.as_str())
            .collect())
    }

    /// Ok when no guarded byte changed; otherwise `Error::ReadOnly` naming the first column
    /// written and every other.
    pub fn verify(&self, stream: Stream) -> Result<()> {
        let written = self.written(stream)?;
        let Some(first) = written.first() else {
            return Ok(());
        };
        Err(Error::ReadOnly(format!(
            "column {first:?} was written after it was shared as a const input ({} of {} \
             guarded columns changed: {})",
            written.len(),
            self.names.len(),
            written.join(", ")
        )))
    }

    fn take(&self, stream: Stream) -> Result<Vec<Fingerprint>> {
        if self.device.is_host_accessible() {
            if self.device.kind != DeviceKind::Cpu && stream != Stream::HOST {
                crate::device_calls::synchronize(self.device.id, stream)?;
            }
            return Ok(self.host_prints());
        }
        if self.device.kind != DeviceKind::Cuda {
            return Err(Error::NotHostAccessible {
                device: self.device,
            });
        }
        #[cfg(feature = "cuda")]
        {
            device::fingerprints(self.device.id, stream, &self.ranges, self.names.len())
        }
        #[cfg(not(feature = "cuda"))]
        Err(Error::without_cuda(format!(
            "a guard over data on {}",
            self.device
        )))
    }

    fn host_prints(&self) -> Vec<Fingerprint> {
        let mut prints = vec![Fingerprint::default(); self.names.len()];
        for r in &self.ranges {
            // Through the view's pointer, not the bare address, so the read keeps its provenance.
            let base = self.views[r.column].data_ptr();
            let start = base.wrapping_add(r.addr.wrapping_sub(base as usize));
            // SAFETY: every range lies inside elements of its column's view, whose owner keeps
            // the memory alive; the caller's contract is that nothing writes it while the
            // guard reads.
            let bytes = unsafe { std::slice::from_raw_parts(start.cast_const(), r.len) };
            fingerprint::add_range(bytes, r.first_word, &mut prints[r.column]);
        }
        prints
    }
}

/// The byte ranges of `view`'s elements, appended to `out` for column `column`: one per run
/// of consecutive elements, broadcast axes counted once.
fn ranges_of(view: &TensorView, column: usize, out: &mut Vec<Range>) {
    if view.numel() == 0 {
        return;
    }
    let item = view.dtype().itemsize() as i64;
    let mut axes: Vec<(i64, i64)> = view
        .shape()
        .iter()
        .zip(view.strides())
        .filter(|&(&n, &s)| n > 1 && s != 0)
        .map(|(&n, &s)| (n, s))
        .collect();
    // The longest unit-stride axis becomes the ranges' length; the others are walked.
    let run = axes
        .iter()
        .enumerate()
        .filter(|(_, &(_, s))| s == 1)
        .max_by_key(|(_, &(n, _))| n)
        .map(|(i, _)| i)
        .map_or(1, |i| axes.remove(i).0);
    let (shape, strides): (Vec<i64>, Vec<i64>) = axes.into_iter().unzip();
    let base = view.data_ptr() as usize;
    let len = (run * item) as usize;
    let start = out.len();
    for_each_offset(&shape, &strides, |offset| {
        let addr = base.wrapping_add_signed((offset * item) as isize);
        // Back-to-back runs (a column without padding) are one range.
        match out.last_mut().filter(|last| last.column == column) {
            Some(last) if last.addr + last.len == addr => last.len += len,
            _ => out.push(Range {
                addr,
                len,
                first_word: 0,
                column,
            }),
        }
    });
    let mut next = 0;
    for r in &mut out[start..] {
        r.first_word = next;
        next += fingerprint::words_spanned(r.addr, r.len);
    }
}
