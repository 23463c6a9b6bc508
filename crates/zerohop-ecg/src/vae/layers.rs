//! The VAE's layers over a chunk of LANES beats at once. An activation is `[channel][sample]`
//! rows of `len` samples, each sample a lane vector `V` holding that sample of every beat of
//! the chunk: every operation is then the same arithmetic on whole vectors, with no edge
//! cases across lanes and no shuffles. Every convolution has a kernel of 3 and keeps the
//! length (one zero sample of padding at each end).
//!
//! The kernels are `#[inline(always)]`: they are compiled into the pass that
//! `simd::by_width!` builds for each vector width, where a `V` is one AVX-512 register, two
//! AVX2 or four SSE ones. Lanes never mix except in `hsum`, whose order is fixed, so every
//! width gives the same bits.

// Lanes and latent dimensions are walked by index: several arrays share each index.
#![allow(clippy::needless_range_loop)]

/// Beats a pass carries through the model together (one per lane).
pub(super) const LANES: usize = 16;

/// One sample of each of the chunk's beats.
pub(super) type V = [f32; LANES];

pub(super) const ZERO: V = [0.0; LANES];

/// `acc += w · x`, lane by lane.
#[inline(always)]
pub(super) fn add_scaled(acc: &mut V, w: f32, x: &V) {
    for l in 0..LANES {
        acc[l] += w * x[l];
    }
}

/// `acc += a · b`, lane by lane.
#[inline(always)]
pub(super) fn add_product(acc: &mut V, a: &V, b: &V) {
    for l in 0..LANES {
        acc[l] += a[l] * b[l];
    }
}

/// The sum of a vector's lanes, in a fixed order (halves added pairwise).
#[inline(always)]
pub(super) fn hsum(v: &V) -> f32 {
    let mut width = LANES / 2;
    let mut acc = *v;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
}

/// e^x to within 2 ulp for x in [-87, 88] (clamped there), in operations that vectorise
/// (libm's `expf` is a call per element, most of a pass's time).
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    // x = n ln2 + r with |r| ≤ ln2 / 2; ln2 split so that n · LN2_HI is exact for |n| < 2^14.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 · 2^23 rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // e^r by its Taylor series to r^7 (the next term is below 2^-27 for |r| ≤ 0.35).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    let k = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    p * f32::from_bits(((k + 127) << 23) as u32)
}

/// `y[o] = b[o] + Σ_i w[o][i] ⋆ x[i]` (`b` None: 0), the convolution with kernel 3 that keeps
/// the length: `y[o][t] = Σ_i w[o][i][0] x[i][t-1] + w[o][i][1] x[i][t] + w[o][i][2] x[i][t+1]`.
#[inline(always)]
pub(super) fn conv(x: &[V], w: &[f32], b: Option<&[f32]>, y: &mut [V], len: usize) {
    let cin = x.len() / len;
    for (o, yo) in y.chunks_exact_mut(len).enumerate() {
        let bias = b.map_or(0.0, |b| b[o]);
        let taps = &w[o * cin * 3..][..cin * 3];
        // The ends, where a tap falls on the padding.
        for t in [0, len - 1] {
            let mut acc = [bias; LANES];
            for (xi, k) in x.chunks_exact(len).zip(taps.chunks_exact(3)) {
                if t > 0 {
                    add_scaled(&mut acc, k[0], &xi[t - 1]);
                }
                add_scaled(&mut acc, k[1], &xi[t]);
                if t + 1 < len {
                    add_scaled(&mut acc, k[2], &xi[t + 1]);
                }
            }
            yo[t] = acc;
        }
        // Inside, each output summed in a register: one load per tap.
        for t in 1..len.saturating_sub(1) {
            let mut acc = [bias; LANES];
            for (xi, k) in x.chunks_exact(len).zip(taps.chunks_exact(3)) {
                let [before, here, after] = [&xi[t - 1], &xi[t], &xi[t + 1]];
                for l in 0..LANES {
                    acc[l] += k[0] * before[l] + k[1] * here[l] + k[2] * after[l];
                }
            }
            yo[t] = acc;
        }
    }
}

/// `w` (out, in, 3) as the weights of the convolution that gives its input's gradient:
/// (in, out, 3), the kernel reversed (input t fed output t - j + 1 through tap j).
pub(super) fn transpose_reversed(w: &[f32], cout: usize, cin: usize) -> Vec<f32> {
    let mut into = vec![0f32; w.len()];
    for o in 0..cout {
        for i in 0..cin {
            for j in 0..3 {
                into[(i * cout + o) * 3 + 2 - j] = w[(o * cin + i) * 3 + j];
            }
        }
    }
    into
}

/// The gradients of `conv`'s weights and bias, summed over the lanes and added to `dw` and
/// `db`, from its input `x` and its output's gradient `dy`.
#[inline(always)]
pub(super) fn conv_param_grads(x: &[V], dy: &[V], len: usize, dw: &mut [f32], db: &mut [f32]) {
    let cin = x.len() / len;
    for (o, dyo) in dy.chunks_exact(len).enumerate() {
        db[o] += hsum(&sum_rows(dyo, None));
        for (i, xi) in x.chunks_exact(len).enumerate() {
            // Tap j of output t read input t + j - 1: three sums over shifted rows.
            let taps = [
                sum_rows(&dyo[1..], Some(xi)),
                sum_rows(dyo, Some(xi)),
                sum_rows(dyo, Some(&xi[1..])),
            ];
            for (g, tap) in dw[(o * cin + i) * 3..][..3].iter_mut().zip(&taps) {
                *g += hsum(tap);
            }
        }
    }
}

/// Σ_t a[t] · b[t] lane by lane over the rows both have (`b` None: Σ_t a[t]), in four
/// partial sums: one would wait on the previous addition at every row. (Four named
/// accumulators: an array of them was kept on the stack, lane by lane.)
#[inline(always)]
fn sum_rows(a: &[V], b: Option<&[V]>) -> V {
    let n = b.map_or(a.len(), |b| a.len().min(b.len()));
    let (mut s0, mut s1, mut s2, mut s3) = (ZERO, ZERO, ZERO, ZERO);
    let whole = n - n % 4;
    match b {
        Some(b) => {
            let (a, b) = (&a[..n], &b[..n]);
            for t in (0..whole).step_by(4) {
                add_product(&mut s0, &a[t], &b[t]);
                add_product(&mut s1, &a[t + 1], &b[t + 1]);
                add_product(&mut s2, &a[t + 2], &b[t + 2]);
                add_product(&mut s3, &a[t + 3], &b[t + 3]);
            }
            for t in whole..n {
                add_product(&mut s0, &a[t], &b[t]);
            }
        }
        None => {
            for t in (0..whole).step_by(4) {
                add_scaled(&mut s0, 1.0, &a[t]);
                add_scaled(&mut s1, 1.0, &a[t + 1]);
                add_scaled(&mut s2, 1.0, &a[t + 2]);
                add_scaled(&mut s3, 1.0, &a[t + 3]);
            }
            for row in &a[whole..n] {
                add_scaled(&mut s0, 1.0, row);
            }
        }
    }
    for l in 0..LANES {
        s0[l] = (s0[l] + s1[l]) + (s2[l] + s3[l]);
    }
    s0
}

/// The swish `y = h σ(α h)`, keeping σ(α h) in `sig` for the backward pass.
#[inline(always)]
pub(super) fn swish(h: &[V], alpha: f32, sig: &mut [V], y: &mut [V]) {
    for ((y, s), h) in y.iter_mut().zip(sig.iter_mut()).zip(h) {
        for l in 0..LANES {
            s[l] = 1.0 / (1.0 + exp(-alpha * h[l]));
            y[l] = h[l] * s[l];
        }
    }
}

/// The swish's backward pass: `dh` from `dy`; returns the gradient of α.
/// dy/dh = σ + α h σ (1 − σ), dy/dα = h² σ (1 − σ).
#[inline(always)]
pub(super) fn swish_backward(dy: &[V], h: &[V], sig: &[V], alpha: f32, dh: &mut [V]) -> f32 {
    // dα in four partial sums (see `sum_rows`).
    let (mut s0, mut s1, mut s2, mut s3) = (ZERO, ZERO, ZERO, ZERO);
    let row = |acc: &mut V, dh: &mut V, dy: &V, h: &V, s: &V| {
        for l in 0..LANES {
            let slope = h[l] * s[l] * (1.0 - s[l]);
            dh[l] = dy[l] * (s[l] + alpha * slope);
            acc[l] += dy[l] * h[l] * slope;
        }
    };
    let n = dy.len();
    let (h, sig, dh) = (&h[..n], &sig[..n], &mut dh[..n]);
    let whole = n - n % 4;
    for t in (0..whole).step_by(4) {
        row(&mut s0, &mut dh[t], &dy[t], &h[t], &sig[t]);
        row(&mut s1, &mut dh[t + 1], &dy[t + 1], &h[t + 1], &sig[t + 1]);
        row(&mut s2, &mut dh[t + 2], &dy[t + 2], &h[t + 2], &sig[t + 2]);
        row(&mut s3, &mut dh[t + 3], &dy[t + 3], &h[t + 3], &sig[t + 3]);
    }
    for t in whole..n {
        row(&mut s0, &mut dh[t], &dy[t], &h[t], &sig[t]);
    }
    for l in 0..LANES {
        s0[l] = (s0[l] + s1[l]) + (s2[l] + s3[l]);
    }
    hsum(&s0)
}

/// The fixed [1, 2, 1] filter with stride 2 over each row of `len` (even) samples:
/// `y[i] = x[2i-1] + 2 x[2i] + x[2i+1]`, zero before the start.
#[inline(always)]
pub(super) fn halve(x: &[V], len: usize, y: &mut [V]) {
    for (xr, yr) in x.chunks_exact(len).zip(y.chunks_exact_mut(len / 2)) {
        for (i, y) in yr.iter_mut().enumerate() {
            let before = if i > 0 { xr[2 * i - 1] } else { ZERO };
            for l in 0..LANES {
                y[l] = before[l] + 2.0 * xr[2 * i][l] + xr[2 * i + 1][l];
            }
        }
    }
}

/// `halve`'s backward pass: x[2i] fed 2 y[i]; x[2i+1] fed y[i] and y[i+1].
#[inline(always)]
pub(super) fn halve_backward(dy: &[V], len: usize, dx: &mut [V]) {
    let half = len / 2;
    for (dyr, dxr) in dy.chunks_exact(half).zip(dx.chunks_exact_mut(len)) {
        for (i, pair) in dxr.chunks_exact_mut(2).enumerate() {
            let next = if i + 1 < half { dyr[i + 1] } else { ZERO };
            for l in 0..LANES {
                pair[0][l] = 2.0 * dyr[i][l];
                pair[1][l] = dyr[i][l] + next[l];
            }
        }
    }
}

/// Every sample repeated once (nearest-neighbour upsampling by 2): rows of `len` to `2 len`.
#[inline(always)]
pub(super) fn double(x: &[V], y: &mut [V]) {
    for (pair, v) in y.chunks_exact_mut(2).zip(x) {
        pair[0] = *v;
        pair[1] = *v;
    }
}

/// `double`'s backward pass: each sample's gradient is its two copies'.
#[inline(always)]
pub(super) fn double_backward(dy: &[V], dx: &mut [V]) {
    for (dx, pair) in dx.iter_mut().zip(dy.chunks_exact(2)) {
        for l in 0..LANES {
            dx[l] = pair[0][l] + pair[1][l];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of `len` samples, lane l of sample t of row c a function of (c, t, l).
    fn rows(channels: usize, len: usize, f: impl Fn(usize, usize, usize) -> f32) -> Vec<V> {
        (0..channels * len)
            .map(|k| std::array::from_fn(|l| f(k / len, k % len, l)))
            .collect()
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_over_the_range_it_is_used() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {got}, libm {want} ({ulp} ulp)");
            x += 0.013_7;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37 && exp(1000.0) > 1e38);
    }

    #[test]
    fn convolving_matches_the_definition_at_every_length_and_lane() {
        for len in [1usize, 2, 3, 8, 37] {
            let (cin, cout) = (3, 2);
            let x = rows(cin, len, |c, t, l| {
                ((c * 97 + t * 7 + l) as f32 * 0.37).sin()
            });
            let w: Vec<f32> = (0..cout * cin * 3)
                .map(|v| (v as f32 * 0.91).cos())
                .collect();
            let b = [0.5f32, -0.25];
            let mut y = vec![ZERO; cout * len];
            conv(&x, &w, Some(&b), &mut y, len);
            for o in 0..cout {
                for t in 0..len {
                    for l in 0..LANES {
                        let mut want = b[o] as f64;
                        for i in 0..cin {
                            for j in 0..3 {
                                let s = t as isize + j as isize - 1;
                                if (0..len as isize).contains(&s) {
                                    let v = x[i * len + s as usize][l];
                                    want += (w[(o * cin + i) * 3 + j] * v) as f64;
                                }
                            }
                        }
                        let got = y[o * len + t][l] as f64;
                        assert!((got - want).abs() < 1e-5, "len {len} o {o} t {t} lane {l}");
                    }
                }
            }
        }
    }

    #[test]
    fn halving_and_doubling_pass_gradients_back_to_the_samples_they_read() {
        // <halve(x), dy> = <x, halve_backward(dy)> for every x, dy: check on unit vectors.
        let len = 8;
        let dy = rows(1, len / 2, |_, t, l| (t + l) as f32 + 1.0);
        let mut dx = vec![ZERO; len];
        halve_backward(&dy, len, &mut dx);
        for s in 0..len {
            let x = rows(1, len, |_, t, _| if t == s { 1.0 } else { 0.0 });
            let mut y = vec![ZERO; len / 2];
            halve(&x, len, &mut y);
            for l in 0..LANES {
                let along: f32 = y.iter().zip(&dy).map(|(y, d)| y[l] * d[l]).sum();
                assert_eq!(along, dx[s][l], "sample {s} lane {l}");
            }
        }
        let mut up = vec![ZERO; 2 * len];
        double(&dx, &mut up);
        let mut back = vec![ZERO; len];
        double_backward(&up, &mut back);
        for (b, d) in back.iter().zip(&dx) {
            assert!(b.iter().zip(d).all(|(b, d)| *b == 2.0 * d));
        }
    }

    #[test]
    fn a_lane_sum_adds_every_lane() {
        let v: V = std::array::from_fn(|l| (1 << l) as f32);
        assert_eq!(hsum(&v), ((1u32 << LANES) - 1) as f32);
    }
}
