//! `zerohop._zerohop.ecg.VaeCpu`: the VAE's CPU training pass (`zerohop_ecg::vae`) over
//! tensors any DLPack producer shares (torch's, for the job), read and written in place.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zerohop::TensorView;
use zerohop_ecg::vae::{adam_step as step, AdamParams, CpuVae, Layout, Param};

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
        let inputs = Inputs::share(py, values, data, rows, noise)?;
        let grads = shared(py, grads)?;
        for (name, view) in inputs.named() {
            if overlaps(view, &grads) {
                return Err(PyValueError::new_err(format!(
                    "grads shares memory with {name}: the gradients need a buffer of their own"
                )));
            }
        }
        let (values_s, data_s, rows_s, noise_s) = inputs.slices()?;
        // SAFETY: `grads` shares no byte with the other four (checked above), and the caller
        // keeps every other user off it for the call, as documented; the views keep the
        // producers' memory alive until they drop, after the call.
        let grads_s = unsafe { mutable::<f32>("grads", &grads) }?;
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
        let inputs = Inputs::share(py, values, data, rows, noise)?;
        let (values_s, data_s, rows_s, noise_s) = inputs.slices()?;
        py.detach(|| self.inner.loss(values_s, data_s, rows_s, noise_s))
            .map_err(to_py)
    }
}

/// A pass's four read-only inputs, shared from their producers.
struct Inputs {
    values: TensorView,
    data: TensorView,
    rows: TensorView,
    noise: TensorView,
}

type Slices<'v> = (&'v [f32], &'v [f32], &'v [i64], &'v [f32]);

impl Inputs {
    fn share(
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        noise: &Bound<'_, PyAny>,
    ) -> PyResult<Inputs> {
        Ok(Inputs {
            values: shared(py, values)?,
            data: shared(py, data)?,
            rows: shared(py, rows)?,
            noise: shared(py, noise)?,
        })
    }

    fn named(&self) -> [(&'static str, &TensorView); 4] {
        [
            ("values", &self.values),
            ("data", &self.data),
            ("rows", &self.rows),
            ("noise", &self.noise),
        ]
    }

    fn slices(&self) -> PyResult<Slices<'_>> {
        Ok((
            slice::<f32>("values", &self.values)?,
            slice::<f32>("data", &self.data)?,
            slice::<i64>("rows", &self.rows)?,
            slice::<f32>("noise", &self.noise)?,
        ))
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
    let names = ["values", "grads", "mean", "square", "count"];
    let views = [values, grads, mean, square, count]
        .map(|t| shared(py, t))
        .into_iter()
        .collect::<PyResult<Vec<_>>>()?;
    for a in 0..views.len() {
        for b in a + 1..views.len() {
            if overlaps(&views[a], &views[b]) {
                return Err(PyValueError::new_err(format!(
                    "{} shares memory with {}: Adam needs five buffers of their own",
                    names[a], names[b]
                )));
            }
        }
    }
    let grads = slice::<f32>("grads", &views[1])?;
    // SAFETY: no two of the five views share a byte (checked above), and the caller keeps
    // every other user off the four written ones for the call (the GIL is held throughout).
    let (values, mean, square, count) = unsafe {
        (
            mutable::<f32>("values", &views[0])?,
            mutable::<f32>("mean", &views[2])?,
            mutable::<f32>("square", &views[3])?,
            mutable::<f64>("count", &views[4])?,
        )
    };
    let [count] = count else {
        return Err(PyValueError::new_err(format!(
            "count: one element, got {}",
            count.len()
        )));
    };
    let params = AdamParams {
        lr,
        beta1,
        beta2,
        eps,
    };
    step(values, grads, mean, square, count, params).map_err(to_py)
}

/// # Safety
/// As `TensorView::as_mut_slice`: nothing else may use the elements while the slice lives.
#[allow(clippy::mut_from_ref)]
unsafe fn mutable<'v, T: zerohop::Element>(
    name: &str,
    view: &'v TensorView,
) -> PyResult<&'v mut [T]> {
    // SAFETY: passed on to the caller (see above).
    unsafe { view.as_mut_slice::<T>() }.map_err(|e| PyValueError::new_err(format!("{name}: {e}")))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VaeCpu>()?;
    m.add_function(wrap_pyfunction!(adam_step, m)?)
}
