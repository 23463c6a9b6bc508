//! `zerohop.Tensor`, the type every other module builds on: a `TensorView` (which owns or
//! keeps alive its memory) and the stream that produces it. Its Python methods live in
//! `api::tensor_methods`, above the protocols they speak.

use pyo3::prelude::*;
use zerohop::handoff::{Stream, StreamCell};
use zerohop::{DType, DTypeCode, DeviceKind, TensorView};

/// A view of memory that other frameworks can take without a copy.
#[pyclass(name = "Tensor", module = "zerohop", frozen)]
pub struct PyTensor {
    pub view: TensorView,
    /// The producer copied the data for us (DLPack IS_COPIED), or zerohop made a copy.
    pub is_copied: bool,
    /// For CUDA data: the stream whose queued work produces it (the legacy default stream,
    /// where imports are ordered, unless declared). Consumers on other streams wait on it.
    stream: StreamCell,
}

impl PyTensor {
    pub fn new(view: TensorView, is_copied: bool) -> Self {
        let stream = if view.device().kind == DeviceKind::Cuda {
            Stream::LEGACY
        } else {
            Stream::HOST
        };
        Self::with_stream(view, is_copied, stream)
    }

    pub fn with_stream(view: TensorView, is_copied: bool, stream: Stream) -> Self {
        PyTensor {
            view,
            is_copied,
            stream: StreamCell::new(stream),
        }
    }

    pub fn stream(&self) -> Stream {
        self.stream.get()
    }

    /// Records that work queued on `stream` produces this tensor's data.
    pub fn record_stream(&self, stream: Stream) {
        self.stream.set(stream);
    }
}

/// The NumPy type string of a dtype, when NumPy has one.
pub fn typestr(dtype: DType) -> Option<String> {
    let kind = match dtype.code {
        DTypeCode::Int => 'i',
        DTypeCode::UInt => 'u',
        DTypeCode::Float => 'f',
        DTypeCode::Complex if dtype.bits >= 64 => 'c',
        DTypeCode::Bool => 'b',
        _ => return None,
    };
    if dtype.lanes != 1 {
        return None;
    }
    let bytes = dtype.itemsize();
    let order = if bytes == 1 { '|' } else { '<' };
    Some(format!("{order}{kind}{bytes}"))
}
