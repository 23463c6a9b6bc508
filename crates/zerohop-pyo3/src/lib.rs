//! DLPack in and out of PyO3 extensions, over the `zerohop` core crate.
//!
//! zerohop's Python package and the ECG app's extension both hand tensors to Python and take
//! them from any DLPack producer; the capsule rules (who owns a tensor, when it is deleted,
//! which capsule to ask a producer for) live here once. Errors of the core crate reach the
//! caller through the mapping it passes, so each extension keeps its own exception classes.

pub mod args;
pub mod capsule;
pub mod producer;

pub use capsule::{consume, legacy_capsule, versioned_capsule};
pub use producer::request_capsule;
