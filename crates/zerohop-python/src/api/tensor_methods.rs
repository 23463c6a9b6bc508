//! The Python methods of `zerohop.Tensor`: DLPack export, the array interfaces, Arrow export,
//! pickling. They sit above every protocol module, so the type itself (`core::tensor`) needs
//! none of them.

use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use zerohop::dlpack::{export_legacy, export_versioned, ExportOptions};
use zerohop::handoff::{plan, ready_on, Allowance, Consumer, ConsumerStream, Plan, Stream};
use zerohop::DeviceKind;

use crate::base::errors::IntoPyResult;
use crate::base::tensor::{typestr, PyTensor};
use zerohop_pyo3::{args, capsule};
/// Reads an optional `(int, int)` argument. Hand-rolled because this sits on the hot path of
/// every `__dlpack__` call and generic tuple extraction costs more than the export itself.
fn int_pair(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<(i64, i64)>> {
    let Some(value) = value else { return Ok(None) };
    if value.is_none() {
        return Ok(None);
    }
    let bad = || PyTypeError::new_err(format!("{name} must be a tuple of two ints or None"));
    let tuple = value.cast::<PyTuple>().map_err(|_| bad())?;
    if tuple.len() != 2 {
        return Err(bad());
    }
    let first: i64 = tuple.get_item(0)?.extract().map_err(|_| bad())?;
    let second: i64 = tuple.get_item(1)?.extract().map_err(|_| bad())?;
    Ok(Some((first, second)))
}

/// A consumer's DLPack `stream` argument, converted by the core's rule.
fn consumer_stream(
    tensor: &PyTensor,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<ConsumerStream> {
    let value: Option<i64> = match stream {
        Some(s) if !s.is_none() => Some(
            s.extract()
                .map_err(|_| PyTypeError::new_err("stream must be None or an int"))?,
        ),
        _ => None,
    };
    ConsumerStream::from_dlpack(value, tensor.view.device()).py()
}

/// The consumer calling `__dlpack__`, found by the module of the Python function that
/// called it (torch ignores the read-only flag, JAX never writes). Looked up only for
/// read-only tensors.
fn calling_consumer(py: Python<'_>) -> Consumer {
    let module = || -> PyResult<String> {
        py.import(intern!(py, "sys"))?
            .call_method1(intern!(py, "_getframe"), (0,))?
            .getattr(intern!(py, "f_globals"))?
            .get_item(intern!(py, "__name__"))?
            .extract()
    };
    match module()
        .as_deref()
        .map(|m| m.split('.').next().unwrap_or(""))
    {
        Ok("torch") => Consumer::Torch,
        Ok("jax" | "jaxlib") => Consumer::Immutable,
        _ => Consumer::Honouring,
    }
}

#[pymethods]
impl PyTensor {
    /// Exports through DLPack. zerohop never copies unless `copy=True`.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let device = self.view.device();
        let consumer = if self.view.is_readonly() && copy != Some(true) {
            calling_consumer(py)
        } else {
            Consumer::Honouring
        };
        let plan = plan("tensor", &self.view, consumer, Allowance::default()).py()?;
        let asked = consumer_stream(self, stream.as_ref())?;
        ready_on(device, Some(self.view.owner()), self.stream(), asked).py()?;
        let max_version = int_pair(max_version.as_ref(), "max_version")?;
        let dl_device = int_pair(dl_device.as_ref(), "dl_device")?;
        if let Some((kind, id)) = dl_device {
            let same = kind == device.kind as i64 && id == i64::from(device.id);
            if !same {
                return Err(PyBufferError::new_err(format!(
                    "cannot export {device} data to DLPack device ({kind}, {id}): \
                     zerohop does not copy across devices"
                )));
            }
        }
        let copied;
        let (view, is_copied) = if copy == Some(true) {
            copied = self.view.private_copy().py()?;
            (&copied, true)
        } else {
            (&self.view, self.is_copied)
        };
        let versioned = matches!(max_version, Some((major, _)) if major >= 1);
        if versioned {
            let managed = export_versioned(view, ExportOptions { is_copied }).py()?;
            Ok(capsule::versioned_capsule(py, managed)?.into_any())
        } else if plan == (Plan::Share { vouched: true }) {
            // SAFETY: the plan vouched for the consumer (JAX), which never writes to an
            // array's memory.
            let alias = unsafe { view.clone().assume_never_written() };
            let managed = export_legacy(&alias).py()?;
            Ok(capsule::legacy_capsule(py, managed)?.into_any())
        } else {
            let managed = export_legacy(view).py()?;
            Ok(capsule::legacy_capsule(py, managed)?.into_any())
        }
    }

    /// DLPack 1.3's C exchange API: consumers that look for it on the type take zerohop
    /// tensors without Python-level protocol calls (see `base::exchange`).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::base::exchange::api_capsule(py)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.view.device();
        (device.kind as i32, device.id)
    }

    /// NumPy's array interface (version 3), for host-accessible data.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let view = &self.view;
        if !view.device().is_host_accessible() {
            // AttributeError, so hasattr() is False and NumPy does not try to use it.
            return Err(PyAttributeError::new_err(format!(
                "{} data has no __array_interface__; use DLPack or the CUDA array interface",
                view.device()
            )));
        }
        let typestr = typestr(view.dtype()).ok_or_else(|| {
            PyTypeError::new_err(format!("NumPy has no dtype for {}", view.dtype()))
        })?;
        let item = view.dtype().itemsize() as i64;
        let dict = PyDict::new(py);
        dict.set_item(intern!(py, "version"), 3)?;
        dict.set_item(intern!(py, "shape"), PyTuple::new(py, view.shape())?)?;
        dict.set_item(intern!(py, "typestr"), &typestr)?;
        // NumPy rejects a NULL address even for zero elements; any aligned non-zero address
        // is fine there because nothing is read.
        let address = match view.data_ptr() as usize {
            0 => view.dtype().itemsize().max(1),
            a => a,
        };
        dict.set_item(intern!(py, "data"), (address, view.is_readonly()))?;
        let strides: Vec<i64> = view.strides().iter().map(|s| s * item).collect();
        dict.set_item(intern!(py, "strides"), PyTuple::new(py, strides)?)?;
        Ok(dict)
    }

    /// The CUDA array interface (v3, with the producing stream) of CUDA data.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.view.device().kind != DeviceKind::Cuda {
            return Err(PyAttributeError::new_err(format!(
                "{} data has no __cuda_array_interface__",
                self.view.device()
            )));
        }
        crate::protocols::cuda::interface(py, self)
    }

    /// The stream whose queued work produces this CUDA data (DLPack numbering; 0 for none).
    #[getter(stream)]
    fn stream_value(&self) -> usize {
        self.stream().raw()
    }

    /// Declares that work queued on `stream` writes this CUDA data: consumers on other
    /// streams will wait for it.
    fn set_stream(
        &self,
        #[pyo3(from_py_with = args::stream_handle)] stream: usize,
    ) -> PyResult<()> {
        if self.view.device().kind != DeviceKind::Cuda {
            return Err(PyValueError::new_err(
                "only CUDA data has a producing stream",
            ));
        }
        self.record_stream(Stream::cuda(stream).py()?);
        Ok(())
    }

    /// A NumPy array over the same memory (no copy). Read-only tensors give read-only arrays.
    fn numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import(intern!(py, "numpy"))?
            .call_method1(intern!(py, "asarray"), (slf,))
    }

    /// The size of each dimension, as a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.shape())
    }

    /// Strides in elements, as DLPack counts them.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.view.strides())
    }

    /// The element type's name ("float32", "int64", "bool", …), as NumPy spells it.
    #[getter]
    fn dtype(&self) -> String {
        self.view.dtype().to_string()
    }

    /// Where the memory lives: "cpu", "cuda:N", "cuda_host" or "cuda_managed".
    #[getter]
    fn device(&self) -> String {
        self.view.device().to_string()
    }

    /// True when consumers must not write: the producer said so, or the import could not
    /// tell (legacy capsules). Exports carry the flag (DLPack READ_ONLY, a read-only NumPy array).
    #[getter]
    fn readonly(&self) -> bool {
        self.view.is_readonly()
    }

    /// True when the data is a copy: the producer set DLPack's IS_COPIED, or zerohop copied
    /// on request (`copy=True`, `Tensor.copy`). A zero-copy hand-off leaves it False.
    #[getter]
    fn is_copied(&self) -> bool {
        self.is_copied
    }

    /// The address of the first element (a device address for CUDA data), for checking
    /// that two frameworks share memory.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.view.data_ptr() as usize
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.view.ndim()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.view.numel()
    }

    /// The bytes the elements occupy (size × item size; strides' gaps are not counted).
    #[getter]
    fn nbytes(&self) -> usize {
        self.view.nbytes()
    }

    /// True when the elements are compact in row-major (C) order.
    fn is_contiguous(&self) -> bool {
        self.view.is_contiguous()
    }

    /// A compact copy in fresh zerohop memory (the only way zerohop copies: when asked). The
    /// copy is the caller's alone, so it is writable even when this tensor is read-only.
    fn copy(&self) -> PyResult<PyTensor> {
        Ok(PyTensor::new(self.view.private_copy().py()?, true))
    }

    /// This tensor copied to `device` ("cpu", "cuda:0", "cuda_host", …), as `Table.to` copies
    /// a table: the memory between its first and last element, once, the layout kept,
    /// enqueued on `stream` (a CUDA stream handle; default the legacy stream) after this
    /// tensor's stream. A device copy carries that stream; a host copy is complete when this
    /// returns. The result reports `is_copied`.
    #[pyo3(signature = (device, *, stream=None))]
    fn to(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::device)] device: String,
        stream: Option<usize>,
    ) -> PyResult<PyTensor> {
        let resource = crate::tables::table::resource_for(&device)?;
        let stream = stream.map_or(Ok(Stream::LEGACY), Stream::cuda).py()?;
        let (view, produced_on) = (self.view.clone(), self.stream());
        let copied = py
            .detach(move || view.moved_to(resource, stream, produced_on))
            .py()?;
        let on_cuda = copied.device().kind == DeviceKind::Cuda;
        let stream = if on_cuda { stream } else { Stream::HOST };
        Ok(PyTensor::with_stream(copied, true, stream))
    }

    /// This tensor handed to `framework` ("torch", "jax", "numpy", "tensorflow"), sharing its
    /// memory with the rules of `Table.column`: read-only data goes to torch (which ignores
    /// the flag) only as a reported copy (`copy=True`) or on your word (`share_readonly=True`).
    /// For torch, CUDA data is ordered for torch's current stream and handed over as a
    /// capsule: `torch.from_dlpack(t)` does the same, but finds its stream in Python first.
    #[pyo3(signature = (framework, *, copy=false, share_readonly=false))]
    fn to_framework<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::framework)] framework: String,
        copy: bool,
        share_readonly: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::tables::table::to_framework(
            py,
            "tensor",
            self.view.clone(),
            self.is_copied,
            Some(&framework),
            self.stream(),
            copy,
            share_readonly,
        )
    }

    /// The Arrow schema of this tensor as a column: (n,) → a primitive, (n, K…) →
    /// FixedSizeLists.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::tables::storage::tensor_schema_capsule(py, self)
    }

    /// This host tensor as an Arrow array, sharing memory (compact tensors only).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        crate::tables::storage::tensor_capsules(py, self, requested_schema)
    }

    /// This tensor on the Arrow device interface: CUDA data with an event recorded on its
    /// stream (`sync_event`), host data as device CPU.
    #[pyo3(signature = (requested_schema=None, **kwargs))]
    fn __arrow_c_device_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        crate::protocols::arrow::refuse_unknown_kwargs(kwargs)?;
        crate::tables::storage::tensor_device_capsules(py, self, requested_schema)
    }

    /// Pickling (PEP 574): host data travels as one out-of-band buffer from protocol 5 on
    /// (the receiver views it), as a handle when it lies in `zerohop.memory.Shared` memory,
    /// else as bytes. Device data is refused. See docs/processes.md.
    fn __reduce_ex__<'py>(slf: &Bound<'py, Self>, protocol: i32) -> PyResult<Bound<'py, PyTuple>> {
        crate::process::pickle::reduce_tensor(slf, protocol)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.view
            .shape()
            .first()
            .map(|&n| n as usize)
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    fn __repr__(&self) -> String {
        let v = &self.view;
        format!(
            "zerohop.Tensor(shape={:?}, dtype={}, device={}, strides={:?}{}, data=0x{:x})",
            v.shape(),
            v.dtype(),
            v.device(),
            v.strides(),
            if v.is_readonly() { ", readonly" } else { "" },
            v.data_ptr() as usize
        )
    }
}
