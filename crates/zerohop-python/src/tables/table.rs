//! `zerohop.Table`: an SoA table from Python, and its tensor maps handed to frameworks.

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};
use zerohop::dlpack::{export_versioned, ExportOptions};
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
    /// For SoA tables on a CUDA device: the stream their data is produced on (1: legacy).
    pub(crate) stream: usize,
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
fn dtype_name(dtype: &Bound<'_, PyAny>) -> PyResult<String> {
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

/// torch's current CUDA stream on `device`, as a DLPack stream number (its default stream,
/// the legacy one, is 1). `torch.from_dlpack(tensor)` finds it in Python, through a device
/// context and a new `Stream` object: 25-35 us of a 45 us view of CUDA IPC memory
/// (bench/ipc_cuda_phases.py); the raw handle is one C call, the one Inductor's generated
/// code makes. Older torch without it takes the public way.
fn torch_current_stream(torch: &Bound<'_, PyAny>, device: i32) -> PyResult<usize> {
    let py = torch.py();
    let raw: usize = match torch
        .getattr(intern!(py, "_C"))?
        .getattr(intern!(py, "_cuda_getCurrentRawStream"))
    {
        Ok(raw) => raw.call1((device,))?.extract()?,
        Err(_) => torch
            .getattr(intern!(py, "cuda"))?
            .call_method1(intern!(py, "current_stream"), (device,))?
            .getattr(intern!(py, "cuda_stream"))?
            .extract()?,
    };
    Ok(if raw == 0 { 1 } else { raw })
}

/// A mapped tensor handed to `framework`, which must share its memory: a consumer that would
/// copy (JAX, for addresses it does not take) or that would ignore read-only (torch) gets the
/// data only as a reported copy, and only when `allow_copy` says so.
#[allow(clippy::too_many_arguments)]
pub(crate) fn to_framework<'py>(
    py: Python<'py>,
    name: &str,
    mut view: TensorView,
    mut copied: bool,
    framework: Option<&str>,
    stream: usize,
    allow_copy: bool,
    share_readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let dlpack = intern!(py, "from_dlpack");
    let on_cuda = view.device().kind == zerohop::DeviceKind::Cuda;
    if framework == Some("torch") && view.is_readonly() && !copied && !share_readonly {
        // torch ignores DLPack's READ_ONLY flag: shared memory would be writable there.
        if !allow_copy {
            return Err(PyBufferError::new_err(format!(
                "tensor {name:?} is read-only (Arrow data always is), and torch ignores \
                 DLPack's read-only flag, so torch could write to it. Options: copy=True (a \
                 private, reported copy); share_readonly=True (the same memory, on your word \
                 that nothing writes to it through torch); or take it through NumPy, JAX or \
                 zerohop tensors, which keep it read-only"
            )));
        }
        view = view.private_copy().py()?;
        copied = true;
        warn_copy(
            py,
            &format!("tensor {name:?} is read-only and torch ignores that flag: copied"),
        )?;
    }
    let tensor = || {
        let t = if on_cuda {
            PyTensor::with_stream(view.clone(), copied, stream)
        } else {
            PyTensor::new(view.clone(), copied)
        };
        Bound::new(py, t)
    };
    match framework {
        None | Some("zerohop") => Ok(tensor()?.into_any()),
        Some("torch") => {
            let torch = || py.import(intern!(py, "torch"));
            if on_cuda {
                // torch's current stream waits on ours (torch, given a capsule, asks nothing).
                let consumer = torch_current_stream(torch()?.as_any(), view.device().id)?;
                if stream != 0 && stream != consumer {
                    zerohop::cuda::order_streams(
                        view.device().id,
                        zerohop::Stream(stream),
                        zerohop::Stream(consumer),
                    )
                    .py()?;
                }
            }
            let shared = if view.is_readonly() {
                // Reaching here read-only means share_readonly=True (see above).
                // SAFETY: the caller's word that nothing writes to it through torch.
                unsafe { view.clone().assume_never_written() }
            } else {
                view.clone()
            };
            let managed = export_versioned(&shared, ExportOptions { is_copied: copied }).py()?;
            if view.device().is_host_accessible() {
                // C speed, no Python protocol calls; host memory needs no stream sync.
                if let Some(t) = crate::base::exchange::torch_tensor_from_managed(py, managed)? {
                    return Ok(t);
                }
            }
            // torch takes a capsule directly, skipping two Python-level protocol calls.
            let capsule = zerohop_pyo3::capsule::versioned_capsule(py, managed)?;
            torch()?.call_method1(dlpack, (capsule,))
        }
        Some("numpy") => py
            .import(intern!(py, "numpy"))?
            .call_method1(dlpack, (tensor()?,)),
        Some("jax") => {
            // JAX asks for legacy capsules, which cannot carry the read-only mark; its arrays
            // are immutable, so it may share read-only memory all the same.
            let shared = if view.is_readonly() {
                // SAFETY: the alias goes to jax.numpy.from_dlpack alone, and JAX never writes
                // to the memory behind an array.
                let alias = unsafe { view.clone().assume_never_written() };
                Bound::new(py, PyTensor::new(alias, copied))?
            } else {
                tensor()?
            };
            let array = py
                .import(intern!(py, "jax.numpy"))?
                .call_method1(dlpack, (shared,))?;
            if view.numel() > 0 && !copied {
                jax_shares(py, name, &view, &array, allow_copy)?;
            }
            Ok(array)
        }
        // Legacy capsules cannot say IS_COPIED; a copy made earlier was reported already.
        Some("tensorflow") => tensorflow(py, name, view, allow_copy),
        Some(other) => Err(PyValueError::new_err(format!(
            "framework {other:?} must be 'torch', 'jax', 'numpy', 'tensorflow' or None \
             (zerohop tensors)"
        ))),
    }
}

/// A tensor for TensorFlow, through the legacy DLPack capsule (the only kind
/// `tf.experimental.dlpack.from_dlpack` takes). TF takes C-contiguous memory only (it refuses
/// strides), so a strided tensor goes as a reported copy, with `allow_copy`. TF tensors are
/// immutable, so read-only memory is shared with it as with JAX.
fn tensorflow<'py>(
    py: Python<'py>,
    name: &str,
    view: TensorView,
    allow_copy: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let view = if view.is_contiguous() {
        view
    } else if allow_copy {
        warn_copy(
            py,
            &format!(
                "tensor {name:?} (strides {:?}) was copied: TensorFlow takes only C-contiguous \
                 memory",
                view.strides()
            ),
        )?;
        view.private_copy().py()?
    } else {
        return Err(PyBufferError::new_err(format!(
            "tensor {name:?} has strides {:?} and TensorFlow takes only C-contiguous memory \
             (its DLPack import refuses strides). Options: copy=True (a reported copy); a \
             single plain column, which is contiguous",
            view.strides()
        )));
    };
    let shared = if view.is_readonly() {
        // SAFETY: the alias goes to TensorFlow alone, whose tensors are immutable: TF never
        // writes to the memory behind a tf.Tensor.
        unsafe { view.assume_never_written() }
    } else {
        view
    };
    let managed = zerohop::dlpack::export_legacy(&shared).py()?;
    let capsule = zerohop_pyo3::capsule::legacy_capsule(py, managed)?;
    py.import(intern!(py, "tensorflow.experimental.dlpack"))?
        .call_method1(intern!(py, "from_dlpack"), (capsule,))
}

/// JAX copies what it cannot take in place without saying so; compare the address it ended up
/// with, and name the reason: a 64-bit type it narrowed (jax_enable_x64 off) or, on the CPU,
/// an address that is not 64-byte aligned.
fn jax_shares(
    py: Python<'_>,
    name: &str,
    view: &TensorView,
    array: &Bound<'_, PyAny>,
    allow_copy: bool,
) -> PyResult<()> {
    let address: usize = array
        .call_method0(intern!(py, "unsafe_buffer_pointer"))?
        .extract()?;
    let ours = view.data_ptr() as usize;
    if address == ours {
        return Ok(());
    }
    let theirs = array.getattr(intern!(py, "dtype"))?.str()?.to_string();
    let dtype = view.dtype().to_string();
    let (why, options) = if theirs != dtype {
        (
            format!(
                "JAX copied tensor {name:?}: it converted {dtype} to {theirs} (64-bit types need \
                 jax.config.update(\"jax_enable_x64\", True) before the first JAX array)"
            ),
            "enable jax_enable_x64; a 32-bit column; or copy=True (a reported copy)",
        )
    } else if !ours.is_multiple_of(64) {
        (
            format!(
                "JAX copied tensor {name:?}: it starts at 0x{ours:x} ({} bytes past a 64-byte \
                 boundary), and JAX takes only 64-byte-aligned memory in place",
                ours % 64
            ),
            "copy=True (a reported copy); a table with alignment >= 64; or, with alignment \
             equal to the element size, a row count whose columns end on 64-byte boundaries (a \
             multiple of 16 rows for float32)",
        )
    } else {
        (
            format!(
                "JAX copied tensor {name:?} (0x{ours:x}, {dtype} {:?}, strides {:?}) for a \
                 reason of its own",
                view.shape(),
                view.strides()
            ),
            "copy=True (a reported copy)",
        )
    };
    if allow_copy {
        return warn_copy(py, &why);
    }
    Err(PyBufferError::new_err(format!("{why}. Options: {options}")))
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
            stream: zerohop::cuda::LEGACY_STREAM.0,
            chunks: Vec::new(),
        }
    }

    /// The stream a tensor of this table is produced on.
    pub(crate) fn stream(&self) -> usize {
        match &self.storage {
            Storage::Columns(c) => c.stream().0,
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
