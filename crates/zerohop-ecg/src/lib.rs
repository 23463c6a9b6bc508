//! The ECG pipeline of NVIDIA's "ML Frameworks Interoperability, Part 3", on zerohop:
//! CSV → SoA columns → Ricker-wavelet curvature → local-maxima gates (rising edges) →
//! segment lengths → pruning → fixed-width beats, every stage writing into zerohop memory.
//!
//! The blog's parameters are for 250 Hz; [`Params::for_rate`] scales every window.

pub mod csv;
mod error;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod segment;
pub mod synth;

pub use error::{EcgError, Result};
pub use segment::{Params, Segmentation};
