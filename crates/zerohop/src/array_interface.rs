//! The NumPy `__array_interface__` and the `__cuda_array_interface__`: their dicts, checked.
//!
//! The Python layer only extracts the dict's values into [`InterfaceFields`]; every rule lives
//! here, in plain Rust, so the fuzzer drives the same code that imports real arrays. Nothing
//! here reads the memory the dict points to.

use crate::dtype::{DType, DTypeCode};
use crate::error::{Error, Result};
use crate::tensor::{checked_numel, compact_strides, MAX_NDIM};

/// Which of the two protocols a dict came from: their versions and extra keys differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `__array_interface__` (version 3): host memory, an optional byte `offset`.
    Host,
    /// `__cuda_array_interface__` (versions 0 to 3): device memory, an optional `stream`.
    Cuda,
}

impl Flavor {
    /// The attribute that holds the dict.
    pub fn attribute(self) -> &'static str {
        match self {
            Flavor::Host => "__array_interface__",
            Flavor::Cuda => "__cuda_array_interface__",
        }
    }
}

/// The values of an interface dict, as Python gave them (missing optional keys are `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterfaceFields {
    pub version: i64,
    pub shape: Vec<i64>,
    pub typestr: String,
    /// `data`: (address, read-only). `None` when the dict says the buffer protocol holds the
    /// data (`data: None`), which zerohop does not follow.
    pub data: Option<(usize, bool)>,
    /// Byte strides; `None` means C-contiguous.
    pub strides: Option<Vec<i64>>,
    /// A `mask` key that is present and not None.
    pub has_mask: bool,
    /// `offset` (host only): bytes to add to the address.
    pub offset: Option<i64>,
    /// `stream` (CUDA v3 only): the producer's stream handle.
    pub stream: Option<i64>,
}

/// What a valid dict describes, in zerohop's units (strides in elements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceLayout {
    pub address: usize,
    pub readonly: bool,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    /// The stream the consumer must wait for (CUDA only).
    pub stream: Option<crate::memory::CudaStream>,
}

fn invalid(flavor: Flavor, key: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: format!("{} {key}", flavor.attribute()),
        reason,
    }
}

/// The dtype a typestr such as `"<f4"`, `"|u1"` or `"<c16"` names; byte order must be native
/// (or `|`, "not applicable", for one-byte types).
pub fn dtype_from_typestr(typestr: &str, what: &str) -> Result<DType> {
    let malformed = |reason: &str| Error::DType {
        what: format!("{what} typestr {typestr:?}"),
        reason: reason.to_string(),
    };
    let bytes = typestr.as_bytes();
    if bytes.len() < 3 || !bytes.is_ascii() {
        return Err(malformed(
            "expected a byte order (<, >, |), a kind letter and a size in bytes",
        ));
    }
    let size: u32 = typestr[2..]
        .parse()
        .map_err(|_| malformed("the size after the kind letter is not a number"))?;
    let native = if cfg!(target_endian = "little") {
        b'<'
    } else {
        b'>'
    };
    let order_ok = bytes[0] == native || bytes[0] == b'=' || (bytes[0] == b'|' && size <= 1);
    if !order_ok {
        return Err(malformed(
            if bytes[0] == b'<' || bytes[0] == b'>' || bytes[0] == b'|' {
                "not in native byte order; byte-swap it first (zerohop never swaps silently)"
            } else {
                "the first character must be <, >, = or |"
            },
        ));
    }
    let code = match bytes[1] {
        b'i' => DTypeCode::Int,
        b'u' => DTypeCode::UInt,
        b'f' => DTypeCode::Float,
        b'c' => DTypeCode::Complex,
        b'b' => DTypeCode::Bool,
        kind => {
            return Err(malformed(&format!(
                "kind {:?} has no tensor form (integers, floats, complex and bool only)",
                kind as char
            )))
        }
    };
    let bits = size
        .checked_mul(8)
        .and_then(|b| u8::try_from(b).ok())
        .ok_or_else(|| malformed("the element is too wide for any tensor dtype"))?;
    DType::from_raw(code as u8, bits, 1).map_err(|e| malformed(&e.to_string()))
}

/// Checks the dict's values and converts them; the address and extent are checked again by
/// `TensorView::from_raw_parts`, which the caller uses to wrap them.
pub fn parse(fields: &InterfaceFields, flavor: Flavor) -> Result<InterfaceLayout> {
    let versions = match flavor {
        Flavor::Host => 3..=3,
        Flavor::Cuda => 0..=3,
    };
    if !versions.contains(&fields.version) {
        return Err(invalid(
            flavor,
            "version",
            format!(
                "{} is not supported (zerohop reads {}..={})",
                fields.version,
                versions.start(),
                versions.end()
            ),
        ));
    }
    if fields.shape.len() > MAX_NDIM {
        return Err(invalid(
            flavor,
            "shape",
            format!(
                "has {} dimensions, more than the limit of {MAX_NDIM}",
                fields.shape.len()
            ),
        ));
    }
    let numel = checked_numel(&fields.shape)?;
    let dtype = dtype_from_typestr(&fields.typestr, flavor.attribute())?;
    if fields.has_mask {
        return Err(invalid(
            flavor,
            "mask",
            "masked arrays are not supported; fill the masked values first".into(),
        ));
    }
    let (address, readonly) = fields.data.ok_or_else(|| {
        invalid(
            flavor,
            "data",
            "is None (data behind the buffer protocol); export it through DLPack instead".into(),
        )
    })?;
    let address = match (flavor, fields.offset) {
        (_, None) | (_, Some(0)) => address,
        (Flavor::Cuda, Some(_)) => {
            return Err(invalid(
                flavor,
                "offset",
                "is not part of the CUDA array interface".into(),
            ))
        }
        (Flavor::Host, Some(offset)) => usize::try_from(offset)
            .ok()
            .and_then(|o| address.checked_add(o))
            .ok_or_else(|| {
                invalid(
                    flavor,
                    "offset",
                    format!("{offset} is negative or moves the address past the end of memory"),
                )
            })?,
    };
    if address == 0 && numel > 0 {
        return Err(invalid(
            flavor,
            "data",
            format!("is a NULL pointer for {numel} elements"),
        ));
    }
    let item = dtype.itemsize() as i64;
    let strides = match &fields.strides {
        None => compact_strides(&fields.shape),
        Some(bytes) => {
            if bytes.len() != fields.shape.len() {
                return Err(invalid(
                    flavor,
                    "strides",
                    format!(
                        "has {} entries for {} dimensions",
                        bytes.len(),
                        fields.shape.len()
                    ),
                ));
            }
            bytes
                .iter()
                .map(|&b| {
                    if b % item == 0 {
                        Ok(b / item)
                    } else {
                        Err(invalid(
                            flavor,
                            "strides",
                            format!("{b} bytes is not a multiple of the {item}-byte element"),
                        ))
                    }
                })
                .collect::<Result<Vec<i64>>>()?
        }
    };
    let stream = match (flavor, fields.stream) {
        (_, None) => None,
        (Flavor::Host, Some(_)) => {
            return Err(invalid(
                flavor,
                "stream",
                "is not part of the host array interface".into(),
            ))
        }
        (Flavor::Cuda, Some(0)) => {
            return Err(invalid(
                flavor,
                "stream",
                crate::memory::AMBIGUOUS_STREAM.into(),
            ))
        }
        (Flavor::Cuda, Some(s)) => Some(
            usize::try_from(s)
                .ok()
                .and_then(|h| crate::memory::CudaStream::from_handle(h).ok())
                .ok_or_else(|| invalid(flavor, "stream", format!("{s} is not a stream handle")))?,
        ),
    };
    Ok(InterfaceLayout {
        address,
        readonly,
        dtype,
        shape: fields.shape.clone(),
        strides,
        stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::validate_layout;

    fn host(shape: &[i64], typestr: &str) -> InterfaceFields {
        InterfaceFields {
            version: 3,
            shape: shape.to_vec(),
            typestr: typestr.into(),
            data: Some((4096, false)),
            ..Default::default()
        }
    }

    fn message(fields: &InterfaceFields, flavor: Flavor) -> String {
        parse(fields, flavor).unwrap_err().to_string()
    }

    #[test]
    fn typestrs_map_to_dtypes() {
        assert_eq!(dtype_from_typestr("<f4", "t").unwrap(), DType::F32);
        assert_eq!(dtype_from_typestr("|u1", "t").unwrap(), DType::U8);
        assert_eq!(dtype_from_typestr("|b1", "t").unwrap(), DType::BOOL);
        assert_eq!(dtype_from_typestr("<c16", "t").unwrap(), DType::C128);
        assert_eq!(dtype_from_typestr("=i8", "t").unwrap(), DType::I64);
    }

    #[test]
    fn bad_typestrs_are_errors_naming_the_typestr() {
        for bad in [
            "",
            "<f",
            "<é1",
            "<fé",
            "<f32",
            "<f255",
            "<f99999999999",
            ">f4",
            "|f4",
            "xf4",
            "<U4",
            "<O8",
            "<V16",
            "<b4",
            "<f3",
        ] {
            let err = dtype_from_typestr(bad, "t").unwrap_err().to_string();
            assert!(!err.is_empty(), "{bad:?} was accepted");
        }
        let err = dtype_from_typestr(">f4", "__array_interface__").unwrap_err();
        assert!(err.to_string().contains("\">f4\""), "{err}");
        assert!(err.to_string().contains("native byte order"), "{err}");
    }

    #[test]
    fn a_plain_dict_gives_compact_strides() {
        let layout = parse(&host(&[2, 3], "<f8"), Flavor::Host).unwrap();
        assert_eq!(layout.dtype, DType::F64);
        assert_eq!(layout.strides, vec![3, 1]);
        assert_eq!(layout.address, 4096);
        assert_eq!(layout.stream, None);
    }

    #[test]
    fn byte_strides_become_element_strides_and_offsets_move_the_address() {
        let mut fields = host(&[2, 3], "<i4");
        fields.strides = Some(vec![4, 8]);
        fields.offset = Some(12);
        let layout = parse(&fields, Flavor::Host).unwrap();
        assert_eq!(layout.strides, vec![1, 2]);
        assert_eq!(layout.address, 4108);
        fields.strides = Some(vec![4, 6]);
        assert!(message(&fields, Flavor::Host).contains("not a multiple"));
        fields.strides = Some(vec![4]);
        assert!(message(&fields, Flavor::Host).contains("1 entries for 2 dimensions"));
    }

    #[test]
    fn every_refusal_names_its_key() {
        let mut f = host(&[4], "<f4");
        f.version = 2;
        assert!(message(&f, Flavor::Host).contains("__array_interface__ version"));
        let mut f = host(&[4], "<f4");
        f.has_mask = true;
        assert!(message(&f, Flavor::Host).contains("mask"));
        let mut f = host(&[4], "<f4");
        f.data = None;
        assert!(message(&f, Flavor::Host).contains("buffer protocol"));
        let mut f = host(&[4], "<f4");
        f.data = Some((0, false));
        assert!(message(&f, Flavor::Host).contains("NULL"));
        let mut f = host(&[4], "<f4");
        f.offset = Some(-1);
        assert!(message(&f, Flavor::Host).contains("offset"));
        let mut f = host(&[4], "<f4");
        f.offset = Some(i64::MAX);
        f.data = Some((usize::MAX - 2, false));
        assert!(message(&f, Flavor::Host).contains("offset"));
        let mut f = host(&[4], "<f4");
        f.stream = Some(5);
        assert!(message(&f, Flavor::Host).contains("stream"));
        let mut f = host(&[-1], "<f4");
        assert!(parse(&f, Flavor::Host).is_err());
        f.shape = vec![1; MAX_NDIM + 1];
        assert!(message(&f, Flavor::Host).contains("dimensions"));
        let f = host(&[i64::MAX, 4], "<f4");
        assert!(parse(&f, Flavor::Host).is_err());
    }

    #[test]
    fn cuda_versions_and_streams() {
        let mut f = host(&[4], "<f4");
        for version in 0..=3 {
            f.version = version;
            assert!(parse(&f, Flavor::Cuda).is_ok());
        }
        f.version = 4;
        assert!(message(&f, Flavor::Cuda).contains("__cuda_array_interface__ version"));
        f.version = 3;
        f.stream = Some(0);
        assert!(message(&f, Flavor::Cuda).contains("ambiguous"));
        f.stream = Some(-3);
        assert!(message(&f, Flavor::Cuda).contains("stream handle"));
        f.stream = Some(7);
        assert_eq!(
            parse(&f, Flavor::Cuda).unwrap().stream.map(|s| s.handle()),
            Some(7)
        );
        f.offset = Some(8);
        assert!(message(&f, Flavor::Cuda).contains("offset"));
    }

    #[test]
    fn empty_arrays_may_have_a_null_address() {
        let mut f = host(&[0, 5], "<f4");
        f.data = Some((0, true));
        let layout = parse(&f, Flavor::Host).unwrap();
        assert!(layout.readonly);
        assert!(validate_layout(
            std::ptr::null(),
            layout.dtype,
            &layout.shape,
            &layout.strides
        )
        .is_ok());
    }
}
