//! Adam over one flat buffer of parameters, as torch.optim.Adam computes it with its defaults
//! (no weight decay, no AMSGrad), in the operations and order of the Python `adam.update`, so
//! the two agree to float32 rounding (torch fuses some multiply-adds): the job's CPU step runs
//! this one, a GPU that one.
//!
//! Why here: on the CPU, torch runs some of the update's element-wise operations on its
//! OpenMP threads, which then spin for milliseconds after the work is done, on the cores the
//! next training pass wants: a CPU step through the kernels took 10 ms on 2 threads with
//! torch's update against 7.4 ms with this one.

use crate::error::{invalid, Result};

/// Adam's hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamParams {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

/// One step, in place: `count` (the steps taken) grows by one; `mean` and `square` (the
/// moments) move towards `grads`; `values` take the step.
pub fn adam_step(
    values: &mut [f32],
    grads: &[f32],
    mean: &mut [f32],
    square: &mut [f32],
    count: &mut f64,
    p: AdamParams,
) -> Result<()> {
    let n = values.len();
    for (what, len) in [
        ("grads", grads.len()),
        ("mean", mean.len()),
        ("square", square.len()),
    ] {
        if len != n {
            return Err(invalid(what, format!("{len} elements for {n} parameters")));
        }
    }
    *count += 1.0;
    // The bias corrections in f64, as torch's float64 step count gives them, then used in
    // f32 as torch uses a 0-d float64 tensor in a float32 operation.
    let first = 1.0 - p.beta1.powf(*count);
    let second = ((1.0 - p.beta2.powf(*count)).sqrt()) as f32;
    let scale = (first / -p.lr) as f32;
    let (keep, eps) = ((1.0 - p.beta1) as f32, p.eps as f32);
    let (beta2, fresh) = (p.beta2 as f32, (1.0 - p.beta2) as f32);
    let moments = mean.iter_mut().zip(square.iter_mut());
    for ((v, &g), (m, s)) in values.iter_mut().zip(grads).zip(moments) {
        *m = lerp(*m, g, keep);
        *s = *s * beta2 + fresh * g * g;
        let denominator = (s.sqrt() / second + eps) * scale;
        *v += *m / denominator;
    }
    Ok(())
}

/// torch's `lerp`: from `start` towards `end` by `weight`, in the form it picks for the
/// weight's size (the one that rounds better).
fn lerp(start: f32, end: f32, weight: f32) -> f32 {
    if weight.abs() < 0.5 {
        start + weight * (end - start)
    } else {
        end - (end - start) * (1.0 - weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: AdamParams = AdamParams {
        lr: 2e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    };

    #[test]
    fn the_first_step_moves_each_value_by_the_learning_rate_against_its_gradient() {
        // After one step m̂ = g and v̂ = g², so the step is lr · g / (|g| + eps).
        let mut values = vec![1.0f32, -2.0, 0.5];
        let grads = [0.3f32, -4.0, 0.0];
        let (mut mean, mut square, mut count) = (vec![0f32; 3], vec![0f32; 3], 0.0);
        adam_step(&mut values, &grads, &mut mean, &mut square, &mut count, P).unwrap();
        assert_eq!(count, 1.0);
        for (v, (start, g)) in values
            .iter()
            .zip([(1.0f32, 0.3f32), (-2.0, -4.0), (0.5, 0.0)])
        {
            let want = start - 2e-3 * g / (g.abs() + 1e-8);
            assert!((v - want).abs() < 1e-6, "{v} against {want}");
        }
    }

    #[test]
    fn buffers_of_other_lengths_are_refused_by_name_and_nothing_moves() {
        let mut values = vec![1.0f32; 4];
        let (mut mean, mut square, mut count) = (vec![0f32; 4], vec![0f32; 3], 0.0);
        let err = adam_step(
            &mut values,
            &[0.0; 4],
            &mut mean,
            &mut square,
            &mut count,
            P,
        );
        assert!(err.unwrap_err().to_string().contains("square"));
        assert_eq!((count, values), (0.0, vec![1.0; 4]));
    }
}
