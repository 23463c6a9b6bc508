//! Ordering one stream after another when either may be capturing a CUDA graph.
//!
//! Outside a capture an event recorded on the producer and waited on by the consumer is
//! enough. Inside one, CUDA forbids a plain wait that crosses the capture's boundary (it
//! invalidates the capture: `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, then `…_INVALIDATED` on
//! the framework's next call), and forbids anything that synchronises. So:
//! - both streams in the same capture: the event joins them inside the graph, as any fork and
//!   join does;
//! - only the consumer capturing: the wait becomes an external event node of the graph
//!   (`CU_EVENT_WAIT_EXTERNAL`): each replay waits for the producer's work recorded now. The
//!   graph keeps the event alive through a user object and gives it back when destroyed;
//! - the producer capturing and the consumer not (or another capture): the data does not exist
//!   until the graph runs, so no stream outside can wait for it; refused by name.

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::{result, sys};

use super::{bind, driver_error, stream_handle};
use crate::error::{Error, Result};
use crate::memory::Stream;

/// Whether a stream is capturing, and which capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capture {
    Idle,
    Active { id: u64, graph: usize },
}

/// The capture state of `stream` (the device's context must be current).
pub fn capture_of(stream: Stream) -> Result<Capture> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: sys::cuuint64_t = 0;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: out-parameters are locals; the dependency outputs may be NULL per the driver's
    // contract; the stream is a handle the caller vouches for.
    unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream_handle(stream),
            &mut status,
            &mut id,
            &mut graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .result()
    }
    // The first call a hand-off makes with the stream: a handle the driver does not know
    // (destroyed, another context's) is the caller's stream, named as such.
    .map_err(|e| match driver_error("stream capture query", e) {
        Error::Cuda { name, code, .. } => Error::Stream {
            stream: format!("0x{:x}", stream.raw()),
            reason: format!(
                "the CUDA driver refused it ({name}, CUresult {code}): a destroyed stream, or \
                 one of another device or context"
            ),
        },
        other => other,
    })?;
    Ok(match status {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Capture::Idle,
        _ => Capture::Active {
            id,
            graph: graph as usize,
        },
    })
}

/// Makes `consumer` wait for the work queued so far on `producer` (see the module's rules for
/// captures). The host never waits. Same stream: nothing.
pub fn order_streams(device: i32, producer: Stream, consumer: Stream) -> Result<()> {
    if producer == consumer {
        return Ok(());
    }
    bind(device)?;
    destroy_released_events();
    let external = match (capture_of(producer)?, capture_of(consumer)?) {
        (Capture::Idle, Capture::Idle) => None,
        (Capture::Active { id: a, .. }, Capture::Active { id: b, .. }) if a == b => None,
        (Capture::Idle, Capture::Active { graph, .. }) => Some(graph),
        (Capture::Active { .. }, _) => {
            return Err(Error::Stream {
                stream: format!("0x{:x}", consumer.raw()),
                reason: format!(
                    "the data is produced inside a CUDA graph capture on stream 0x{:x}; it \
                     exists only when the graph runs, so a stream outside that capture cannot \
                     wait for it (hand it off inside the capture, or after the graph ran)",
                    producer.raw()
                ),
            })
        }
    };
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| driver_error("event", e))?;
    let flags = match external {
        Some(_) => sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL,
        None => sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
    };
    // SAFETY: the event is fresh; the streams are handles the caller vouches for.
    let outcome = unsafe {
        result::event::record(event, stream_handle(producer))
            .and_then(|()| result::stream::wait_event(stream_handle(consumer), event, flags))
            .map_err(|e| driver_error("stream wait", e))
    };
    match (outcome, external) {
        // The graph now refers to the event: it must outlive every replay.
        (Ok(()), Some(graph)) => give_to_graph(graph, event),
        (outcome, _) => {
            // SAFETY: created above and not referenced by any graph; a pending plain wait
            // keeps it alive in the driver until satisfied.
            unsafe { result::event::destroy(event) }
                .map_err(|e| driver_error("event destroy", e))?;
            outcome
        }
    }
}

/// Events whose graphs were destroyed: a user object's destructor may not call CUDA, so it
/// leaves them here and the next ordering destroys them.
static RELEASED_EVENTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn destroy_released_events() {
    let released = std::mem::take(&mut *RELEASED_EVENTS.lock().unwrap_or_else(|p| p.into_inner()));
    for event in released {
        // SAFETY: each came from `give_to_graph`, whose graph no longer references it.
        let _ = unsafe { result::event::destroy(event as sys::CUevent) };
    }
}

unsafe extern "C" fn release_event(event: *mut c_void) {
    RELEASED_EVENTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(event as usize);
}

/// Hands `event` to the graph being captured: destroyed (later, by us) when the graph goes.
fn give_to_graph(graph: usize, event: sys::CUevent) -> Result<()> {
    let mut object: sys::CUuserObject = std::ptr::null_mut();
    // SAFETY: `release_event` only queues the handle; the object starts with one reference,
    // which the graph takes over (MOVE), so the graph's destruction runs the destructor.
    unsafe {
        sys::cuUserObjectCreate(
            &mut object,
            event as *mut c_void,
            Some(release_event),
            1,
            sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32,
        )
        .result()
        .map_err(|e| driver_error("graph user object", e))?;
        sys::cuGraphRetainUserObject(
            graph as sys::CUgraph,
            object,
            1,
            sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32,
        )
        .result()
        .map_err(|e| driver_error("graph retain user object", e))
    }
}
