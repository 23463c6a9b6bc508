//! Which zerohop element types have an Arrow type with the same bytes.

use arrow_schema::DataType;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// The Arrow primitive type whose values buffer holds `dtype` elements byte for byte.
/// `bool` is absent on purpose: Arrow packs booleans into bits, DLPack stores a byte each.
pub fn arrow_type_of(dtype: DType) -> Result<DataType> {
    let found = match dtype {
        DType::I8 => DataType::Int8,
        DType::I16 => DataType::Int16,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::UInt8,
        DType::U16 => DataType::UInt16,
        DType::U32 => DataType::UInt32,
        DType::U64 => DataType::UInt64,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
        other => {
            return Err(Error::Arrow {
                what: format!("dtype {other}"),
                reason: "Arrow has no primitive type with this element layout (Arrow \
                         booleans are bit-packed; bfloat16, complex and float8 have no Arrow \
                         primitive)"
                    .into(),
            })
        }
    };
    Ok(found)
}

/// The zerohop element type of an Arrow primitive type, if its values are plain elements.
pub fn dtype_of_arrow(data_type: &DataType) -> Option<DType> {
    Some(match data_type {
        DataType::Int8 => DType::I8,
        DataType::Int16 => DType::I16,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::UInt8 => DType::U8,
        DataType::UInt16 => DType::U16,
        DataType::UInt32 => DType::U32,
        DataType::UInt64 => DType::U64,
        DataType::Float16 => DType::F16,
        DataType::Float32 => DType::F32,
        DataType::Float64 => DType::F64,
        _ => return None,
    })
}
