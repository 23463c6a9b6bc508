//! Asking any DLPack producer for a capsule, as a consumer without a stream of its own.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::handoff::CudaStream;
use zerohop::DeviceKind;

/// True for devices whose producers expect a stream argument.
pub fn device_takes_stream(kind: i32) -> bool {
    matches!(
        DeviceKind::from_raw(kind),
        Some(DeviceKind::Cuda | DeviceKind::Rocm)
    )
}

/// `obj.__dlpack__(...)`: a versioned (1.x) capsule first; producers that refuse
/// `max_version` (pyarrow raises TypeError, others raise other errors) are asked again for a
/// legacy capsule. Device producers are asked to order their data before `consumer_stream`,
/// or before the legacy default stream when the consumer has no stream of its own (None):
/// the producer orders its work, as DLPack has it. Fails with the producer's own exception
/// type, both answers in its message; an object that is no DLPack producer is a TypeError
/// saying what is accepted.
pub fn request_capsule<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    consumer_stream: Option<CudaStream>,
) -> PyResult<Bound<'py, PyAny>> {
    let stream = consumer_stream.unwrap_or(CudaStream::LEGACY).handle();
    let device = obj.getattr(intern!(py, "__dlpack_device__")).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "expected a DLPack producer (an object with __dlpack__ and __dlpack_device__, \
                 such as a NumPy array or a torch tensor) or a DLPack capsule, got {}",
            crate::args::type_name(obj)
        ))
    })?;
    let (kind, _id): (i32, i32) = device.call0()?.extract()?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), (1, 3))?;
    if device_takes_stream(kind) {
        kwargs.set_item(intern!(py, "stream"), stream)?;
    }
    let dunder = intern!(py, "__dlpack__");
    match obj.call_method(dunder, (), Some(&kwargs)) {
        Ok(capsule) => Ok(capsule),
        Err(versioned_error) => {
            let legacy = if device_takes_stream(kind) {
                let kwargs = PyDict::new(py);
                kwargs.set_item(intern!(py, "stream"), stream)?;
                obj.call_method(dunder, (), Some(&kwargs))
            } else {
                obj.call_method0(dunder)
            };
            legacy.map_err(|legacy_error| {
                let message = format!(
                    "{} could not export through DLPack: asked for a versioned capsule: {}; \
                     asked for a legacy capsule: {}",
                    obj.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    versioned_error,
                    legacy_error
                );
                // The producer's own exception type (pyarrow's TypeError, say) is what callers
                // catch; keep it, with both answers in the message.
                let err = legacy_error
                    .get_type(py)
                    .call1((message,))
                    .ok()
                    .filter(|e| e.is_instance_of::<pyo3::exceptions::PyBaseException>())
                    .map_or_else(|| legacy_error.clone_ref(py), PyErr::from_value);
                err.set_cause(py, Some(legacy_error));
                err
            })
        }
    }
}
