//! `ready_on`: the consumer's stream waits for the producer's work, once, for every face.

use crate::buffer::{Buffer, Owner};
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::memory::{ConsumerStream, Stream};

/// Makes data on `device`, produced on `producer`, ready for a consumer's `consumer` stream:
/// an event recorded on the producer's stream and waited on by the consumer's (the host
/// never waits; inside a CUDA graph capture, see `cuda::order_streams`). `owner`, the
/// memory's owner, remembers the consumer's stream so that freeing the memory waits for the
/// consumer's work. Host data has no streams: a consumer naming one is refused.
pub fn ready_on(
    device: Device,
    owner: Option<&Owner>,
    producer: Stream,
    consumer: ConsumerStream,
) -> Result<()> {
    if device.kind != DeviceKind::Cuda {
        return match consumer {
            ConsumerStream::On(stream) => Err(Error::Stream {
                stream: format!("0x{:x}", stream.handle()),
                reason: format!("the data is on {device}, which has no CUDA streams"),
            }),
            _ => Ok(()),
        };
    }
    let Some(consumer) = consumer.for_cuda() else {
        return Ok(());
    };
    if let Some(owner) = owner {
        Buffer::note_consumer(owner, consumer);
    }
    match producer.cuda_stream() {
        Some(producer) if producer != consumer => order(device, producer.into(), consumer.into()),
        _ => Ok(()),
    }
}

#[cfg(feature = "cuda")]
fn order(device: Device, producer: Stream, consumer: Stream) -> Result<()> {
    crate::cuda::order_streams(device.id, producer, consumer)
}

#[cfg(not(feature = "cuda"))]
fn order(_: Device, _: Stream, _: Stream) -> Result<()> {
    Err(Error::without_cuda("stream ordering"))
}
