//! The pass against a plain f64 rendering of the model's definition (the Python tests hold
//! it against torch's autograd as well): its loss, and its gradients against central
//! differences of that loss.

use super::*;
use crate::simd::Lanes;

type Rows = Vec<Vec<f64>>;

/// "Same" convolution, kernel 3, straight from its definition.
fn conv(x: &Rows, w: &[f64], b: &[f64]) -> Rows {
    let (cin, len) = (x.len(), x[0].len());
    (0..b.len())
        .map(|o| {
            (0..len)
                .map(|t| {
                    let mut v = b[o];
                    for (i, xi) in x.iter().enumerate() {
                        for j in 0..3 {
                            let s = t as isize + j as isize - 1;
                            if s >= 0 && (s as usize) < len {
                                v += w[(o * cin + i) * 3 + j] * xi[s as usize];
                            }
                        }
                    }
                    v
                })
                .collect()
        })
        .collect()
}

fn swish(x: Rows, alpha: f64) -> Rows {
    x.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v / (1.0 + (-alpha * v).exp()))
                .collect()
        })
        .collect()
}

fn halve(x: Rows) -> Rows {
    x.into_iter()
        .map(|r| {
            (0..r.len() / 2)
                .map(|i| if i > 0 { r[2 * i - 1] } else { 0.0 } + 2.0 * r[2 * i] + r[2 * i + 1])
                .collect()
        })
        .collect()
}

fn double(x: Rows) -> Rows {
    x.into_iter()
        .map(|r| r.into_iter().flat_map(|v| [v, v]).collect())
        .collect()
}

/// The summed loss of `rows`, in f64, from the parameters `values` (f64, the flat layout).
fn reference_loss(
    layout: &Layout,
    values: &[f64],
    data: &[f32],
    rows: &[i64],
    noise: &[f32],
) -> f64 {
    let p = |param| &values[layout.range(param)];
    let (width, z) = (layout.width(), layout.latent());
    let alpha = p(Param::Alpha)[0];
    let mut total = 0.0;
    for (b, &row) in rows.iter().enumerate() {
        let x: Vec<f64> = data[row as usize * width..][..width]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let mut h = vec![x.clone()];
        for k in 0..3 {
            h = halve(swish(
                conv(&h, p(Param::EncoderWeight(k)), p(Param::EncoderBias(k))),
                alpha,
            ));
        }
        let mean = |rows: Rows| -> Vec<f64> {
            rows.iter()
                .map(|r| r.iter().sum::<f64>() / r.len() as f64)
                .collect()
        };
        let mu = mean(conv(&h, p(Param::MeanWeight), p(Param::MeanBias)));
        let logvar = mean(conv(&h, p(Param::LogVarWeight), p(Param::LogVarBias)));
        let code: Vec<f64> = (0..z)
            .map(|j| mu[j] + noise[b * z + j] as f64 * (0.5 * logvar[j]).exp())
            .collect();
        let (pw, pb) = (p(Param::ProjectWeight), p(Param::ProjectBias));
        let flat: Vec<f64> = (0..width)
            .map(|o| pb[o] + (0..z).map(|j| pw[o * z + j] * code[j]).sum::<f64>())
            .collect();
        let mut y: Rows = flat.chunks(width / 8).map(|c| c.to_vec()).collect();
        for k in 0..3 {
            y = conv(
                &double(y),
                p(Param::DecoderWeight(k)),
                p(Param::DecoderBias(k)),
            );
            if k < 2 {
                y = swish(y, alpha);
            }
        }
        let mse = y[0]
            .iter()
            .zip(&x)
            .map(|(r, x)| (r - x).powi(2))
            .sum::<f64>()
            / width as f64;
        let kl: f64 = (0..z)
            .map(|j| (-0.5 * (1.0 + logvar[j] - mu[j] * mu[j] - logvar[j].exp())).max(0.5))
            .sum::<f64>()
            / z as f64;
        total += mse + 0.2 * kl;
    }
    total
}

/// A model's worth of small parameters and a few beats of a smooth, beat-like signal.
fn example(width: usize, beats: usize) -> (Layout, Vec<f32>, Vec<f32>, Vec<i64>, Vec<f32>) {
    let layout = Layout::new(width, 2, 16).unwrap();
    let mut values = vec![0f32; layout.len()];
    for p in Param::ALL {
        for (k, v) in values[layout.range(p)].iter_mut().enumerate() {
            let fan = layout.shape(p).iter().skip(1).product::<usize>().max(1) as f32;
            *v = ((k as f32 * 1.713 + p.index() as f32 * 0.37).sin()) / fan.sqrt();
        }
    }
    values[layout.range(Param::Alpha)][0] = 1.1;
    let data: Vec<f32> = (0..beats * width)
        .map(|k| (k as f32 * 0.21).sin() * 1.5 + (k as f32 * 0.05).cos() * 0.3)
        .collect();
    let rows: Vec<i64> = (0..beats as i64).rev().collect();
    let noise: Vec<f32> = (0..beats * 2).map(|k| (k as f32 * 0.77).sin()).collect();
    (layout, values, data, rows, noise)
}

fn pass(
    threads: usize,
    lanes: Lanes,
    ex: &(Layout, Vec<f32>, Vec<f32>, Vec<i64>, Vec<f32>),
) -> (f64, Vec<f32>) {
    let (layout, values, data, rows, noise) = ex;
    let vae = CpuVae::new(layout.clone(), threads).unwrap();
    let mut grads = vec![f32::NAN; layout.len()];
    let loss = vae
        .pass_at(lanes, values, data, rows, noise, Some(&mut grads))
        .unwrap();
    (loss, grads)
}

#[test]
fn the_loss_is_the_models_at_every_width() {
    for width in [8, 32, 256] {
        let ex = example(width, 5);
        let (loss, _) = pass(2, Lanes::widest(), &ex);
        let values: Vec<f64> = ex.1.iter().map(|&v| v as f64).collect();
        let want = reference_loss(&ex.0, &values, &ex.2, &ex.3, &ex.4);
        assert!(
            (loss - want).abs() <= 1e-5 * want.abs(),
            "width {width}: {loss} against {want}"
        );
    }
}

#[test]
fn every_gradient_is_the_losss_slope() {
    // Width 16 keeps every parameter's central difference cheap.
    let ex = example(16, 3);
    let (layout, values, data, rows, noise) = &ex;
    let (_, grads) = pass(1, Lanes::widest(), &ex);
    let base: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    let step = 1e-6;
    for p in Param::ALL {
        for k in layout.range(p) {
            let mut moved = base.clone();
            moved[k] += step;
            let up = reference_loss(layout, &moved, data, rows, noise);
            moved[k] -= 2.0 * step;
            let down = reference_loss(layout, &moved, data, rows, noise);
            let slope = (up - down) / (2.0 * step);
            let got = grads[k] as f64;
            assert!(
                (got - slope).abs() <= 2e-4 * slope.abs() + 2e-5,
                "{p:?} element {}: {got} against {slope}",
                k - layout.range(p).start
            );
        }
    }
    // The padding between parameters is written, not left as it was.
    let used: usize = Param::ALL.iter().map(|&p| layout.range(p).len()).sum();
    assert_eq!(grads.iter().filter(|v| !v.is_nan()).count(), layout.len());
    assert!(used < layout.len());
}

#[test]
fn threads_and_vector_widths_give_the_same_bits() {
    let ex = example(64, 50);
    let (loss, grads) = pass(1, Lanes::Four, &ex);
    for lanes in Lanes::supported() {
        for threads in [1, 3] {
            let (l, g) = pass(threads, lanes, &ex);
            assert_eq!(l.to_bits(), loss.to_bits(), "{lanes:?}, {threads} threads");
            assert!(g
                .iter()
                .zip(&grads)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}

#[test]
fn an_empty_batch_has_no_loss_and_no_gradient() {
    let (layout, values, data, _, _) = example(16, 2);
    let vae = CpuVae::new(layout.clone(), 1).unwrap();
    let mut grads = vec![1f32; layout.len()];
    assert_eq!(
        vae.loss_and_gradients(&values, &data, &[], &[], &mut grads)
            .unwrap(),
        0.0
    );
    assert!(grads.iter().all(|&g| g == 0.0));
}

#[test]
fn bad_buffers_are_refused_by_name_and_nothing_is_written() {
    let (layout, values, data, rows, noise) = example(16, 4);
    let vae = CpuVae::new(layout.clone(), 1).unwrap();
    let n = layout.len();
    let mut grads = vec![7f32; n];
    let check = |values: &[f32],
                 data: &[f32],
                 rows: &[i64],
                 noise: &[f32],
                 grads: &mut [f32],
                 what: &str| {
        let err = vae
            .loss_and_gradients(values, data, rows, noise, grads)
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{err}");
    };
    check(&values[1..], &data, &rows, &noise, &mut grads, "values");
    check(
        &values,
        &data,
        &rows,
        &noise,
        &mut vec![0f32; n + 1],
        "grads",
    );
    check(&values, &data, &rows, &noise[1..], &mut grads, "noise");
    check(&values, &data[1..], &rows, &noise, &mut grads, "data");
    check(
        &values,
        &data,
        &[0, 1, 2, 4],
        &noise,
        &mut grads,
        "beat 4 is not one of the 4",
    );
    check(
        &values,
        &data,
        &[0, -1, 2, 3],
        &noise,
        &mut grads,
        "beat -1",
    );
    assert!(grads.iter().all(|&g| g == 7.0));
}
