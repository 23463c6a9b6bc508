//! The Part 3 VAE's training pass on the CPU: the loss of a batch of beats and every
//! parameter's gradient, 16 beats at a time (one per vector lane) over activations that stay
//! in the core's caches. The Python `LightVAE` defines the model (`zerohop_ecg.vae`); this computes the
//! same loss and gradients (its tests compare them with torch's autograd) without a tensor
//! per layer and batch: with 1 to 16 channels, torch's convolutions spend most of a step
//! moving activations and starting threads, not computing.
//!
//! The model, for beats of `width` samples (a power of two) and a `latent` code: three
//! stages of convolution (kernel 3, 1 → 4 → 8 → 16 channels), swish `x σ(α x)` (one α for
//! all five) and the fixed [1, 2, 1] filter of stride 2; two convolutions 16 → latent
//! averaged over the length give μ and log σ²; z = μ + ε σ; a linear map z → 8 × width/8;
//! three stages of doubling and convolution (8 → 4 → 2 → 1), the first two with a swish.
//! The loss per beat: the mean squared error of the reconstruction plus 0.2 × the KL
//! divergence from N(0, 1) per dimension, each floored at 0.5 nats, averaged over dimensions.
//!
//! The batch is cut into chunks of CHUNK beats, whatever the threads: each chunk's gradient
//! sums are added in chunk order, so the result does not depend on the thread count (nor on
//! the CPU's vector width).

mod adam;
mod layers;
mod layout;
mod pass;
mod views;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub use adam::{adam_step, AdamParams};
pub use layout::{Layout, Param};
pub use views::{adam_step_in, PassViews};

use crate::error::{invalid, Result};
use crate::simd::Lanes;
use layers::LANES;
use pass::{chunk_pass, Scratch, Weights};

/// Beats per chunk of work (its gradients summed on their own, then added in order): the
/// beats a pass carries together, one per vector lane.
const CHUNK: usize = LANES;

/// The training pass for one layout, on its own threads.
pub struct CpuVae {
    layout: Layout,
    pool: rayon::ThreadPool,
    lanes: Lanes,
    /// Each pool thread's activations (~1 MB at width 256), allocated once rather than
    /// faulted in afresh by every step.
    scratch: Vec<Mutex<Scratch>>,
}

impl CpuVae {
    /// A pass for `layout` on `threads` threads (at least 1).
    pub fn new(layout: Layout, threads: usize) -> Result<CpuVae> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|k| format!("zerohop-vae-{k}"))
            .build()
            .map_err(|e| invalid("threads", format!("{threads}: {e}")))?;
        let scratch = (0..pool.current_num_threads())
            .map(|_| Mutex::new(Scratch::new(layout.width(), layout.latent())))
            .collect();
        Ok(CpuVae {
            layout,
            pool,
            lanes: Lanes::widest(),
            scratch,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The loss summed over the beats `rows` of `data` (rows of `width` samples), beat b
    /// drawing its latent noise from `noise[b·latent..]`; every parameter's gradient of that
    /// sum is written to `grads` (the padding between parameters set to 0). `values` and
    /// `grads` are flat buffers of `layout.len()` elements.
    pub fn loss_and_gradients(
        &self,
        values: &[f32],
        data: &[f32],
        rows: &[i64],
        noise: &[f32],
        grads: &mut [f32],
    ) -> Result<f64> {
        self.pass_at(self.lanes, values, data, rows, noise, Some(grads))
    }

    /// The loss alone (as `loss_and_gradients` gives it), without the backward pass: the
    /// held-out loss while training.
    pub fn loss(&self, values: &[f32], data: &[f32], rows: &[i64], noise: &[f32]) -> Result<f64> {
        self.pass_at(self.lanes, values, data, rows, noise, None)
    }

    fn pass_at(
        &self,
        lanes: Lanes,
        values: &[f32],
        data: &[f32],
        rows: &[i64],
        noise: &[f32],
        grads: Option<&mut [f32]>,
    ) -> Result<f64> {
        let layout = &self.layout;
        let (width, latent) = (layout.width(), layout.latent());
        check_len("values", values.len(), layout.len())?;
        if let Some(grads) = &grads {
            check_len("grads", grads.len(), layout.len())?;
        }
        check_len("noise", noise.len(), rows.len() * latent)?;
        if !data.len().is_multiple_of(width) {
            return Err(invalid(
                "data",
                format!("{} samples are not whole beats of {width}", data.len()),
            ));
        }
        let beats = data.len() / width;
        if let Some(bad) = rows.iter().find(|&&r| r < 0 || r as usize >= beats) {
            return Err(invalid(
                "rows",
                format!("beat {bad} is not one of the {beats} beats"),
            ));
        }
        let weights = Weights::new(layout, values);
        let backward = grads.is_some();
        // Every thread at once (one wake-up each), taking chunks in turn from a counter until
        // none are left; the chunks' sums are added in chunk order below.
        let chunk_count = rows.len().div_ceil(CHUNK);
        let next = AtomicUsize::new(0);
        let per_thread: Vec<Vec<(usize, f64, Vec<f32>)>> = self.pool.broadcast(|ctx| {
            let mut scratch = self.scratch[ctx.index()]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut done = Vec::new();
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= chunk_count {
                    return done;
                }
                let rows = &rows[c * CHUNK..rows.len().min((c + 1) * CHUNK)];
                let noise = &noise[c * CHUNK * latent..][..rows.len() * latent];
                let mut sums = vec![0f32; if backward { layout.len() } else { 0 }];
                let sums_wanted = backward.then_some(&mut sums[..]);
                let loss = chunk_pass(
                    lanes,
                    &weights,
                    data,
                    rows,
                    noise,
                    &mut scratch,
                    sums_wanted,
                );
                done.push((c, loss, sums));
            }
        });
        let mut chunks: Vec<(usize, f64, Vec<f32>)> = per_thread.into_iter().flatten().collect();
        chunks.sort_unstable_by_key(|&(c, _, _)| c);
        let loss = chunks.iter().map(|(_, loss, _)| loss).sum();
        if let Some(grads) = grads {
            grads.fill(0.0);
            for (_, _, sums) in &chunks {
                for (g, s) in grads.iter_mut().zip(sums) {
                    *g += s;
                }
            }
        }
        Ok(loss)
    }
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(invalid(
            what,
            format!("{got} elements, the layout needs {want}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
