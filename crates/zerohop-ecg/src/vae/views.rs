//! The pass and Adam over zerohop views of another framework's memory (torch's flat buffers,
//! for the Python job): each argument checked and named, used in place, the written ones
//! refused when they share memory with any other.

use zerohop::{Element, TensorView};

use super::{adam_step, AdamParams, CpuVae};
use crate::error::{invalid, Result};

type Slices<'v> = (&'v [f32], &'v [f32], &'v [i64], &'v [f32]);

/// A pass's read-only arguments (see `CpuVae::loss_and_gradients`).
pub struct PassViews<'v> {
    pub values: &'v TensorView,
    pub data: &'v TensorView,
    pub rows: &'v TensorView,
    pub noise: &'v TensorView,
}

impl<'v> PassViews<'v> {
    fn named(&self) -> [(&'static str, &'v TensorView); 4] {
        [
            ("values", self.values),
            ("data", self.data),
            ("rows", self.rows),
            ("noise", self.noise),
        ]
    }

    fn slices(&self) -> Result<Slices<'v>> {
        Ok((
            slice("values", self.values)?,
            slice("data", self.data)?,
            slice("rows", self.rows)?,
            slice("noise", self.noise)?,
        ))
    }
}

impl CpuVae {
    /// `loss_and_gradients` over views: compact host tensors of float32 (`rows` int64),
    /// `grads` writable and sharing no byte with the others.
    ///
    /// # Safety
    /// Nothing else may read or write `grads`' memory during the call.
    pub unsafe fn loss_and_gradients_in(
        &self,
        inputs: &PassViews<'_>,
        grads: &TensorView,
    ) -> Result<f64> {
        disjoint(
            &[inputs.named().as_slice(), &[("grads", grads)]].concat(),
            4,
        )?;
        let (values, data, rows, noise) = inputs.slices()?;
        // SAFETY: `grads` overlaps none of the inputs (checked above) and the caller keeps
        // everything else off it for the call.
        let grads = unsafe { mutable("grads", grads) }?;
        self.loss_and_gradients(values, data, rows, noise, grads)
    }

    /// `loss` over views (as `loss_and_gradients_in`'s inputs).
    pub fn loss_in(&self, inputs: &PassViews<'_>) -> Result<f64> {
        let (values, data, rows, noise) = inputs.slices()?;
        self.loss(values, data, rows, noise)
    }
}

/// `adam_step` over views: float32 `values`, `grads`, `mean`, `square` and a float64 `count`
/// of one element, no two sharing a byte.
///
/// # Safety
/// Nothing else may read or write the memory of `values`, `mean`, `square` or `count`
/// during the call.
pub unsafe fn adam_step_in(
    [values, grads, mean, square, count]: [&TensorView; 5],
    p: AdamParams,
) -> Result<()> {
    let named = [
        ("values", values),
        ("grads", grads),
        ("mean", mean),
        ("square", square),
        ("count", count),
    ];
    disjoint(&named, 0)?;
    let grads = slice("grads", grads)?;
    // SAFETY: no two of the five views share a byte (checked above), and the caller keeps
    // everything else off the written four for the call.
    let (values, mean, square, count) = unsafe {
        (
            mutable::<f32>("values", values)?,
            mutable::<f32>("mean", mean)?,
            mutable::<f32>("square", square)?,
            mutable::<f64>("count", count)?,
        )
    };
    let [count] = count else {
        return Err(invalid(
            "count",
            format!("one element, got {}", count.len()),
        ));
    };
    adam_step(values, grads, mean, square, count, p)
}

/// Refuses any two of `views` that share a byte, unless both come before `from` (read-only
/// inputs may alias one another).
fn disjoint(views: &[(&str, &TensorView)], from: usize) -> Result<()> {
    for (b, (name_b, view_b)) in views.iter().enumerate().skip(from) {
        for (name_a, view_a) in &views[..b] {
            if overlaps(view_a, view_b) {
                return Err(invalid(
                    name_b,
                    format!("shares memory with {name_a}: it needs a buffer of its own"),
                ));
            }
        }
    }
    Ok(())
}

fn overlaps(a: &TensorView, b: &TensorView) -> bool {
    let (a0, b0) = (a.data_ptr() as usize, b.data_ptr() as usize);
    a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes()
}

fn slice<'v, T: Element>(name: &str, view: &'v TensorView) -> Result<&'v [T]> {
    view.as_slice::<T>()
        .map_err(|e| invalid(name, e.to_string()))
}

/// # Safety
/// As `TensorView::as_mut_slice`: nothing else may use the elements while the slice lives.
#[allow(clippy::mut_from_ref)]
unsafe fn mutable<'v, T: Element>(name: &str, view: &'v TensorView) -> Result<&'v mut [T]> {
    // SAFETY: passed on to the caller.
    unsafe { view.as_mut_slice::<T>() }.map_err(|e| invalid(name, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vae::Layout;

    fn view(values: &[f32]) -> TensorView {
        TensorView::from_slice(values, &[values.len() as i64]).unwrap()
    }

    #[test]
    fn a_pass_over_views_is_the_pass_over_slices() {
        let layout = Layout::new(8, 2, 16).unwrap();
        let vae = CpuVae::new(layout.clone(), 1).unwrap();
        let values: Vec<f32> = (0..layout.len())
            .map(|k| (k as f32 * 0.3).sin() * 0.2)
            .collect();
        let data: Vec<f32> = (0..24).map(|k| (k as f32 * 0.5).cos()).collect();
        let (rows, noise) = ([2i64, 0], [0.1f32, -0.3, 0.7, 0.2]);
        let mut want = vec![0f32; layout.len()];
        let loss = vae
            .loss_and_gradients(&values, &data, &rows, &noise, &mut want)
            .unwrap();
        let rows_view = TensorView::from_slice(&rows, &[2]).unwrap();
        let (values_v, data_v, noise_v) = (view(&values), view(&data), view(&noise));
        let inputs = PassViews {
            values: &values_v,
            data: &data_v,
            rows: &rows_view,
            noise: &noise_v,
        };
        let grads = view(&vec![0f32; layout.len()]);
        // SAFETY: the test holds the only handle to `grads`' memory.
        let got = unsafe { vae.loss_and_gradients_in(&inputs, &grads) }.unwrap();
        assert_eq!(got, loss);
        assert_eq!(grads.to_vec::<f32>().unwrap(), want);
        assert_eq!(vae.loss_in(&inputs).unwrap(), loss);
        // grads aliasing an input, or of another dtype, is refused by name
        // SAFETY: as above; the call refuses before writing.
        let err = unsafe { vae.loss_and_gradients_in(&inputs, &values_v) }.unwrap_err();
        assert!(
            err.to_string().contains("grads: shares memory with values"),
            "{err}"
        );
        let wrong = PassViews {
            rows: &noise_v,
            ..inputs
        };
        assert!(vae
            .loss_in(&wrong)
            .unwrap_err()
            .to_string()
            .contains("invalid rows"));
    }

    #[test]
    fn adam_over_views_refuses_shared_or_misshapen_buffers() {
        let p = AdamParams {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        };
        let (values, grads, mean, square) = (
            view(&[1.0; 4]),
            view(&[0.5; 4]),
            view(&[0.0; 4]),
            view(&[0.0; 4]),
        );
        let count = TensorView::from_slice(&[0f64], &[1]).unwrap();
        // SAFETY: the test holds the only handles to these views' memory.
        unsafe {
            let err = adam_step_in([&values, &grads, &values, &square, &count], p).unwrap_err();
            assert!(
                err.to_string().contains("mean: shares memory with values"),
                "{err}"
            );
            let two = TensorView::from_slice(&[0f64, 0.0], &[2]).unwrap();
            let err = adam_step_in([&values, &grads, &mean, &square, &two], p).unwrap_err();
            assert!(err.to_string().contains("count: one element"), "{err}");
            adam_step_in([&values, &grads, &mean, &square, &count], p).unwrap();
        }
        assert_eq!(count.to_vec::<f64>().unwrap(), vec![1.0]);
        assert!(values.to_vec::<f32>().unwrap().iter().all(|&v| v < 1.0));
    }
}
