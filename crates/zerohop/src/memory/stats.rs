//! `Stats`: counts and sizes of what passes through, at the cost of a few atomic adds.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::Result;
use crate::value::Value;

/// Histogram buckets: bucket `i` counts requests of `2^(i-1) < bytes <= 2^i` (bucket 0: ≤ 1 B).
pub const HISTOGRAM_BUCKETS: usize = 48;

/// A snapshot of a [`StatsResource`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    pub current_bytes: usize,
    pub peak_bytes: usize,
    pub total_bytes: u64,
    pub current_count: usize,
    pub peak_count: usize,
    pub total_count: u64,
    pub failed_count: u64,
    /// Allocation requests per power-of-two size bucket (see [`HISTOGRAM_BUCKETS`]).
    pub histogram: Vec<u64>,
}

impl Statistics {
    /// The figures by name, as every face reports them; the histogram as (bucket bytes,
    /// requests) pairs for its non-empty buckets.
    pub fn record(&self) -> Value {
        let histogram = self
            .histogram
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(bucket, &n)| Value::List(vec![Value::int(1u64 << bucket), Value::int(n)]))
            .collect();
        Value::Dict(vec![
            ("current_bytes".into(), Value::count(self.current_bytes)),
            ("peak_bytes".into(), Value::count(self.peak_bytes)),
            ("total_bytes".into(), Value::int(self.total_bytes)),
            ("current_count".into(), Value::count(self.current_count)),
            ("peak_count".into(), Value::count(self.peak_count)),
            ("total_count".into(), Value::int(self.total_count)),
            ("failed_count".into(), Value::int(self.failed_count)),
            ("histogram".into(), Value::List(histogram)),
        ])
    }
}

#[derive(Debug)]
pub struct StatsResource {
    upstream: Arc<dyn MemoryResource>,
    current_bytes: AtomicUsize,
    peak_bytes: AtomicUsize,
    total_bytes: AtomicU64,
    current_count: AtomicUsize,
    peak_count: AtomicUsize,
    total_count: AtomicU64,
    failed_count: AtomicU64,
    histogram: [AtomicU64; HISTOGRAM_BUCKETS],
}

/// The histogram bucket of a request size.
pub fn size_bucket(bytes: usize) -> usize {
    let bits = usize::BITS - bytes.saturating_sub(1).leading_zeros();
    (bits as usize).min(HISTOGRAM_BUCKETS - 1)
}

impl StatsResource {
    pub fn new(upstream: Arc<dyn MemoryResource>) -> Self {
        StatsResource {
            upstream,
            current_bytes: AtomicUsize::new(0),
            peak_bytes: AtomicUsize::new(0),
            total_bytes: AtomicU64::new(0),
            current_count: AtomicUsize::new(0),
            peak_count: AtomicUsize::new(0),
            total_count: AtomicU64::new(0),
            failed_count: AtomicU64::new(0),
            histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub fn statistics(&self) -> Statistics {
        Statistics {
            current_bytes: self.current_bytes.load(Ordering::Relaxed),
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed),
            total_bytes: self.total_bytes.load(Ordering::Relaxed),
            current_count: self.current_count.load(Ordering::Relaxed),
            peak_count: self.peak_count.load(Ordering::Relaxed),
            total_count: self.total_count.load(Ordering::Relaxed),
            failed_count: self.failed_count.load(Ordering::Relaxed),
            histogram: self
                .histogram
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// Subtracts `n` from a counter, stopping at 0: a free that breaks the contract (freed
/// twice, or never allocated here) must not wrap a count to nearly 2^64.
pub(super) fn take_from(counter: &AtomicUsize, n: usize) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |c| {
        Some(c.saturating_sub(n))
    });
}

impl MemoryResource for StatsResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        self.histogram[size_bucket(bytes)].fetch_add(1, Ordering::Relaxed);
        match self.upstream.allocate(bytes, align, stream) {
            Ok(ptr) => {
                let now = self.current_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
                self.peak_bytes.fetch_max(now, Ordering::Relaxed);
                let count = self.current_count.fetch_add(1, Ordering::Relaxed) + 1;
                self.peak_count.fetch_max(count, Ordering::Relaxed);
                self.total_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                self.total_count.fetch_add(1, Ordering::Relaxed);
                Ok(ptr)
            }
            Err(err) => {
                self.failed_count.fetch_add(1, Ordering::Relaxed);
                Err(err)
            }
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.upstream.deallocate(ptr, bytes, align, stream) };
        take_from(&self.current_bytes, bytes);
        take_from(&self.current_count, 1);
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
