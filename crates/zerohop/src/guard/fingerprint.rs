//! The fingerprint of byte ranges on the host: two sums over 64-bit words, both parallel and
//! order-free, so the device kernel (`fingerprint.ptx`) computes the same value.
//!
//! Words sit at addresses that are multiples of 8; bytes of a word outside the range count as
//! zero. Word `i` (counted across a column's ranges) adds `w` to `sum` and `lo(x) · hi(x)` to
//! `mix`, where `x = w ^ (i + 1) · KEY`. `sum` alone makes any change of one word (so of any
//! byte) change the fingerprint, exactly: addition mod 2^64 is a group. `mix` weighs every word
//! by its position, so values swapped or moved within a column change it too.

/// A column's fingerprint: compared whole, never folded, so `sum`'s exactness is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint {
    pub sum: u64,
    pub mix: u64,
}

impl Fingerprint {
    fn add(&mut self, other: Fingerprint) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.mix = self.mix.wrapping_add(other.mix);
    }
}

/// The golden-ratio constant: consecutive keys differ in many bits.
pub(crate) const KEY: u64 = 0x9E37_79B9_7F4A_7C15;

/// Lanes of the main loop: independent accumulators in one vector register each (four: one
/// AVX2 register; eight spilled to the stack and ran at half the speed).
const LANES: usize = 4;

#[inline(always)]
fn key(index: u64) -> u64 {
    index.wrapping_add(1).wrapping_mul(KEY)
}

#[inline(always)]
fn term(word: u64, key: u64) -> u64 {
    let x = word ^ key;
    (x & 0xffff_ffff) * (x >> 32)
}

/// How many words a range of `len` bytes starting at address `addr` touches.
pub(crate) fn words_spanned(addr: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    ((addr % 8 + len).div_ceil(8)) as u64
}

/// Adds the words of `bytes` (word 0 the one holding `bytes[0]`) to `print`, numbered from
/// `first`; returns how many words that was.
pub(crate) fn add_range(bytes: &[u8], first: u64, print: &mut Fingerprint) -> u64 {
    let count = words_spanned(bytes.as_ptr() as usize, bytes.len());
    if count == 0 {
        return 0;
    }
    let head = bytes.as_ptr() as usize % 8;
    let (mut index, mut rest) = (first, bytes);
    if head != 0 {
        let take = (8 - head).min(rest.len());
        let word = partial(&rest[..take], head);
        print.add(Fingerprint {
            sum: word,
            mix: term(word, key(index)),
        });
        index += 1;
        rest = &rest[take..];
    }
    let whole = rest.len() / 8 * 8;
    print.add(whole_words(&rest[..whole], index));
    index += (whole / 8) as u64;
    if whole < rest.len() {
        let word = partial(&rest[whole..], 0);
        print.add(Fingerprint {
            sum: word,
            mix: term(word, key(index)),
        });
    }
    count
}

/// A word of which only `bytes` (starting at byte `at` of the word) lie in the range.
fn partial(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word[at..at + bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// Whole words (`bytes.len()` a multiple of 8), the fastest body the CPU runs.
fn whole_words(bytes: &[u8], first: u64) -> Fingerprint {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { whole_words_avx2(bytes, first) };
    }
    lanes(bytes, first)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2")]
fn whole_words_avx2(bytes: &[u8], first: u64) -> Fingerprint {
    // The same code, compiled for 256-bit registers (four words per multiply).
    lanes(bytes, first)
}

#[inline(always)]
fn lanes(bytes: &[u8], first: u64) -> Fingerprint {
    let mut sum = [0u64; LANES];
    let mut mix = [0u64; LANES];
    let mut keys: [u64; LANES] = std::array::from_fn(|l| key(first + l as u64));
    let step = (LANES as u64).wrapping_mul(KEY);
    let mut stripes = bytes.chunks_exact(8 * LANES);
    for stripe in &mut stripes {
        // One load for the stripe: word by word, the compiler assembled the vector from scalars.
        // SAFETY: `stripe` holds exactly 8 * LANES bytes; the read is unaligned.
        let words = unsafe { stripe.as_ptr().cast::<[u64; LANES]>().read_unaligned() };
        for l in 0..LANES {
            let word = u64::from_le(words[l]);
            sum[l] = sum[l].wrapping_add(word);
            mix[l] = mix[l].wrapping_add(term(word, keys[l]));
            keys[l] = keys[l].wrapping_add(step);
        }
    }
    let mut print = Fingerprint::default();
    for l in 0..LANES {
        print.add(Fingerprint {
            sum: sum[l],
            mix: mix[l],
        });
    }
    let done = (bytes.len() - stripes.remainder().len()) / 8;
    for (i, word) in stripes.remainder().chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        print.add(Fingerprint {
            sum: word,
            mix: term(word, key(first + (done + i) as u64)),
        });
    }
    print
}

/// The fingerprint the definition gives, one byte at a time: what the fast paths (and the
/// device kernel) are tested against.
#[cfg(test)]
pub(crate) fn reference(bytes: &[u8], first: u64) -> Fingerprint {
    let addr = bytes.as_ptr() as usize;
    let mut words = vec![0u64; words_spanned(addr, bytes.len()) as usize];
    for (i, &b) in bytes.iter().enumerate() {
        let at = addr % 8 + i;
        words[at / 8] |= u64::from(b) << (8 * (at % 8));
    }
    let mut print = Fingerprint::default();
    for (i, &w) in words.iter().enumerate() {
        print.add(Fingerprint {
            sum: w,
            mix: term(w, key(first + i as u64)),
        });
    }
    print
}
