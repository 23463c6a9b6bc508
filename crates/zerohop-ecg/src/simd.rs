//! Which vector width the detector's filters run at, decided once at run time: the wheel is
//! built for any x86-64, where four lanes (SSE2) are all that can be assumed.

/// Whether this CPU has AVX2 (eight f32 lanes); always false off x86-64.
pub(crate) fn wide_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *WIDE.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
