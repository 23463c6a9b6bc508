//! `zerohop._zerohop.ecg.VaeCpu`: the VAE's CPU training pass (`zerohop_ecg::vae`) over
//! tensors any DLPack producer shares (torch's, for the job), read and written in place.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zerohop::TensorView;
use zerohop_ecg::vae::{CpuVae, Layout, Param};

use crate::base::tensor::PyTensor;

use super::to_py;

/// The loss and gradients of a LightVAE (`zerohop.ecg.vae`) for a batch of beats on the
/// CPU, on `threads` threads of its own. Its parameters live in one flat float32 buffer in
/// `shapes()` order, each starting at its `offsets()` entry.
#[pyclass(module = "zerohop._zerohop.ecg", frozen)]
pub struct VaeCpu {
    inner: CpuVae,
}

#[pymethods]
impl VaeCpu {
    #[new]
    #[pyo3(signature = (width, *, latent = 2, align = 16, threads = 1))]
    fn new(width: usize, latent: usize, align: usize, threads: usize) -> PyResult<Self> {
        let layout = Layout::new(width, latent, align).map_err(to_py)?;
        let inner = CpuVae::new(layout, threads).map_err(to_py)?;
        Ok(VaeCpu { inner })
    }

    /// Every parameter's shape, in `model.parameters()` order.
    fn shapes(&self) -> Vec<Vec<usize>> {
        Param::ALL
            .iter()
            .map(|&p| self.inner.layout().shape(p))
            .collect()
    }

    /// Where each parameter starts in the flat buffer (elements).
    fn offsets(&self) -> Vec<usize> {
        Param::ALL
            .iter()
            .map(|&p| self.inner.layout().range(p).start)
            .collect()
    }

    /// Elements of the flat buffers, padding included.
    #[getter]
    fn size(&self) -> usize {
        self.inner.layout().len()
    }

    #[getter]
    fn threads(&self) -> usize {
        self.inner.threads()
    }

    /// The loss summed over the beats `rows` (int64) of `data` (beats × width, float32), with
    /// `noise` (len(rows) × latent, float32) as each beat's ε; writes the gradient of that sum
    /// to `grads` and returns the sum. `values` and `grads`: flat float32 buffers of `size`
    /// elements. Every argument: a compact CPU tensor of any DLPack producer, used in place;
    /// `grads` must be writable and share no memory with the others, and nothing else may
    /// use it during the call (the GIL is released).
    fn loss_and_gradients(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        noise: &Bound<'_, PyAny>,
        grads: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let [values, data, rows, noise, grads] =
            [values, data, rows, noise, grads].map(|t| shared(py, t));
        let (values, data, rows, noise, grads) = (values?, data?, rows?, noise?, grads?);
        for (name, view) in [
            ("values", &values),
            ("data", &data),
            ("rows", &rows),
            ("noise", &noise),
        ] {
            if overlaps(view, &grads) {
                return Err(PyValueError::new_err(format!(
                    "grads shares memory with {name}: the gradients need a buffer of their own"
                )));
            }
        }
        let (values_s, data_s) = (
            slice::<f32>("values", &values)?,
            slice::<f32>("data", &data)?,
        );
        let (rows_s, noise_s) = (slice::<i64>("rows", &rows)?, slice::<f32>("noise", &noise)?);
        // SAFETY: `grads` shares no byte with the other four (checked above), and the caller
        // keeps every other user off it for the call, as documented; the views keep the
        // producers' memory alive until they drop, after the call.
        let grads_s = unsafe { grads.as_mut_slice::<f32>() }
            .map_err(|e| PyValueError::new_err(format!("grads: {e}")))?;
        py.detach(|| {
            self.inner
                .loss_and_gradients(values_s, data_s, rows_s, noise_s, grads_s)
        })
        .map_err(to_py)
    }

    /// The loss `loss_and_gradients` returns, without the backward pass (no gradient).
    fn loss(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        noise: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let [values, data, rows, noise] = [values, data, rows, noise].map(|t| shared(py, t));
        let (values, data, rows, noise) = (values?, data?, rows?, noise?);
        let (values_s, data_s) = (
            slice::<f32>("values", &values)?,
            slice::<f32>("data", &data)?,
        );
        let (rows_s, noise_s) = (slice::<i64>("rows", &rows)?, slice::<f32>("noise", &noise)?);
        py.detach(|| self.inner.loss(values_s, data_s, rows_s, noise_s))
            .map_err(to_py)
    }
}

/// The producer's memory as a zerohop view (no copy).
fn shared(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<TensorView> {
    let imported = py
        .import("zerohop")?
        .getattr("from_dlpack")?
        .call1((obj,))?;
    let view = imported.cast::<PyTensor>()?.get().view.clone();
    Ok(view)
}

fn slice<'v, T: zerohop::Element>(name: &str, view: &'v TensorView) -> PyResult<&'v [T]> {
    view.as_slice::<T>()
        .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))
}

fn overlaps(a: &TensorView, b: &TensorView) -> bool {
    let (a0, b0) = (a.data_ptr() as usize, b.data_ptr() as usize);
    a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VaeCpu>()
}
