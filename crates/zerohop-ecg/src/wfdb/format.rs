//! The sample storage formats: how a signal file's bytes hold the interleaved stream of
//! samples (frame 0 of every signal of the file, then frame 1, …).
//!
//! Packed formats put several samples in one group of bytes (212: two 12-bit samples in
//! three bytes; 310 and 311: three 10-bit samples in four). The packing runs over the
//! interleaved stream, so one group may hold samples of different signals.

/// A format this reader decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    pub code: u16,
    /// Samples per group of bytes.
    pub group_samples: usize,
    /// Bytes per group.
    pub group_bytes: usize,
    /// The ADC value WFDB writes for a missing or invalid sample (the most negative value).
    pub invalid: i32,
}

/// The formats [`Format::of`] knows, for error messages.
pub const SUPPORTED: &str = "16, 24, 32, 61, 80, 160, 212, 310, 311";

impl Format {
    pub fn of(code: u16) -> Option<Format> {
        let (group_samples, group_bytes, bits) = match code {
            16 | 61 | 160 => (1, 2, 16),
            24 => (1, 3, 24),
            32 => (1, 4, 32),
            80 => (1, 1, 8),
            212 => (2, 3, 12),
            310 | 311 => (3, 4, 10),
            _ => return None,
        };
        Some(Format {
            code,
            group_samples,
            group_bytes,
            invalid: if bits == 32 {
                i32::MIN
            } else {
                -(1i32 << (bits - 1))
            },
        })
    }

    /// Bytes a partial final group of `samples` samples occupies: the bytes those samples'
    /// bits touch (WFDB writers stop there).
    fn partial_bytes(self, samples: usize) -> usize {
        match (self.code, samples) {
            (_, 0) => 0,
            (212, 1) | (310, 1) | (311, 1) => 2,
            (311, 2) => 3,
            (310, 2) => 4,
            _ => self.group_bytes,
        }
    }

    /// Bytes that hold the first `samples` samples of the stream.
    pub fn bytes_for(self, samples: u64) -> u64 {
        let gs = self.group_samples as u64;
        (samples / gs) * self.group_bytes as u64
            + self.partial_bytes((samples % gs) as usize) as u64
    }

    /// The most samples `bytes` bytes hold whole.
    pub fn samples_in(self, bytes: u64) -> u64 {
        let gb = self.group_bytes as u64;
        let tail = (bytes % gb) as usize;
        let extra = (0..self.group_samples)
            .rev()
            .find(|&k| self.partial_bytes(k) <= tail)
            .unwrap_or(0);
        (bytes / gb) * self.group_samples as u64 + extra as u64
    }

    /// The samples of one group (`g` zero-padded past the data's end).
    #[inline(always)]
    fn group(self, g: [u8; 4]) -> [i32; 3] {
        // Sign extension: shift the field's top bit to bit 31, then back arithmetically.
        let sx = |v: u32, bits: u32| ((v << (32 - bits)) as i32) >> (32 - bits);
        let [b0, b1, b2, b3] = g.map(u32::from);
        match self.code {
            16 => [i16::from_le_bytes([g[0], g[1]]).into(), 0, 0],
            61 => [i16::from_be_bytes([g[0], g[1]]).into(), 0, 0],
            160 => [i32::from(u16::from_le_bytes([g[0], g[1]])) - 32768, 0, 0],
            80 => [i32::from(g[0]) - 128, 0, 0],
            24 => [sx(b0 | b1 << 8 | b2 << 16, 24), 0, 0],
            32 => [i32::from_le_bytes(g), 0, 0],
            212 => [
                sx(b0 | (b1 & 0x0f) << 8, 12),
                sx(b2 | (b1 & 0xf0) << 4, 12),
                0,
            ],
            // Two little-endian 16-bit words; samples 0 and 1 in bits 1–10 of words 0 and 1,
            // sample 2 in bits 11–15 of word 0 (low half) and of word 1 (high half).
            310 => {
                let (w0, w1) = (b0 | b1 << 8, b2 | b3 << 8);
                [
                    sx((w0 >> 1) & 0x3ff, 10),
                    sx((w1 >> 1) & 0x3ff, 10),
                    sx((w0 >> 11) | (w1 >> 11) << 5, 10),
                ]
            }
            // One little-endian 32-bit word: samples in bits 0–9, 10–19 and 20–29.
            311 => {
                let w = u32::from_le_bytes(g);
                [
                    sx(w & 0x3ff, 10),
                    sx((w >> 10) & 0x3ff, 10),
                    sx((w >> 20) & 0x3ff, 10),
                ]
            }
            _ => [0; 3],
        }
    }

    /// Calls `sink` with `count` samples of the stream starting at sample `first`, which
    /// must start a group (a multiple of `group_samples`). `data` must hold
    /// `bytes_for(first + count)` bytes.
    #[inline]
    pub fn decode(self, data: &[u8], first: u64, count: usize, mut sink: impl FnMut(i32)) {
        debug_assert_eq!(first % self.group_samples as u64, 0);
        let (gb, gs) = (self.group_bytes, self.group_samples);
        let mut pos = usize::try_from(first / gs as u64)
            .unwrap_or(usize::MAX)
            .saturating_mul(gb);
        let mut left = count;
        // Exactly `count` samples even if the data were short (bytes past its end read as
        // zero), so a caller's columns are always filled.
        while left > 0 {
            let mut g = [0u8; 4];
            let start = pos.min(data.len());
            let end = pos.saturating_add(gb).min(data.len());
            g[..end - start].copy_from_slice(&data[start..end]);
            let take = left.min(gs);
            for &s in &self.group(g)[..take] {
                sink(s);
            }
            pos = pos.saturating_add(gb);
            left -= take;
        }
    }
}
