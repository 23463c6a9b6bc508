//! The ECG pipeline of NVIDIA's "ML Frameworks Interoperability, Part 3", on zerohop, for
//! real recordings: input (CSV, PhysioNet WFDB) → SoA columns → R-peak detection → one beat
//! row per R peak, every stage writing into zerohop memory.
//!
//! Two detectors: [`Method::Adaptive`] ([`detect`]: adaptive thresholds after Pan & Tompkins,
//! any rate from 30 to 250 bpm) and [`Method::Blog`] ([`segment`]: the blog's Ricker
//! curvature, fixed-window local-maxima gates and length pruning, kept for comparison). The
//! blog's parameters are for 250 Hz; [`Params::for_rate`] scales every window.

pub mod adaptive;
pub mod csv;
pub mod detect;
pub mod edf;
mod error;
mod file;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod quality;
pub mod segment;
mod simd;
pub mod synth;
pub mod vae;
pub mod wfdb;

pub use adaptive::segment_with;
pub use detect::{DetectParams, Method};
pub use error::{EcgError, ParseProblem, Result};
pub use segment::{Params, Segmentation};
