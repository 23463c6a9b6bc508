//! The one stream type: where work on a block of memory is ordered. Host memory has no
//! stream; CUDA memory has a [`CudaStream`], whose handle never reads as "no stream".
//!
//! Every face converts its own convention here, once: DLPack's consumer argument
//! ([`ConsumerStream::from_dlpack`]), the C ABI's ([`ConsumerStream::from_c`]) and the raw
//! `cudaStream_t` an allocator hook receives ([`Stream::from_allocator`]).

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};

/// A CUDA stream of some device: the legacy default stream, the per-thread default stream,
/// or a `CUstream` handle. The field is private so that no zero (DLPack's "no stream",
/// ambiguous on a device) or bare integer can pass for one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CudaStream(NonZeroUsize);

impl CudaStream {
    /// The legacy default stream (`CU_STREAM_LEGACY`; DLPack's and the CUDA array
    /// interface's 1).
    pub const LEGACY: CudaStream = CudaStream(NonZeroUsize::MIN);
    /// The per-thread default stream (`CU_STREAM_PER_THREAD`; DLPack's 2).
    pub const PER_THREAD: CudaStream = match NonZeroUsize::new(2) {
        Some(two) => CudaStream(two),
        None => unreachable!(),
    };

    /// A stream by its handle: a `cudaStream_t`/`CUstream`, or 1 and 2 for the two default
    /// streams (the driver reads those values the same way). 0 is refused: DLPack reserves it
    /// and on a device it could mean either default stream.
    pub fn from_handle(handle: usize) -> Result<CudaStream> {
        NonZeroUsize::new(handle)
            .map(CudaStream)
            .ok_or_else(|| Error::Stream {
                stream: "0".into(),
                reason: AMBIGUOUS_STREAM.into(),
            })
    }

    /// A stream whose handle the caller already holds as a non-zero value.
    pub const fn new(handle: NonZeroUsize) -> CudaStream {
        CudaStream(handle)
    }

    /// The value the driver takes (and DLPack and the CUDA array interface print).
    pub fn handle(self) -> usize {
        self.0.get()
    }
}

impl fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CudaStream::LEGACY => f.write_str("the legacy default stream"),
            CudaStream::PER_THREAD => f.write_str("the per-thread default stream"),
            s => write!(f, "stream 0x{:x}", s.handle()),
        }
    }
}

/// Why stream 0 is refused where a CUDA stream is expected.
pub const AMBIGUOUS_STREAM: &str = "stream 0 is ambiguous on a CUDA device: 1 is the legacy \
    default stream, 2 the per-thread default stream, any other value a cudaStream_t";

/// The stream an allocation is made, used and freed on: none for host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Stream(Option<CudaStream>);

impl Stream {
    /// No stream: host memory (or a device resource asked outside any stream order).
    pub const HOST: Stream = Stream(None);
    /// The legacy default CUDA stream.
    pub const LEGACY: Stream = Stream(Some(CudaStream::LEGACY));

    /// A CUDA stream by handle (see [`CudaStream::from_handle`]; 0 is refused).
    pub fn cuda(handle: usize) -> Result<Stream> {
        CudaStream::from_handle(handle).map(Stream::on)
    }

    /// Work ordered on `stream`.
    pub const fn on(stream: CudaStream) -> Stream {
        Stream(Some(stream))
    }

    /// The stream an allocator hook was called with (torch, CuPy, Numba, C callers): host
    /// allocations have none, and on a device 0 is CUDA's NULL stream, which those
    /// frameworks use as the legacy default stream.
    pub fn from_allocator(device: Device, raw: usize) -> Stream {
        match device.kind {
            DeviceKind::Cuda | DeviceKind::CudaManaged => Stream(Some(
                CudaStream::from_handle(raw).unwrap_or(CudaStream::LEGACY),
            )),
            _ => Stream::HOST,
        }
    }

    /// The CUDA stream, for work that needs one (a copy to or from a device).
    pub fn require_cuda(self) -> Result<CudaStream> {
        self.0.ok_or_else(|| Error::Stream {
            stream: "none".into(),
            reason: format!("work on a CUDA device needs a stream; {AMBIGUOUS_STREAM}"),
        })
    }

    /// The CUDA stream, if any.
    pub fn cuda_stream(self) -> Option<CudaStream> {
        self.0
    }

    /// The value an allocator or a printed record shows: the handle, or 0 for none.
    pub fn raw(self) -> usize {
        self.0.map_or(0, CudaStream::handle)
    }
}

impl From<CudaStream> for Stream {
    fn from(stream: CudaStream) -> Stream {
        Stream::on(stream)
    }
}

impl From<Option<CudaStream>> for Stream {
    fn from(stream: Option<CudaStream>) -> Stream {
        Stream(stream)
    }
}

/// The stream some data is produced on, re-declarable while other threads read it (a
/// tensor's `set_stream`).
#[derive(Debug, Default)]
pub struct StreamCell(AtomicUsize);

impl StreamCell {
    pub fn new(stream: Stream) -> StreamCell {
        StreamCell(AtomicUsize::new(stream.raw()))
    }

    pub fn get(&self) -> Stream {
        Stream(NonZeroUsize::new(self.0.load(Ordering::Acquire)).map(CudaStream))
    }

    pub fn set(&self, stream: Stream) {
        self.0.store(stream.raw(), Ordering::Release);
    }
}

/// What a consumer asks of the producer's stream at a hand-off, as every face spells it once
/// converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerStream {
    /// The consumer named no stream: host data needs none; CUDA data is made ready for the
    /// legacy default stream (DLPack's rule for `stream=None`).
    Unnamed,
    /// The consumer takes care of ordering itself (DLPack's -1): nothing is done.
    Unordered,
    /// The consumer's work is queued on this stream.
    On(CudaStream),
}

impl ConsumerStream {
    /// DLPack's `stream` argument (`__dlpack__(stream=…)`): None, -1, or a stream handle, for
    /// data on `device`. 0, other negatives and any stream for data outside CUDA are refused.
    pub fn from_dlpack(value: Option<i64>, device: Device) -> Result<ConsumerStream> {
        let refuse = |reason: String| Error::Stream {
            stream: value.map_or("None".into(), |v| v.to_string()),
            reason,
        };
        let asked = match value {
            None => ConsumerStream::Unnamed,
            Some(-1) => ConsumerStream::Unordered,
            Some(0) => return Err(refuse(AMBIGUOUS_STREAM.into())),
            Some(v) if v < 0 => {
                return Err(refuse(
                    "not a CUDA stream (DLPack allows -1 and handles)".into(),
                ))
            }
            Some(v) => ConsumerStream::On(CudaStream::from_handle(v as usize)?),
        };
        ConsumerStream::check(asked, device, refuse)
    }

    /// The C ABI's stream argument: 0 names no stream (only for host data; a device's
    /// stream must be named), any other value a stream handle as in DLPack.
    pub fn from_c(value: usize, device: Device) -> Result<ConsumerStream> {
        let refuse = |reason: String| Error::Stream {
            stream: value.to_string(),
            reason,
        };
        if value == 0 && device.kind == DeviceKind::Cuda {
            return Err(refuse(AMBIGUOUS_STREAM.into()));
        }
        let asked = match NonZeroUsize::new(value) {
            None => ConsumerStream::Unnamed,
            Some(v) => ConsumerStream::On(CudaStream(v)),
        };
        ConsumerStream::check(asked, device, refuse)
    }

    fn check(
        asked: ConsumerStream,
        device: Device,
        refuse: impl Fn(String) -> Error,
    ) -> Result<ConsumerStream> {
        match (asked, device.kind) {
            (_, DeviceKind::Cuda) | (ConsumerStream::Unnamed | ConsumerStream::Unordered, _) => {
                Ok(asked)
            }
            (ConsumerStream::On(_), _) if device.is_host_accessible() => Err(refuse(format!(
                "the data is on {device}, which has no streams: name none"
            ))),
            (ConsumerStream::On(_), _) => Err(refuse(format!(
                "the data is on {device}: zerohop orders CUDA streams only"
            ))),
        }
    }

    /// The stream the consumer's work runs on, for CUDA data (`None` when it orders itself).
    pub fn for_cuda(self) -> Option<CudaStream> {
        match self {
            ConsumerStream::Unnamed => Some(CudaStream::LEGACY),
            ConsumerStream::Unordered => None,
            ConsumerStream::On(s) => Some(s),
        }
    }
}
