//! A chunk's training pass through the VAE: forward, loss, backward, the parameters'
//! gradients added to the chunk's sums. Up to LANES beats go through together, one per lane
//! (`layers`); their activations stay in the chunk's scratch rows (under 1 MB at width 256,
//! in a core's L2 cache) instead of a whole batch's tensors per layer.

// Lanes and latent dimensions are walked by index: several arrays share each index.
#![allow(clippy::needless_range_loop)]

use super::layers::{
    add_product, add_scaled, conv, conv_param_grads, double, double_backward, exp, halve,
    halve_backward, hsum, swish, swish_backward, transpose_reversed, LANES, V, ZERO,
};
use super::layout::{Layout, Param, CHANNELS, DECODER};
use crate::simd::by_width;

/// The largest latent a pass handles (the job's model has 2).
pub(super) const MAX_LATENT: usize = 8;

/// Free nats of KL divergence per latent dimension and the weight on the divergence, as in
/// the Python model's `vae_loss`.
const FREE_NATS: f32 = 0.5;
const KL_WEIGHT: f32 = 0.2;

/// The parameters of one pass, as slices of the flat buffer, with the reversed, transposed
/// weights the input gradients convolve with, and the two latent heads as one convolution.
pub(super) struct Weights<'a> {
    layout: &'a Layout,
    width: usize,
    latent: usize,
    alpha: f32,
    enc: [(&'a [f32], &'a [f32]); 3],
    enc_back: [Vec<f32>; 3],
    heads: Vec<f32>,
    heads_bias: Vec<f32>,
    heads_back: Vec<f32>,
    project: &'a [f32],
    project_bias: &'a [f32],
    dec: [(&'a [f32], &'a [f32]); 3],
    dec_back: [Vec<f32>; 3],
}

impl<'a> Weights<'a> {
    pub(super) fn new(layout: &'a Layout, values: &'a [f32]) -> Weights<'a> {
        let p = |param| &values[layout.range(param)];
        let z = layout.latent();
        let enc = [0, 1, 2].map(|k| (p(Param::EncoderWeight(k)), p(Param::EncoderBias(k))));
        let dec = [0, 1, 2].map(|k| (p(Param::DecoderWeight(k)), p(Param::DecoderBias(k))));
        let heads = [p(Param::MeanWeight), p(Param::LogVarWeight)].concat();
        Weights {
            layout,
            width: layout.width(),
            latent: z,
            alpha: values[layout.range(Param::Alpha)][0],
            enc_back: [0, 1, 2].map(|k| transpose_reversed(enc[k].0, CHANNELS[k + 1], CHANNELS[k])),
            heads_back: transpose_reversed(&heads, 2 * z, CHANNELS[3]),
            heads,
            heads_bias: [p(Param::MeanBias), p(Param::LogVarBias)].concat(),
            project: p(Param::ProjectWeight),
            project_bias: p(Param::ProjectBias),
            dec_back: [0, 1, 2].map(|k| transpose_reversed(dec[k].0, DECODER[k + 1], DECODER[k])),
            enc,
            dec,
        }
    }
}

/// A chunk's activations and their gradients; `len[k]` = width / 2^k.
pub(super) struct Scratch {
    len: [usize; 4],
    x: Vec<V>,
    h: [Vec<V>; 3],
    sig: [Vec<V>; 3],
    down: [Vec<V>; 3],
    heads: Vec<V>,
    up: [Vec<V>; 3],
    g: [Vec<V>; 2],
    dsig: [Vec<V>; 2],
    recon: Vec<V>,
    // Gradients, reused from layer to layer.
    wide_a: Vec<V>,
    wide_b: Vec<V>,
    narrow: Vec<V>,
    dheads: Vec<V>,
    dheads_w: Vec<f32>,
}

impl Scratch {
    pub(super) fn new(width: usize, latent: usize) -> Scratch {
        let len = [width, width / 2, width / 4, width / 8];
        let rows = |n: usize| vec![ZERO; n];
        Scratch {
            len,
            x: rows(width),
            h: [0, 1, 2].map(|k| rows(CHANNELS[k + 1] * len[k])),
            sig: [0, 1, 2].map(|k| rows(CHANNELS[k + 1] * len[k])),
            down: [0, 1, 2].map(|k| rows(CHANNELS[k + 1] * len[k + 1])),
            heads: rows(2 * latent * len[3]),
            // The decoder's input to layer k, doubled: DECODER[k] rows of len[2 - k].
            up: [0, 1, 2].map(|k| rows(DECODER[k] * len[2 - k])),
            g: [0, 1].map(|k| rows(DECODER[k + 1] * len[2 - k])),
            dsig: [0, 1].map(|k| rows(DECODER[k + 1] * len[2 - k])),
            recon: rows(width),
            wide_a: rows(4 * width),
            wide_b: rows(4 * width),
            narrow: rows(4 * width),
            dheads: rows(2 * latent * len[3]),
            dheads_w: vec![0f32; 2 * latent * CHANNELS[3] * 3],
        }
    }
}

by_width! {
    /// The loss summed over the beats `rows` (at most LANES) of `data` (rows of `width`),
    /// beat b with the noise `noise[b·latent..]`; with `grads` (the flat layout), the
    /// gradients added to it.
    pub(super) fn chunk_pass(
        w: &Weights<'_>, data: &[f32], rows: &[i64], noise: &[f32], s: &mut Scratch,
        grads: Option<&mut [f32]>
    ) -> f64 = chunk_kernel
}

#[inline(always)]
fn chunk_kernel(
    w: &Weights<'_>,
    data: &[f32],
    rows: &[i64],
    noise: &[f32],
    s: &mut Scratch,
    grads: Option<&mut [f32]>,
) -> f64 {
    let (len, z, layout) = (s.len, w.latent, w.layout);
    // The beats, one per lane; lanes past the chunk's beats hold zeros and weigh nothing.
    let beats = rows.len();
    for (l, &row) in rows.iter().enumerate() {
        let beat = &data[row as usize * w.width..][..w.width];
        for (x, &v) in s.x.iter_mut().zip(beat) {
            x[l] = v;
        }
    }
    for x in &mut s.x {
        x[beats..].fill(0.0);
    }
    let mask: V = std::array::from_fn(|l| if l < beats { 1.0 } else { 0.0 });
    let mut eps = [ZERO; MAX_LATENT];
    for (l, e) in noise.chunks_exact(z).enumerate() {
        for j in 0..z {
            eps[j][l] = e[j];
        }
    }

    // Encoder: conv, swish, halve; three times.
    for (k, &(weight, bias)) in w.enc.iter().enumerate() {
        let input = if k == 0 { &s.x } else { &s.down[k - 1] };
        conv(input, weight, Some(bias), &mut s.h[k], len[k]);
        let out = &mut s.wide_a[..s.h[k].len()];
        swish(&s.h[k], w.alpha, &mut s.sig[k], out);
        halve(out, len[k], &mut s.down[k]);
    }
    // The latent: the mean over length of the two heads; z = μ + ε σ.
    conv(
        &s.down[2],
        &w.heads,
        Some(&w.heads_bias),
        &mut s.heads,
        len[3],
    );
    let mut mean = [ZERO; 2 * MAX_LATENT];
    for (m, row) in mean.iter_mut().zip(s.heads.chunks_exact(len[3])) {
        for v in row {
            add_scaled(m, 1.0, v);
        }
        m.iter_mut().for_each(|m| *m /= len[3] as f32);
    }
    let (mu, logvar) = mean[..2 * z].split_at(z);
    let mut std = [ZERO; MAX_LATENT];
    let mut code = [ZERO; MAX_LATENT];
    for j in 0..z {
        for l in 0..LANES {
            std[j][l] = exp(0.5 * logvar[j][l]);
            code[j][l] = mu[j][l] + eps[j][l] * std[j][l];
        }
    }
    // Decoder: project, then (double, conv, swish) twice and (double, conv).
    let projected = &mut s.wide_b[..w.width];
    for (o, p) in projected.iter_mut().enumerate() {
        *p = [w.project_bias[o]; LANES];
        for j in 0..z {
            add_scaled(p, w.project[o * z + j], &code[j]);
        }
    }
    double(projected, &mut s.up[0]);
    for k in 0..2 {
        let (weight, bias) = w.dec[k];
        conv(&s.up[k], weight, Some(bias), &mut s.g[k], len[2 - k]);
        let out = &mut s.wide_a[..s.g[k].len()];
        swish(&s.g[k], w.alpha, &mut s.dsig[k], out);
        double(out, &mut s.up[k + 1]);
    }
    let (weight, bias) = w.dec[2];
    conv(&s.up[2], weight, Some(bias), &mut s.recon, len[0]);

    // Loss per beat: the mean squared error, and the KL divergence per dimension above its
    // floor; the seed of the backward pass, zero in the empty lanes.
    let dr = &mut s.wide_b[..w.width];
    let mut squares = ZERO;
    let scale = 2.0 / w.width as f32;
    for ((d, r), x) in dr.iter_mut().zip(&s.recon).zip(&s.x) {
        for l in 0..LANES {
            let diff = r[l] - x[l];
            squares[l] += diff * diff;
            d[l] = diff * scale * mask[l];
        }
    }
    let kl_share = KL_WEIGHT / z as f32;
    let mut kl = ZERO;
    let mut dmean = [ZERO; 2 * MAX_LATENT];
    for j in 0..z {
        for l in 0..LANES {
            let e = exp(logvar[j][l]);
            let nats = -0.5 * (1.0 + logvar[j][l] - mu[j][l] * mu[j][l] - e);
            kl[l] += nats.max(FREE_NATS);
            let active = if nats >= FREE_NATS {
                kl_share * mask[l]
            } else {
                0.0
            };
            dmean[j][l] = active * mu[j][l];
            dmean[z + j][l] = active * 0.5 * (e - 1.0);
        }
    }
    let mut loss = 0f64;
    for l in 0..beats {
        loss += (squares[l] / w.width as f32 + kl_share * kl[l]) as f64;
    }
    let Some(g) = grads else {
        return loss;
    };

    // Backward through the decoder.
    let mut alpha = 0f32;
    for k in (0..3).rev() {
        let rows = len[2 - k];
        let dy = &s.wide_b[..s.up[k].len() / DECODER[k] * DECODER[k + 1]];
        let (dw, db) = param_pair(layout, g, Param::DecoderWeight(k), Param::DecoderBias(k));
        conv_param_grads(&s.up[k], dy, rows, dw, db);
        let dup = &mut s.narrow[..s.up[k].len()];
        conv(dy, &w.dec_back[k], None, dup, rows);
        if k == 0 {
            break;
        }
        let dout = &mut s.wide_a[..s.g[k - 1].len()];
        double_backward(dup, dout);
        let dg = &mut s.wide_b[..s.g[k - 1].len()];
        alpha += swish_backward(dout, &s.g[k - 1], &s.dsig[k - 1], w.alpha, dg);
    }
    let dp = &mut s.wide_a[..w.width];
    double_backward(&s.narrow[..s.up[0].len()], dp);
    // The projection z → width.
    let mut dcode = [ZERO; MAX_LATENT];
    let (dw, db) = param_pair(layout, g, Param::ProjectWeight, Param::ProjectBias);
    for (o, d) in dp.iter().enumerate() {
        db[o] += hsum(d);
        for j in 0..z {
            let mut product = ZERO;
            add_product(&mut product, d, &code[j]);
            dw[o * z + j] += hsum(&product);
            add_scaled(&mut dcode[j], w.project[o * z + j], d);
        }
    }
    for j in 0..z {
        for l in 0..LANES {
            dmean[j][l] += dcode[j][l];
            dmean[z + j][l] += dcode[j][l] * eps[j][l] * 0.5 * std[j][l];
        }
    }
    for (row, d) in s.dheads.chunks_exact_mut(len[3]).zip(&dmean[..2 * z]) {
        let spread: V = d.map(|v| v / len[3] as f32);
        row.fill(spread);
    }
    s.dheads_w.fill(0.0);
    let mut heads_b = [0f32; 2 * MAX_LATENT];
    conv_param_grads(
        &s.down[2],
        &s.dheads,
        len[3],
        &mut s.dheads_w,
        &mut heads_b[..2 * z],
    );
    let half = s.dheads_w.len() / 2;
    add(&mut g[layout.range(Param::MeanWeight)], &s.dheads_w[..half]);
    add(
        &mut g[layout.range(Param::LogVarWeight)],
        &s.dheads_w[half..],
    );
    add(&mut g[layout.range(Param::MeanBias)], &heads_b[..z]);
    add(&mut g[layout.range(Param::LogVarBias)], &heads_b[z..2 * z]);
    conv(
        &s.dheads,
        &w.heads_back,
        None,
        &mut s.narrow[..s.down[2].len()],
        len[3],
    );

    // Backward through the encoder.
    for k in (0..3).rev() {
        let dout = &mut s.wide_a[..s.h[k].len()];
        halve_backward(&s.narrow[..s.down[k].len()], len[k], dout);
        let dh = &mut s.wide_b[..s.h[k].len()];
        alpha += swish_backward(dout, &s.h[k], &s.sig[k], w.alpha, dh);
        let input = if k == 0 { &s.x } else { &s.down[k - 1] };
        let (dw, db) = param_pair(layout, g, Param::EncoderWeight(k), Param::EncoderBias(k));
        conv_param_grads(input, dh, len[k], dw, db);
        if k > 0 {
            let ddown = &mut s.narrow[..s.down[k - 1].len()];
            conv(dh, &w.enc_back[k], None, ddown, len[k]);
        }
    }
    g[layout.range(Param::Alpha)][0] += alpha;
    loss
}

/// The gradient slices of a weight and its bias (the bias follows the weight).
#[inline(always)]
fn param_pair<'g>(
    layout: &Layout,
    g: &'g mut [f32],
    weight: Param,
    bias: Param,
) -> (&'g mut [f32], &'g mut [f32]) {
    let (w, b) = (layout.range(weight), layout.range(bias));
    let (head, tail) = g.split_at_mut(b.start);
    (&mut head[w], &mut tail[..b.len()])
}

#[inline(always)]
fn add(into: &mut [f32], values: &[f32]) {
    for (a, &v) in into.iter_mut().zip(values) {
        *a += v;
    }
}
