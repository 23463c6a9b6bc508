//! The hand-off: the one place every face (Python, C, Rust) asks what may happen when data
//! leaves zerohop for a consumer.
//!
//! - which stream: data carries the [`Stream`] that produces it, a consumer names its own
//!   ([`ConsumerStream`], converted from each face's convention once), and [`ready_on`]
//!   orders the consumer after the producer without the host waiting, inside or outside a
//!   CUDA graph capture; the memory remembers the consumer's stream, so its free waits for
//!   the consumer's work (see `Buffer`);
//! - share, copy or refuse: [`plan`] answers for a tensor, a [`Consumer`] and what the caller
//!   allows, with a typed [`CopyReason`] for every copy and every refusal.

mod plan;
mod ready;
#[cfg(test)]
mod tests;

pub use crate::memory::{ConsumerStream, CudaStream, Stream, StreamCell};
pub use plan::{check_shared, plan, Allowance, Consumer, CopyReason, Plan};
pub use ready::ready_on;
