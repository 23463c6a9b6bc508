//! Whether a consumer may share a tensor's memory, must get a copy, or is refused: decided
//! here for every face (Python's `to_framework`, `__dlpack__`, the C ABI's maps), so a read-only
//! column meets the same answer in libtorch as in torch.

use std::fmt;

use crate::device::DeviceKind;
use crate::dtype::{DType, DTypeCode};
use crate::error::{Error, Result};
use crate::tensor::TensorView;

/// Who takes the memory, as far as its handling of zerohop's data differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumer {
    /// zerohop's own tensors, NumPy, CuPy and any DLPack consumer that honours the read-only
    /// flag: they share everything.
    Honouring,
    /// torch (Python) and libtorch (C++): DLPack's read-only flag is ignored, so shared
    /// read-only memory would be writable there (pytorch#97856).
    Torch,
    /// JAX: immutable arrays (read-only is safe to share), but it silently copies memory it
    /// cannot take in place: CPU data not 64-byte aligned, 64-bit types unless `x64` is on.
    Jax { x64: bool },
    /// A consumer whose arrays are immutable and that copies on its own whatever it cannot take
    /// in place (JAX reached through its own `from_dlpack`): read-only memory is safe to share,
    /// and the rest is its business.
    Immutable,
    /// TensorFlow: immutable tensors, but its DLPack import takes C-contiguous memory only.
    TensorFlow,
    /// A DLPack consumer of an older major version (legacy capsules): no read-only flag at
    /// all, so read-only memory cannot be marked.
    LegacyDlpack,
}

impl Consumer {
    /// The consumer by the name a caller gives it ("torch", "jax", …; `None`: zerohop).
    pub fn named(name: Option<&str>, jax_x64: bool) -> Result<Consumer> {
        Ok(match name {
            None | Some("zerohop" | "numpy") => Consumer::Honouring,
            Some("torch" | "libtorch") => Consumer::Torch,
            Some("jax") => Consumer::Jax { x64: jax_x64 },
            Some("tensorflow") => Consumer::TensorFlow,
            Some(other) => {
                return Err(Error::InvalidArgument {
                    what: "framework".into(),
                    reason: format!(
                        "{other:?} must be 'torch', 'jax', 'numpy', 'tensorflow' or None \
                         (zerohop tensors)"
                    ),
                })
            }
        })
    }
}

/// What the caller allows beyond sharing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// A private copy may be made (and is reported) where sharing is unsafe or impossible.
    pub copy: bool,
    /// Read-only memory may go to a consumer that ignores the flag, on the caller's word that
    /// nothing writes to it there.
    pub share_readonly: bool,
}

/// Why zerohop copied instead of sharing: the same words in Python's `CopyWarning`, the C
/// ABI's messages and the ECG job's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyReason {
    /// The caller asked for a copy (`copy=True`).
    Requested,
    /// Read-only memory for a consumer that ignores DLPack's read-only flag.
    ReadOnlyIgnored,
    /// A strided tensor for a consumer that takes C-contiguous memory only.
    NotContiguous { strides: Vec<i64> },
    /// A 64-bit type JAX would narrow (x64 off) to `to`.
    JaxNarrows { dtype: String, to: String },
    /// CPU memory JAX takes in place only at 64-byte alignment.
    JaxMisaligned { address: usize },
    /// A padded or broadcast tensor for JAX, which takes compact tensors only.
    JaxNotCompact { strides: Vec<i64> },
    /// The consumer copied for a reason it did not give (seen after the fact).
    ConsumerCopied { consumer: String },
    /// A group's columns are not evenly spaced in one buffer: no strides describe them, so
    /// they were gathered into one tensor (`allow_copy`).
    Gathered { columns: Vec<String> },
    /// A table scalar repeated for every row (`materialize`).
    TableScalars,
    /// Arrow nulls replaced by the caller's fill value.
    NullsFilled { nulls: usize },
    /// Arrow booleans, packed into bits, unpacked to a byte each.
    BitsUnpacked,
}

impl fmt::Display for CopyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyReason::Requested => f.write_str("a copy was asked for (copy=True)"),
            CopyReason::ReadOnlyIgnored => f.write_str(
                "it is read-only, and torch ignores DLPack's read-only flag, so torch could \
                 write to it",
            ),
            CopyReason::NotContiguous { strides } => write!(
                f,
                "it has strides {strides:?}, and TensorFlow takes only C-contiguous memory"
            ),
            CopyReason::JaxNarrows { dtype, to } => write!(
                f,
                "JAX converts {dtype} to {to} (64-bit types need \
                 jax.config.update(\"jax_enable_x64\", True) before the first JAX array)"
            ),
            CopyReason::JaxMisaligned { address } => write!(
                f,
                "it starts at 0x{address:x} ({} bytes past a 64-byte boundary), and JAX takes \
                 only 64-byte-aligned memory in place",
                address % 64
            ),
            CopyReason::JaxNotCompact { strides } => write!(
                f,
                "it has strides {strides:?} (padded or broadcast), and JAX accepts only compact \
                 tensors"
            ),
            CopyReason::ConsumerCopied { consumer } => {
                write!(f, "{consumer} copied it for a reason of its own")
            }
            CopyReason::Gathered { columns } => write!(
                f,
                "its columns {columns:?} are not evenly spaced in one buffer, so no strides \
                 describe them; they were gathered into one tensor"
            ),
            CopyReason::TableScalars => {
                f.write_str("its table scalars were repeated for every row (materialize)")
            }
            CopyReason::NullsFilled { nulls } => {
                write!(f, "its {nulls} nulls were replaced by the fill value")
            }
            CopyReason::BitsUnpacked => {
                f.write_str("Arrow packs booleans into bits; they were unpacked to a byte each")
            }
        }
    }
}

impl CopyReason {
    /// What the caller can do instead, for a refusal's message.
    pub fn options(&self) -> &'static str {
        match self {
            CopyReason::ReadOnlyIgnored => {
                "copy=True (a private, reported copy); share_readonly=True (the same memory, \
                 on your word that nothing writes to it through torch); or take it through \
                 NumPy, JAX or zerohop tensors, which keep it read-only"
            }
            CopyReason::NotContiguous { .. } => {
                "copy=True (a reported copy); a single plain column, which is contiguous"
            }
            CopyReason::JaxNarrows { .. } => {
                "enable jax_enable_x64; a 32-bit column; or copy=True (a reported copy)"
            }
            CopyReason::JaxNotCompact { .. } => {
                "copy=True (a reported copy); materialize=[the group] for table scalars; or a \
                 table built with alignment equal to the element size, whose columns pack \
                 tightly"
            }
            CopyReason::JaxMisaligned { .. } => {
                "copy=True (a reported copy); a table with alignment >= 64; or, with alignment \
                 equal to the element size, a row count whose columns end on 64-byte \
                 boundaries (a multiple of 16 rows for float32)"
            }
            _ => "copy=True (a reported copy)",
        }
    }
}

/// The answer for one tensor and one consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Hand over the memory itself. `vouched`: read-only memory going to a consumer that will
    /// not write it (immutable arrays) or on the caller's word; the export may then drop the
    /// mark the consumer cannot read.
    Share { vouched: bool },
    /// Hand over a private copy, reported with this reason.
    Copy(CopyReason),
}

/// Decides the hand-off of `view` (named `name` in messages) to `consumer`. A copy the caller
/// does not allow is refused with [`Error::HandOff`], which carries the reason and the options.
pub fn plan(name: &str, view: &TensorView, consumer: Consumer, allow: Allowance) -> Result<Plan> {
    let readonly = view.is_readonly();
    let needs_copy = match consumer {
        Consumer::Honouring => None,
        Consumer::Torch | Consumer::LegacyDlpack if readonly && !allow.share_readonly => {
            Some(CopyReason::ReadOnlyIgnored)
        }
        Consumer::Torch | Consumer::LegacyDlpack => None,
        Consumer::TensorFlow if !view.is_contiguous() => Some(CopyReason::NotContiguous {
            strides: view.strides().to_vec(),
        }),
        Consumer::TensorFlow => None,
        Consumer::Jax { .. } if !view.is_dense() => Some(CopyReason::JaxNotCompact {
            strides: view.strides().to_vec(),
        }),
        Consumer::Jax { x64 } if view.numel() > 0 => jax_would_copy(view, x64),
        Consumer::Jax { .. } | Consumer::Immutable => None,
    };
    match needs_copy {
        Some(reason) if allow.copy => Ok(Plan::Copy(reason)),
        Some(reason) => Err(Error::HandOff {
            tensor: name.to_string(),
            reason,
        }),
        None => Ok(Plan::Share {
            vouched: readonly && consumer != Consumer::Honouring,
        }),
    }
}

/// After the fact, for a consumer that copies silently (JAX): `landed` is the address its
/// array ended up at. The same address shared; another is a copy, reported (`Ok(Some)`) when
/// the caller allowed one, else refused with the reason.
pub fn check_shared(
    name: &str,
    view: &TensorView,
    consumer: &str,
    landed: usize,
    allow: Allowance,
) -> Result<Option<CopyReason>> {
    if view.numel() == 0 || landed == view.data_ptr() as usize {
        return Ok(None);
    }
    let reason = CopyReason::ConsumerCopied {
        consumer: consumer.into(),
    };
    if allow.copy {
        return Ok(Some(reason));
    }
    Err(Error::HandOff {
        tensor: name.to_string(),
        reason,
    })
}

fn jax_would_copy(view: &TensorView, x64: bool) -> Option<CopyReason> {
    let dtype = view.dtype();
    let wide = match dtype.code {
        DTypeCode::Int | DTypeCode::UInt | DTypeCode::Float => dtype.bits == 64,
        DTypeCode::Complex => dtype.bits == 128,
        _ => false,
    };
    if wide && !x64 {
        let to = DType::new(dtype.code, dtype.bits / 2);
        return Some(CopyReason::JaxNarrows {
            dtype: dtype.to_string(),
            to: to.to_string(),
        });
    }
    let address = view.data_ptr() as usize;
    if view.device().kind == DeviceKind::Cpu && !address.is_multiple_of(64) {
        return Some(CopyReason::JaxMisaligned { address });
    }
    None
}
