//! `zerohop.Table`: an SoA table from Python, and its tensor maps handed to frameworks.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::handoff::{
    check_shared, plan, ready_on, Allowance, Consumer, ConsumerStream, Plan, Stream,
};
use zerohop::soa::{Schema, SoaTable};
use zerohop::value::Value;
use zerohop::{Device, TensorView};

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::base::tensor::PyTensor;
use crate::tables::storage::Storage;

/// A structure-of-arrays table: every column (table scalar, per-row column, vector[K],
/// matrix[R, C]) padded to the alignment in one buffer.
///
/// A table also wraps Arrow data (`zerohop.from_arrow`, `Table.from_tensors`) or CUDA
/// columns without copying them; `storage` says which.
#[pyclass(name = "Table", module = "zerohop", frozen)]
pub struct PyTable {
    pub(crate) storage: Storage,
    /// For SoA tables on a CUDA device: the stream their data is produced on.
    pub(crate) stream: Stream,
    /// The batches an Arrow import arrived in, when there were several: a re-export streams
    /// them as they came (the storage holds their concatenation).
    pub(crate) chunks: Vec<zerohop::arrow::arrow_array::RecordBatch>,
}

/// A schema from its structured items (see `zerohop::soa::Schema::from_value`), dtypes given
/// as NumPy or torch objects (scalar types, or dtypes: what has an `itemsize`) named first.
pub(crate) fn parse_schema(schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let dtype = |obj: &Bound<'_, PyAny>| {
        if !obj.is_instance_of::<PyType>() && !obj.hasattr("itemsize")? {
            return Ok(None);
        }
        dtype_name(obj).map(|n| Some(Value::Str(n)))
    };
    let items = crate::base::value::value_with(schema, 0, &dtype)?;
    Schema::from_value(&items).py()
}

/// Accepts "float32", NumPy dtypes and scalar types (`np.float32`, ml_dtypes' `bfloat16`),
/// and torch dtypes.
pub(crate) fn dtype_name(dtype: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = dtype.cast::<PyString>() {
        return Ok(s.to_string());
    }
    if dtype.is_instance_of::<PyType>() {
        // A scalar type: NumPy knows its dtype (and says no for types it does not know).
        let numpy = dtype.py().import("numpy").map_err(|_| {
            PyTypeError::new_err(format!("dtype {dtype} is a type; name it as a string"))
        })?;
        let resolved = numpy
            .call_method1("dtype", (dtype,))
            .ok()
            // NumPy maps any other class to its object dtype, which holds no numbers.
            .filter(|d| d.getattr("kind").is_ok_and(|k| !k.eq("O").unwrap_or(true)))
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "dtype {dtype} is not a NumPy scalar type; name it as a string \
                     (\"float32\")"
                ))
            })?;
        return resolved.getattr("name")?.extract();
    }
    let text = dtype.str()?.to_string();
    Ok(text.trim_start_matches("torch.").to_string())
}

/// A tensor map from a spec in any of its forms (see `zerohop::soa::structured`).
pub(crate) fn map_builder(spec: &Bound<'_, PyAny>) -> PyResult<zerohop::soa::TensorMapBuilder> {
    let spec = crate::base::value::value_of(spec, 0)?;
    zerohop::soa::TensorMap::builder().spec_value(&spec).py()
}

/// torch's current CUDA stream on `device` (its default stream, the NULL stream, is the
/// legacy one). `torch.from_dlpack(tensor)` finds it in Python, through a device context and
/// a new `Stream` object: 25-35 us of a 45 us view of CUDA IPC memory
/// (bench/ipc_cuda_phases.py); the raw handle is one C call, the one Inductor's generated
/// code makes. Older torch without it takes the public way.
fn torch_current_stream(py: Python<'_>, device: Device) -> PyResult<Stream> {
    // torch's C exchange API first: one C call, not an import and two attribute lookups.
    if let Some(raw) = crate::base::exchange::torch_work_stream(py, device) {
        return Ok(Stream::from_allocator(device, raw));
    }
    let torch = py.import(intern!(py, "torch"))?;
    let raw: usize = match torch
        .getattr(intern!(py, "_C"))?
        .getattr(intern!(py, "_cuda_getCurrentRawStream"))
    {
        Ok(raw) => raw.call1((device.id,))?.extract()?,
        Err(_) => torch
            .getattr(intern!(py, "cuda"))?
            .call_method1(intern!(py, "current_stream"), (device.id,))?
            .getattr(intern!(py, "cuda_stream"))?
            .extract()?,
    };
    Ok(Stream::from_allocator(device, raw))
}

/// torch's current stream on `device`, made ready for data produced on `producer` (an event,
/// no host wait; nothing when they are one stream): the stream the handed-out tensors are then
/// produced on. `owner` remembers the stream for its free.
pub(crate) fn ready_for_torch(
    py: Python<'_>,
    device: Device,
    owner: Option<&zerohop::Owner>,
    producer: Stream,
) -> PyResult<Stream> {
    let current = torch_current_stream(py, device)?;
    ready_on(
        device,
        owner,
        producer,
        ConsumerStream::On(current.require_cuda().py()?),
    )
    .py()?;
    Ok(current)
}

/// Whether JAX keeps 64-bit types (`jax_enable_x64`), for the plan's prediction of its copies.
fn jax_x64(py: Python<'_>) -> bool {
    let flag = || -> PyResult<bool> {
        py.import(intern!(py, "jax"))?
            .getattr(intern!(py, "config"))?
            .getattr(intern!(py, "jax_enable_x64"))?
            .extract()
    };
    flag().unwrap_or(false)
}

/// A mapped tensor handed to `framework` by the core's plan: shared, copied with a reported
/// reason when the caller allows it, or refused with the reason and the options.
#[allow(clippy::too_many_arguments)]
pub(crate) fn to_framework<'py>(
    py: Python<'py>,
    name: &str,
    mut view: TensorView,
    mut copied: bool,
    framework: Option<&str>,
    stream: Stream,
    allow_copy: bool,
    share_readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let x64 = framework == Some("jax") && jax_x64(py);
    let consumer = Consumer::named(framework, x64).py()?;
    let allow = Allowance {
        copy: allow_copy,
        share_readonly: share_readonly || copied,
    };
    let vouched = match plan(name, &view, consumer, allow).py()? {
        Plan::Share { vouched } => vouched,
        Plan::Copy(reason) => {
            view = view.private_copy().py()?;
            copied = true;
            warn_copy(py, &format!("tensor {name:?} was copied: {reason}"))?;
            false
        }
    };
    let device = view.device();
    let stream = if device.kind == zerohop::DeviceKind::Cuda {
        stream
    } else {
        Stream::HOST
    };
    // SAFETY: the plan vouched that this consumer never writes the memory (immutable arrays)
    // or the caller gave their word (share_readonly=True).
    let shared = if vouched {
        unsafe { view.clone().assume_never_written() }
    } else {
        view.clone()
    };
    let tensor = |v: TensorView| Bound::new(py, PyTensor::with_stream(v, copied, stream));
    let dlpack = intern!(py, "from_dlpack");
    match consumer {
        Consumer::Honouring if framework == Some("numpy") => py
            .import(intern!(py, "numpy"))?
            .call_method1(dlpack, (tensor(view)?,)),
        Consumer::Torch => {
            if device.kind == zerohop::DeviceKind::Cuda {
                // torch, given a tensor through its C API, asks nothing: its current stream
                // waits on ours first.
                ready_for_torch(py, device, Some(view.owner()), stream)?;
            }
            let managed = export_versioned(&shared, ExportOptions { is_copied: copied }).py()?;
            // C speed, no Python protocol calls ("no sync": ordered above).
            if let Some(t) = crate::base::exchange::torch_tensor_from_managed(py, managed)? {
                return Ok(t);
            }
            let torch = py.import(intern!(py, "torch"))?;
            // torch takes a capsule directly, skipping two Python-level protocol calls.
            let capsule = zerohop_pyo3::capsule::versioned_capsule(py, managed)?;
            torch.call_method1(dlpack, (capsule,))
        }
        Consumer::Jax { .. } => {
            let array = py
                .import(intern!(py, "jax.numpy"))?
                .call_method1(dlpack, (tensor(shared)?,))?;
            if view.numel() > 0 && !copied {
                jax_shares(py, name, &view, &array, allow_copy)?;
            }
            Ok(array)
        }
        // Legacy capsules (the only kind TensorFlow takes) cannot say IS_COPIED; a copy made
        // earlier was reported already.
        Consumer::TensorFlow => {
            let managed = zerohop::dlpack::export_legacy(&shared).py()?;
            let capsule = zerohop_pyo3::capsule::legacy_capsule(py, managed)?;
            py.import(intern!(py, "tensorflow.experimental.dlpack"))?
                .call_method1(dlpack, (capsule,))
        }
        _ => Ok(tensor(view)?.into_any()),
    }
}

/// JAX copies what it cannot take in place without saying so, and the plan predicts only what
/// is known (alignment, x64): the core judges the address JAX's array ended up at.
fn jax_shares(
    py: Python<'_>,
    name: &str,
    view: &TensorView,
    array: &Bound<'_, PyAny>,
    allow_copy: bool,
) -> PyResult<()> {
    let landed: usize = array
        .call_method0(intern!(py, "unsafe_buffer_pointer"))?
        .extract()?;
    let allow = Allowance {
        copy: allow_copy,
        share_readonly: false,
    };
    match check_shared(name, view, "JAX", landed, allow).py()? {
        Some(reason) => warn_copy(py, &format!("tensor {name:?} was copied: {reason}")),
        None => Ok(()),
    }
}

/// The resource a table on `device` comes from: the device's current resource, else plain
/// device memory ("cuda:N"), pinned host memory ("cuda_host") or the host default ("cpu").
pub(crate) fn resource_for(device: &str) -> PyResult<std::sync::Arc<dyn zerohop::MemoryResource>> {
    let device = Device::parse(device).py()?;
    if let Some(current) = zerohop::memory::current_resource(device) {
        return Ok(current);
    }
    Ok(match device.kind {
        zerohop::DeviceKind::Cuda => {
            std::sync::Arc::new(zerohop::cuda::CudaDeviceResource::new(device.id).py()?)
        }
        zerohop::DeviceKind::CudaHost => {
            std::sync::Arc::new(zerohop::cuda::CudaPinnedResource::new(device.id).py()?)
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "tables live on cpu, cuda:N or cuda_host, not {device}"
            )))
        }
    })
}

impl PyTable {
    pub fn from_table(table: SoaTable) -> Self {
        PyTable::with_storage(Storage::Soa(table))
    }

    pub(crate) fn with_storage(storage: Storage) -> Self {
        PyTable {
            storage,
            stream: Stream::LEGACY,
            chunks: Vec::new(),
        }
    }

    /// The stream a tensor of this table is produced on.
    pub(crate) fn stream(&self) -> Stream {
        match &self.storage {
            Storage::Columns(c) => c.stream(),
            _ => self.stream,
        }
    }

    pub(crate) fn soa(&self) -> Option<&SoaTable> {
        match &self.storage {
            Storage::Soa(t) => Some(t),
            _ => None,
        }
    }
}
