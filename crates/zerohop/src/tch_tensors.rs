//! tch-rs tensors over zerohop memory (feature `tch`): a tensor or an SoA table column as a
//! `tch::Tensor` made by `Tensor::from_blob` with its shape, strides, element kind and device,
//! sharing the memory (no copy). libtorch does not own such memory, so the result carries the
//! memory's owner beside the tensor and keeps it alive as long as the result lives.
//!
//! tch 0.26 links libtorch 2.13; `make test-tch` builds and tests this feature in a virtual
//! environment with that torch (see the README).

use crate::buffer::Owner;
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::soa::SoaTable;
use crate::tensor::TensorView;

/// A `tch::Tensor` over zerohop memory, with the owner that keeps that memory alive.
///
/// It dereferences to the tensor. Results of operations are new tensors that libtorch owns;
/// views of it (`narrow`, `select`, `shallow_clone`, …) share the memory without holding the
/// owner, so they must not outlive this value.
pub struct TchTensor {
    // Declared first: dropped before the owner releases the memory it points into.
    tensor: tch::Tensor,
    owner: Owner,
}

impl TchTensor {
    pub fn tensor(&self) -> &tch::Tensor {
        &self.tensor
    }

    /// What keeps the memory alive.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
}

impl std::ops::Deref for TchTensor {
    type Target = tch::Tensor;

    fn deref(&self) -> &tch::Tensor {
        &self.tensor
    }
}

/// The tch element kind of `dtype` (libtorch has no unsigned integers wider than 8 bits).
pub fn tch_kind(dtype: DType) -> Result<tch::Kind> {
    let kind = match dtype {
        DType::BOOL => tch::Kind::Bool,
        DType::I8 => tch::Kind::Int8,
        DType::I16 => tch::Kind::Int16,
        DType::I32 => tch::Kind::Int,
        DType::I64 => tch::Kind::Int64,
        DType::U8 => tch::Kind::Uint8,
        DType::F16 => tch::Kind::Half,
        DType::BF16 => tch::Kind::BFloat16,
        DType::F32 => tch::Kind::Float,
        DType::F64 => tch::Kind::Double,
        DType::C64 => tch::Kind::ComplexFloat,
        DType::C128 => tch::Kind::ComplexDouble,
        other => {
            return Err(Error::DType {
                what: "dtype for tch".into(),
                reason: format!("{other} has no tch::Kind (libtorch lacks it)"),
            })
        }
    };
    Ok(kind)
}

/// The tch device of a zerohop device: host memory (pinned too) is the CPU.
pub fn tch_device(device: Device) -> Result<tch::Device> {
    match device.kind {
        DeviceKind::Cpu | DeviceKind::CudaHost => Ok(tch::Device::Cpu),
        DeviceKind::Cuda => Ok(tch::Device::Cuda(device.id as usize)),
        _ => Err(Error::Device {
            what: "device for tch".into(),
            reason: format!("{device} has no tch::Device (tch knows the CPU and CUDA devices)"),
        }),
    }
}

impl TensorView {
    /// This tensor as a `tch::Tensor` sharing its memory (shape, strides, kind and device
    /// kept). Refuses a read-only view (libtorch tensors are always writable) and negative
    /// strides (libtorch has none).
    pub fn to_tch(&self) -> Result<TchTensor> {
        if self.is_readonly() {
            return Err(Error::InvalidArgument {
                what: "tensor".into(),
                reason: "is read-only, and a tch::Tensor is always writable; copy it or \
                         map it without read-only"
                    .into(),
            });
        }
        if self.strides().iter().any(|&s| s < 0) {
            // libtorch has no negative strides, and from_blob aborts the process on them
            // instead of returning an error.
            return Err(Error::InvalidArgument {
                what: "tensor".into(),
                reason: format!(
                    "has negative strides {:?}, which libtorch does not support; make it                      contiguous first",
                    self.strides()
                ),
            });
        }
        let kind = tch_kind(self.dtype())?;
        let device = tch_device(self.device())?;
        // SAFETY: the view's shape and strides (in elements) describe memory of this kind on
        // this device inside the owner's allocation; the owner travels with the tensor and is
        // dropped after it, so libtorch never reads freed memory.
        let tensor = unsafe {
            tch::Tensor::f_from_blob(self.data_ptr(), self.shape(), self.strides(), kind, device)
        }
        .map_err(|e| Error::InvalidArgument {
            what: "tensor".into(),
            reason: format!("libtorch refused it: {e}"),
        })?;
        Ok(TchTensor {
            tensor,
            owner: self.owner().clone(),
        })
    }
}

impl SoaTable {
    /// Column `name` as a `tch::Tensor`: (n,) for a column, (n, K) for a vector, (n, R, C)
    /// for a matrix, the padding between components in the strides. Writing through it writes
    /// the table: the same sharing rule as [`SoaTable::column_mut`].
    pub fn column_tch(&self, name: &str) -> Result<TchTensor> {
        self.column_view(name)?.to_tch()
    }
}
