//! Where each of the VAE's parameters sits in one flat buffer: the order torch's
//! `model.parameters()` gives for the Python `LightVAE`, each tensor starting on a multiple of
//! `align` elements (the Python `FlatParameters` packs them so).

use std::ops::Range;

use crate::error::{invalid, Result};

/// Channels into and out of the encoder's three convolutions.
pub(super) const CHANNELS: [usize; 4] = [1, 4, 8, 16];
/// Channels into and out of the decoder's three convolutions.
pub(super) const DECODER: [usize; 4] = [8, 4, 2, 1];
/// Taps of every convolution.
const KERNEL: usize = 3;

/// The model's parameters, in `model.parameters()` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// The swish's α, shared by all five swishes.
    Alpha,
    EncoderWeight(usize),
    EncoderBias(usize),
    MeanWeight,
    MeanBias,
    LogVarWeight,
    LogVarBias,
    ProjectWeight,
    ProjectBias,
    DecoderWeight(usize),
    DecoderBias(usize),
}

impl Param {
    /// Every parameter, in order.
    pub const ALL: [Param; 19] = [
        Param::Alpha,
        Param::EncoderWeight(0),
        Param::EncoderBias(0),
        Param::EncoderWeight(1),
        Param::EncoderBias(1),
        Param::EncoderWeight(2),
        Param::EncoderBias(2),
        Param::MeanWeight,
        Param::MeanBias,
        Param::LogVarWeight,
        Param::LogVarBias,
        Param::ProjectWeight,
        Param::ProjectBias,
        Param::DecoderWeight(0),
        Param::DecoderBias(0),
        Param::DecoderWeight(1),
        Param::DecoderBias(1),
        Param::DecoderWeight(2),
        Param::DecoderBias(2),
    ];

    /// Its place in `ALL`.
    pub fn index(self) -> usize {
        match self {
            Param::Alpha => 0,
            Param::EncoderWeight(k) => 1 + 2 * k,
            Param::EncoderBias(k) => 2 + 2 * k,
            Param::MeanWeight => 7,
            Param::MeanBias => 8,
            Param::LogVarWeight => 9,
            Param::LogVarBias => 10,
            Param::ProjectWeight => 11,
            Param::ProjectBias => 12,
            Param::DecoderWeight(k) => 13 + 2 * k,
            Param::DecoderBias(k) => 14 + 2 * k,
        }
    }
}

/// The shapes and offsets of a LightVAE's parameters for beats of `width` samples and a
/// `latent`-dimensional code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    width: usize,
    latent: usize,
    offsets: [usize; 20],
    numel: [usize; 19],
}

impl Layout {
    /// `width` a power of two ≥ 8, `latent` 1 to 8, `align` ≥ 1 elements.
    pub fn new(width: usize, latent: usize, align: usize) -> Result<Layout> {
        if width < 8 || !width.is_power_of_two() {
            return Err(invalid(
                "width",
                format!("{width}: a power of two of at least 8"),
            ));
        }
        if !(1..=super::pass::MAX_LATENT).contains(&latent) {
            let most = super::pass::MAX_LATENT;
            return Err(invalid(
                "latent",
                format!("{latent}: 1 to {most} dimensions"),
            ));
        }
        if align == 0 {
            return Err(invalid("align", "0: at least one element"));
        }
        let mut layout = Layout {
            width,
            latent,
            offsets: [0; 20],
            numel: [0; 19],
        };
        for (k, p) in Param::ALL.iter().enumerate() {
            let numel: usize = layout.shape(*p).iter().product();
            layout.numel[k] = numel;
            layout.offsets[k + 1] = layout.offsets[k] + numel.div_ceil(align) * align;
        }
        Ok(layout)
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn latent(&self) -> usize {
        self.latent
    }

    /// Elements of the flat buffer, padding included.
    pub fn len(&self) -> usize {
        self.offsets[Param::ALL.len()]
    }

    /// Never: every model has parameters (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensor's shape, as torch gives it.
    pub fn shape(&self, p: Param) -> Vec<usize> {
        let conv = |out: usize, inp: usize| vec![out, inp, KERNEL];
        match p {
            Param::Alpha => vec![],
            Param::EncoderWeight(k) => conv(CHANNELS[k + 1], CHANNELS[k]),
            Param::EncoderBias(k) => vec![CHANNELS[k + 1]],
            Param::MeanWeight | Param::LogVarWeight => conv(self.latent, CHANNELS[3]),
            Param::MeanBias | Param::LogVarBias => vec![self.latent],
            Param::ProjectWeight => vec![self.width, self.latent],
            Param::ProjectBias => vec![self.width],
            Param::DecoderWeight(k) => conv(DECODER[k + 1], DECODER[k]),
            Param::DecoderBias(k) => vec![DECODER[k + 1]],
        }
    }

    /// Where the tensor's elements sit in the flat buffer.
    pub fn range(&self, p: Param) -> Range<usize> {
        let k = p.index();
        self.offsets[k]..self.offsets[k] + self.numel[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_knows_its_place() {
        for (k, p) in Param::ALL.iter().enumerate() {
            assert_eq!(p.index(), k, "{p:?}");
        }
    }

    #[test]
    fn parameters_are_aligned_and_do_not_overlap() {
        let layout = Layout::new(256, 2, 16).unwrap();
        let mut end = 0;
        for p in Param::ALL {
            let r = layout.range(p);
            assert_eq!(r.start % 16, 0, "{p:?}");
            assert!(r.start >= end, "{p:?} overlaps the one before");
            end = r.end;
        }
        assert_eq!(layout.len(), end.div_ceil(16) * 16);
        let numel: usize = Param::ALL.iter().map(|&p| layout.range(p).len()).sum();
        assert_eq!(
            numel,
            1 + 12 + 4 + 96 + 8 + 384 + 16 + 2 * (96 + 2) + 512 + 256 + 96 + 4 + 24 + 2 + 6 + 1
        );
        assert_eq!(layout.shape(Param::ProjectWeight), vec![256, 2]);
    }

    #[test]
    fn a_width_or_latent_the_model_cannot_have_is_refused_by_name() {
        for (width, latent, align, what) in [
            (100, 2, 16, "width"),
            (4, 2, 16, "width"),
            (64, 0, 16, "latent"),
            (64, 9, 16, "latent"),
            (64, 2, 0, "align"),
        ] {
            let err = Layout::new(width, latent, align).unwrap_err().to_string();
            assert!(err.contains(what), "{err}");
        }
    }
}
