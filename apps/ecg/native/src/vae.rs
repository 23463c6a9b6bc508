//! `VaeCpu` and `adam_step`: the VAE's CPU training pass and Adam
//! (`zerohop_ecg::vae`) over tensors any DLPack producer shares (torch's, for the job), read
//! and written in place.

use pyo3::prelude::*;
use zerohop::TensorView;
use zerohop_ecg::vae::{adam_step_in, AdamParams, CpuVae, Layout, Param, PassViews};

use crate::handoff::view_of;
use crate::to_py;

/// The loss and gradients of a LightVAE (`zerohop_ecg.vae`) for a batch of beats on the
/// CPU, on `threads` threads of its own. Its parameters live in one flat float32 buffer in
/// `shapes()` order, each starting at its `offsets()` entry.
#[pyclass(module = "zerohop_ecg._native", frozen)]
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
        let layout = self.inner.layout();
        Param::ALL.iter().map(|&p| layout.shape(p)).collect()
    }

    /// Where each parameter starts in the flat buffer (elements).
    fn offsets(&self) -> Vec<usize> {
        let layout = self.inner.layout();
        Param::ALL.iter().map(|&p| layout.range(p).start).collect()
    }

    /// Elements of the flat buffers, padding included.
    #[getter]
    fn size(&self) -> usize {
        self.inner.layout().len()
    }

    /// Threads the pass runs on.
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
        let [values, data, rows, noise, grads] = shared(py, [values, data, rows, noise, grads])?;
        let inputs = PassViews {
            values: &values,
            data: &data,
            rows: &rows,
            noise: &noise,
        };
        // SAFETY: the caller keeps every other user off `grads` for the call, as documented;
        // the views keep the producers' memory alive until after it.
        py.detach(|| unsafe { self.inner.loss_and_gradients_in(&inputs, &grads) })
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
        let [values, data, rows, noise] = shared(py, [values, data, rows, noise])?;
        let inputs = PassViews {
            values: &values,
            data: &data,
            rows: &rows,
            noise: &noise,
        };
        py.detach(|| self.inner.loss_in(&inputs)).map_err(to_py)
    }
}

/// One Adam step over flat float32 CPU buffers, in place (`zerohop_ecg::vae::adam_step`):
/// `count` (a float64 tensor of one element, the steps taken) grows by one, `mean` and
/// `square` move towards `grads`, `values` take the step. No two buffers may share memory.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn adam_step(
    py: Python<'_>,
    values: &Bound<'_, PyAny>,
    grads: &Bound<'_, PyAny>,
    mean: &Bound<'_, PyAny>,
    square: &Bound<'_, PyAny>,
    count: &Bound<'_, PyAny>,
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
) -> PyResult<()> {
    let views = shared(py, [values, grads, mean, square, count])?;
    let params = AdamParams {
        lr,
        beta1,
        beta2,
        eps,
    };
    // SAFETY: the caller keeps every other user off the buffers for the call (the GIL is
    // held throughout); the views keep the producers' memory alive until after it.
    unsafe { adam_step_in(views.each_ref(), params) }.map_err(to_py)
}

/// The producers' memory as zerohop views (no copy), each asked for a capsule directly.
fn shared<const N: usize>(
    py: Python<'_>,
    objects: [&Bound<'_, PyAny>; N],
) -> PyResult<[TensorView; N]> {
    let mut views = objects.map(|_| None);
    for (slot, obj) in views.iter_mut().zip(objects) {
        *slot = Some(view_of(py, obj, None)?);
    }
    Ok(views.map(|v| v.expect("every slot filled above")))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VaeCpu>()?;
    m.add_function(wrap_pyfunction!(adam_step, m)?)
}
