//! Element types, spelled the way DLPack 1.3 spells them: a type code, a bit width and a lane
//! count. `DType` is plain data; `Element` ties a Rust scalar to its `DType` so typed access can
//! check that the bytes really hold that type.

use std::fmt;

use crate::error::{Error, Result};

/// The `DLDataTypeCode` values of DLPack 1.3. The discriminants are the ABI values.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeCode {
    Int = 0,
    UInt = 1,
    Float = 2,
    OpaqueHandle = 3,
    Bfloat = 4,
    Complex = 5,
    Bool = 6,
    Float8E3M4 = 7,
    Float8E4M3 = 8,
    Float8E4M3B11Fnuz = 9,
    Float8E4M3Fn = 10,
    Float8E4M3Fnuz = 11,
    Float8E5M2 = 12,
    Float8E5M2Fnuz = 13,
    Float8E8M0Fnu = 14,
    Float6E2M3Fn = 15,
    Float6E3M2Fn = 16,
    Float4E2M1Fn = 17,
}

impl DTypeCode {
    const ALL: [DTypeCode; 18] = [
        DTypeCode::Int,
        DTypeCode::UInt,
        DTypeCode::Float,
        DTypeCode::OpaqueHandle,
        DTypeCode::Bfloat,
        DTypeCode::Complex,
        DTypeCode::Bool,
        DTypeCode::Float8E3M4,
        DTypeCode::Float8E4M3,
        DTypeCode::Float8E4M3B11Fnuz,
        DTypeCode::Float8E4M3Fn,
        DTypeCode::Float8E4M3Fnuz,
        DTypeCode::Float8E5M2,
        DTypeCode::Float8E5M2Fnuz,
        DTypeCode::Float8E8M0Fnu,
        DTypeCode::Float6E2M3Fn,
        DTypeCode::Float6E3M2Fn,
        DTypeCode::Float4E2M1Fn,
    ];

    /// Maps a raw DLPack code; `None` for codes this version of DLPack does not define.
    pub fn from_raw(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    /// The bit widths DLPack allows for one lane of this code.
    fn allowed_bits(self) -> &'static [u8] {
        match self {
            DTypeCode::Int | DTypeCode::UInt => &[8, 16, 32, 64],
            DTypeCode::Float => &[16, 32, 64],
            DTypeCode::OpaqueHandle => &[],
            DTypeCode::Bfloat => &[16],
            // torch's complex32 is 32 bits; NumPy and CuPy reject it but it is valid DLPack.
            DTypeCode::Complex => &[32, 64, 128],
            DTypeCode::Bool => &[8],
            DTypeCode::Float6E2M3Fn | DTypeCode::Float6E3M2Fn => &[6],
            DTypeCode::Float4E2M1Fn => &[4],
            _ => &[8],
        }
    }

    fn name(self) -> &'static str {
        match self {
            DTypeCode::Int => "int",
            DTypeCode::UInt => "uint",
            DTypeCode::Float => "float",
            DTypeCode::OpaqueHandle => "opaque_handle",
            DTypeCode::Bfloat => "bfloat",
            DTypeCode::Complex => "complex",
            DTypeCode::Bool => "bool",
            DTypeCode::Float8E3M4 => "float8_e3m4",
            DTypeCode::Float8E4M3 => "float8_e4m3",
            DTypeCode::Float8E4M3B11Fnuz => "float8_e4m3b11fnuz",
            DTypeCode::Float8E4M3Fn => "float8_e4m3fn",
            DTypeCode::Float8E4M3Fnuz => "float8_e4m3fnuz",
            DTypeCode::Float8E5M2 => "float8_e5m2",
            DTypeCode::Float8E5M2Fnuz => "float8_e5m2fnuz",
            DTypeCode::Float8E8M0Fnu => "float8_e8m0fnu",
            DTypeCode::Float6E2M3Fn => "float6_e2m3fn",
            DTypeCode::Float6E3M2Fn => "float6_e3m2fn",
            DTypeCode::Float4E2M1Fn => "float4_e2m1fn",
        }
    }

    /// Codes whose name already carries the width (float8_e4m3fn), so `Display` adds no digits.
    fn width_in_name(self) -> bool {
        (self as u8) >= DTypeCode::Float8E3M4 as u8 || self == DTypeCode::Bool
    }
}

/// A DLPack data type: code, bits per lane, lanes per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DType {
    pub code: DTypeCode,
    pub bits: u8,
    pub lanes: u16,
}

impl DType {
    pub const BOOL: DType = DType::new(DTypeCode::Bool, 8);
    pub const I8: DType = DType::new(DTypeCode::Int, 8);
    pub const I16: DType = DType::new(DTypeCode::Int, 16);
    pub const I32: DType = DType::new(DTypeCode::Int, 32);
    pub const I64: DType = DType::new(DTypeCode::Int, 64);
    pub const U8: DType = DType::new(DTypeCode::UInt, 8);
    pub const U16: DType = DType::new(DTypeCode::UInt, 16);
    pub const U32: DType = DType::new(DTypeCode::UInt, 32);
    pub const U64: DType = DType::new(DTypeCode::UInt, 64);
    pub const F16: DType = DType::new(DTypeCode::Float, 16);
    pub const F32: DType = DType::new(DTypeCode::Float, 32);
    pub const F64: DType = DType::new(DTypeCode::Float, 64);
    pub const BF16: DType = DType::new(DTypeCode::Bfloat, 16);
    pub const C64: DType = DType::new(DTypeCode::Complex, 64);
    pub const C128: DType = DType::new(DTypeCode::Complex, 128);
    pub const F8_E4M3FN: DType = DType::new(DTypeCode::Float8E4M3Fn, 8);
    pub const F8_E5M2: DType = DType::new(DTypeCode::Float8E5M2, 8);

    /// A single-lane type. Use [`DType::from_raw`] to validate untrusted values.
    pub const fn new(code: DTypeCode, bits: u8) -> Self {
        DType {
            code,
            bits,
            lanes: 1,
        }
    }

    /// Validates a raw `DLDataType` triple as a consumer must: unknown codes, widths that do
    /// not belong to the code, zero lanes and opaque handles are all refused.
    pub fn from_raw(code: u8, bits: u8, lanes: u16) -> Result<Self> {
        let known = DTypeCode::from_raw(code).ok_or_else(|| Error::UnsupportedDType {
            code,
            bits,
            lanes,
            reason: "unknown DLPack type code".into(),
        })?;
        let reject = |reason: &str| Error::UnsupportedDType {
            code,
            bits,
            lanes,
            reason: reason.into(),
        };
        if known == DTypeCode::OpaqueHandle {
            return Err(reject("opaque handles carry no element data"));
        }
        if lanes == 0 {
            return Err(reject("lanes must be at least 1"));
        }
        if !known.allowed_bits().contains(&bits) {
            return Err(reject(&format!(
                "{} allows bit widths {:?}",
                known.name(),
                known.allowed_bits()
            )));
        }
        Ok(DType {
            code: known,
            bits,
            lanes,
        })
    }

    /// Every single-lane type DLPack 1.3 defines, for lookups by name.
    pub fn all() -> impl Iterator<Item = DType> {
        DTypeCode::ALL.into_iter().flat_map(|code| {
            code.allowed_bits()
                .iter()
                .map(move |&bits| DType::new(code, bits))
        })
    }

    /// Parses the names `Display` prints ("float32", "bfloat16", "bool", "float8_e4m3fn").
    pub fn from_name(name: &str) -> Result<Self> {
        Self::all()
            .find(|d| d.to_string() == name)
            .ok_or_else(|| Error::DType {
                what: "dtype".into(),
                reason: format!("{name:?} is not a dtype name (e.g. float32, int64, bool)"),
            })
    }

    /// Bytes one element occupies, per DLPack's storage rule `(bits * lanes + 7) / 8`.
    pub const fn itemsize(self) -> usize {
        (self.bits as usize * self.lanes as usize).div_ceil(8)
    }

    /// The address alignment one element needs, as C lays it out: the scalar's width (half of
    /// it for complex numbers, whose parts are separate floats), at most 8 bytes.
    pub const fn alignment(self) -> usize {
        let scalar = self.bits as usize / 8;
        let part = if matches!(self.code, DTypeCode::Complex) {
            scalar / 2
        } else {
            scalar
        };
        if part == 0 {
            1
        } else if part > 8 {
            8
        } else {
            part
        }
    }

    /// True for types whose elements fill whole bytes, the only ones strided access supports.
    pub const fn is_byte_addressable(self) -> bool {
        (self.bits as usize * self.lanes as usize).is_multiple_of(8)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code.width_in_name() {
            write!(f, "{}", self.code.name())?;
        } else {
            write!(f, "{}{}", self.code.name(), self.bits)?;
        }
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

/// A Rust scalar whose in-memory representation is exactly a DLPack `DType`.
///
/// # Safety
/// `Self` must have size `DTYPE.itemsize()`, no padding, and every bit pattern an element of
/// `DTYPE` can hold must be a valid `Self` (so reading foreign memory as `Self` is sound).
/// `bool` is the one exception the crate handles itself: it is only read after validation.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:expr),* $(,)?) => {
        // SAFETY: each listed type is a primitive (or repr(C)/repr(transparent) pair of
        // primitives) of exactly the listed width with no invalid bit patterns.
        $(unsafe impl Element for $t { const DTYPE: DType = $d; })*
    };
}

element! {
    i8 => DType::I8, i16 => DType::I16, i32 => DType::I32, i64 => DType::I64,
    u8 => DType::U8, u16 => DType::U16, u32 => DType::U32, u64 => DType::U64,
    f32 => DType::F32, f64 => DType::F64,
    half::f16 => DType::F16, half::bf16 => DType::BF16,
    num_complex::Complex<f32> => DType::C64, num_complex::Complex<f64> => DType::C128,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dlpack_code_round_trips() {
        for raw in 0u8..=17 {
            let code = DTypeCode::from_raw(raw).expect("defined code");
            assert_eq!(code as u8, raw);
        }
        assert_eq!(DTypeCode::from_raw(18), None);
    }

    #[test]
    fn valid_types_are_accepted_with_their_width() {
        assert_eq!(DType::from_raw(2, 32, 1).unwrap(), DType::F32);
        assert_eq!(DType::from_raw(4, 16, 1).unwrap(), DType::BF16);
        assert_eq!(DType::from_raw(6, 8, 1).unwrap(), DType::BOOL);
        assert_eq!(DType::from_raw(5, 64, 1).unwrap().itemsize(), 8);
        let fp4x2 = DType::from_raw(17, 4, 2).unwrap();
        assert_eq!(fp4x2.itemsize(), 1);
        assert_eq!(fp4x2.to_string(), "float4_e2m1fnx2");
        assert_eq!(DType::from_raw(15, 6, 1).unwrap().itemsize(), 1);
    }

    #[test]
    fn invalid_types_name_the_problem() {
        let unknown = DType::from_raw(42, 8, 1).unwrap_err().to_string();
        assert!(unknown.contains("unknown DLPack type code"), "{unknown}");
        let width = DType::from_raw(2, 24, 1).unwrap_err().to_string();
        assert!(width.contains("float allows bit widths"), "{width}");
        assert!(DType::from_raw(3, 64, 1).is_err());
        assert!(DType::from_raw(2, 32, 0).is_err());
        assert!(DType::from_raw(10, 16, 1).is_err());
    }

    #[test]
    fn names_read_like_numpy() {
        assert_eq!(DType::F32.to_string(), "float32");
        assert_eq!(DType::U64.to_string(), "uint64");
        assert_eq!(DType::BF16.to_string(), "bfloat16");
        assert_eq!(DType::BOOL.to_string(), "bool");
        assert_eq!(DType::C64.to_string(), "complex64");
        assert_eq!(DType::F8_E4M3FN.to_string(), "float8_e4m3fn");
    }

    #[test]
    fn names_parse_back() {
        for d in DType::all() {
            assert_eq!(DType::from_name(&d.to_string()).unwrap(), d);
        }
        assert!(DType::from_name("float128").is_err());
    }

    #[test]
    fn element_types_match_their_sizes() {
        fn check<T: Element>() {
            assert_eq!(std::mem::size_of::<T>(), T::DTYPE.itemsize());
        }
        check::<i8>();
        check::<u64>();
        check::<half::bf16>();
        check::<num_complex::Complex<f32>>();
        check::<num_complex::Complex<f64>>();
    }
}
