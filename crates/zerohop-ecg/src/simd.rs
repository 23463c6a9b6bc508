//! Which vector width the detector's filters run at, decided once at run time: the wheel is
//! built for any x86-64, where four lanes (SSE2) are all that can be assumed.
//!
//! Every kernel dispatched here does the same operations in the same order for each output
//! at every width (lanes only change how many outputs one instruction serves), so results are
//! bitwise equal across CPUs and to the CUDA kernels.

/// f32 lanes of a vector register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lanes {
    /// SSE2, every x86-64 (and any other architecture's baseline).
    Four,
    /// AVX2.
    Eight,
    /// AVX-512F.
    Sixteen,
}

impl Lanes {
    /// The widest this CPU runs.
    pub(crate) fn widest() -> Lanes {
        #[cfg(target_arch = "x86_64")]
        {
            static WIDEST: std::sync::OnceLock<Lanes> = std::sync::OnceLock::new();
            *WIDEST.get_or_init(|| {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    Lanes::Sixteen
                } else if std::arch::is_x86_feature_detected!("avx2") {
                    Lanes::Eight
                } else {
                    Lanes::Four
                }
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Lanes::Four
        }
    }

    /// Every width this CPU runs, narrowest first (for tests that compare them).
    #[cfg(test)]
    pub(crate) fn supported() -> Vec<Lanes> {
        [Lanes::Four, Lanes::Eight, Lanes::Sixteen]
            .into_iter()
            .filter(|&l| l <= Lanes::widest())
            .collect()
    }
}

/// `fn $name(lanes: Lanes, args) -> ret`: `$kernel(args)` compiled for `lanes` (or the widest
/// this CPU has, if narrower), `$kernel` being an `#[inline(always)]` function whose loops
/// vectorise. `$kernel::<B4, B8, B16>` gives a kernel's const generic (outputs per block) for
/// each width.
macro_rules! by_width {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        = $kernel:ident::<$block4:literal, $block8:literal, $block16:literal>) => {
        $crate::simd::by_width!(@emit $(#[$doc])* $vis fn $name($($arg: $ty),*) $(-> $ret)?
            [$kernel::<$block4>] [$kernel::<$block8>] [$kernel::<$block16>]);
    };
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        = $kernel:ident) => {
        $crate::simd::by_width!(@emit $(#[$doc])* $vis fn $name($($arg: $ty),*) $(-> $ret)?
            [$kernel] [$kernel] [$kernel]);
    };
    (@emit $(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        [$($four:tt)*] [$($eight:tt)*] [$($sixteen:tt)*]) => {
        $(#[$doc])*
        $vis fn $name(lanes: $crate::simd::Lanes, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn eight($($arg: $ty),*) $(-> $ret)? {
                    $($eight)*($($arg),*)
                }
                #[target_feature(enable = "avx512f")]
                unsafe fn sixteen($($arg: $ty),*) $(-> $ret)? {
                    $($sixteen)*($($arg),*)
                }
                match lanes.min($crate::simd::Lanes::widest()) {
                    // SAFETY: the CPU has AVX-512F (`widest` detected it at run time).
                    $crate::simd::Lanes::Sixteen => return unsafe { sixteen($($arg),*) },
                    // SAFETY: the CPU has AVX2 (`widest` detected it at run time).
                    $crate::simd::Lanes::Eight => return unsafe { eight($($arg),*) },
                    $crate::simd::Lanes::Four => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = lanes;
            $($four)*($($arg),*)
        }
    };
}

pub(crate) use by_width;

/// Checks that `chunk(lanes, base, out)` writes, at every width this CPU runs and at each
/// base, the bits `one_at_a_time(sample)` gives: a kernel's blocks must not reorder a sum.
#[cfg(test)]
pub(crate) fn assert_every_width_sums_in_order(
    len: usize,
    bases: &[usize],
    chunk: impl Fn(Lanes, usize, &mut [f32]),
    one_at_a_time: impl Fn(usize) -> f32,
) {
    for lanes in Lanes::supported() {
        for &base in bases {
            let mut out = vec![0f32; (len - base).min(4096)];
            chunk(lanes, base, &mut out);
            for (k, v) in out.iter().enumerate() {
                let want = one_at_a_time(base + k).to_bits();
                assert_eq!(v.to_bits(), want, "{lanes:?}, sample {}", base + k);
            }
        }
    }
}
