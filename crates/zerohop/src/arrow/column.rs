//! One Arrow array ↔ one tensor.
//!
//! A primitive array is a (n,) tensor over its values buffer; a FixedSizeList of K primitives
//! is a (n, K) tensor, and a list of lists a (n, R, C) one: Arrow keeps a row's components
//! together, so these are compact row-major tensors and need no copy either way. What does
//! need one — nulls (tensors cannot carry them), bit-packed booleans, strided tensors — is
//! done only when the caller allows it, and reported.

use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, BooleanArray, FixedSizeListArray};
use arrow_buffer::{BooleanBuffer, Buffer as ArrowBuffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::{DataType, Field};

use super::types::{arrow_type_of, dtype_of_arrow};
use crate::buffer::Owner;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::handoff::CopyReason;
use crate::tensor::{checked_numel, compact_strides, TensorView};
use crate::Device;

/// What an import may do besides wrapping memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImportOptions {
    /// Allow copies that change representation (bit-packed booleans become bytes).
    pub allow_copy: bool,
    /// Replace null rows with this value (a copy). Without it, a column with nulls is an
    /// error, because DLPack and the array interfaces have no way to say "missing".
    pub fill: Option<f64>,
}

/// A tensor made from an Arrow array.
#[derive(Clone, Debug)]
pub struct ImportedTensor {
    pub view: TensorView,
    /// Why the tensor is a copy (nulls filled, booleans unpacked); `None` for a view of the
    /// Arrow buffer.
    pub copy: Option<CopyReason>,
}

impl ImportedTensor {
    /// Whether the tensor is a copy rather than a view of the Arrow buffer.
    pub fn copied(&self) -> bool {
        self.copy.is_some()
    }
}

/// The Arrow side of a tensor.
#[derive(Clone, Debug)]
pub struct ExportedArray {
    pub array: ArrayRef,
    /// True when the array holds a copy (strided tensor made compact, booleans packed).
    pub copied: bool,
}

fn invalid(what: &str, reason: impl Into<String>) -> Error {
    Error::Arrow {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// Where the allocation holding `data`'s values starts: equal for arrays sliced from one
/// allocation, which tells a tensor map it may join them with strides.
pub(crate) fn values_allocation(data: &ArrayData) -> Option<*const u8> {
    let mut node = data;
    while let DataType::FixedSizeList(..) = node.data_type() {
        node = node.child_data().first()?;
    }
    node.buffers()
        .first()
        .map(|b| b.data_ptr().as_ptr() as *const u8)
}

/// The tensor view of `data` (named `what` in errors): zero-copy unless it has nulls
/// (filled only with `options.fill`) or booleans (unpacked only with `options.allow_copy`).
/// The view is read-only: Arrow data is immutable once shared.
pub fn array_to_tensor(
    data: &ArrayData,
    what: &str,
    options: ImportOptions,
) -> Result<ImportedTensor> {
    let n = data.len();
    let mut dims = vec![n as i64];
    // First element (in units of the leaf type) of row 0, and the node holding the values.
    let mut start = data.offset();
    let mut node = data;
    while let DataType::FixedSizeList(_, k) = node.data_type() {
        let child = node
            .child_data()
            .first()
            .ok_or_else(|| invalid(what, "a FixedSizeList array without its child array"))?;
        if child.null_count() > 0 {
            return Err(invalid(
                what,
                format!(
                    "its list items hold {} nulls; only whole-row nulls can be filled",
                    child.null_count()
                ),
            ));
        }
        let k = usize::try_from(*k).map_err(|_| invalid(what, "negative FixedSizeList size"))?;
        start = start
            .checked_mul(k)
            .and_then(|s| s.checked_add(child.offset()))
            .ok_or_else(|| invalid(what, "list offsets overflow"))?;
        dims.push(k as i64);
        node = child;
    }
    let leaf_type = node.data_type().clone();
    let mut imported = if leaf_type == DataType::Boolean {
        unpack_booleans(node, start, &dims, what, options)?
    } else {
        let dtype = dtype_of_arrow(&leaf_type).ok_or_else(|| {
            invalid(
                what,
                format!(
                    "Arrow type {leaf_type} has no tensor form (numeric primitives, booleans \
                     and FixedSizeLists of them only); cast it or leave it out of the spec"
                ),
            )
        })?;
        ImportedTensor {
            view: wrap_values(node, start, &dims, dtype, what)?,
            copy: None,
        }
    };
    if let Some(nulls) = data.nulls().filter(|v| v.null_count() > 0) {
        let Some(fill) = options.fill else {
            return Err(invalid(
                what,
                format!(
                    "it holds {} nulls in {n} rows, and tensors cannot mark missing values; \
                     choose a fill value (a reported copy) or drop the nulls first",
                    nulls.null_count()
                ),
            ));
        };
        imported.view = fill_nulls(&imported.view, nulls, fill, what)?;
        imported.copy = Some(CopyReason::NullsFilled {
            nulls: nulls.null_count(),
        });
    }
    Ok(imported)
}

/// A read-only view of `dims` elements of `node`'s values buffer from element `start` on.
fn wrap_values(
    node: &ArrayData,
    start: usize,
    dims: &[i64],
    dtype: DType,
    what: &str,
) -> Result<TensorView> {
    let values = node
        .buffers()
        .first()
        .ok_or_else(|| invalid(what, "a primitive array without its values buffer"))?;
    let item = dtype.itemsize();
    let numel = checked_numel(dims)?;
    let end = start
        .checked_add(numel)
        .and_then(|e| e.checked_mul(item))
        .ok_or_else(|| invalid(what, "element range overflows"))?;
    if end > values.len() {
        return Err(invalid(
            what,
            format!(
                "its values buffer has {} bytes, the array needs {end}",
                values.len()
            ),
        ));
    }
    let owner: Owner = Arc::new(values.clone());
    // SAFETY: `start..start+numel` elements lie inside the values buffer (checked above), and
    // `owner` holds a reference to that buffer for as long as the view lives. The view is
    // read-only, as Arrow requires of shared data.
    unsafe {
        TensorView::from_raw_parts(
            values.as_ptr().add(start * item) as *mut u8,
            dtype,
            dims.to_vec(),
            compact_strides(dims),
            Device::CPU,
            owner,
            true,
        )
    }
}

fn unpack_booleans(
    node: &ArrayData,
    start: usize,
    dims: &[i64],
    what: &str,
    options: ImportOptions,
) -> Result<ImportedTensor> {
    if !options.allow_copy {
        return Err(invalid(
            what,
            "Arrow packs booleans 8 to a byte and tensors use a byte each, so importing \
             them is a copy; allow it explicitly (copy=True)",
        ));
    }
    let numel = checked_numel(dims)?;
    let bits = node
        .buffers()
        .first()
        .ok_or_else(|| invalid(what, "a boolean array without its values buffer"))?;
    if start
        .checked_add(numel)
        .is_none_or(|end| end.div_ceil(8) > bits.len())
    {
        return Err(invalid(what, "its bit buffer is shorter than the array"));
    }
    let bits = BooleanBuffer::new(bits.clone(), start, numel);
    // One byte per row, from zerohop's allocator: a row count a producer lied about is an
    // out-of-memory error there, not an abort in an infallible allocation.
    let bytes = TensorView::zeros(DType::U8, dims)?;
    // SAFETY: a fresh compact tensor of `numel` one-byte elements that nothing else sees yet.
    let out = unsafe { bytes.as_mut_slice::<u8>() }?;
    for (byte, bit) in out.iter_mut().zip(bits.iter()) {
        *byte = u8::from(bit);
    }
    let view = reinterpret(bytes, DType::BOOL, dims)?;
    Ok(ImportedTensor {
        view: view.into_readonly(),
        copy: Some(CopyReason::BitsUnpacked),
    })
}

/// The same compact bytes under another one-byte dtype.
fn reinterpret(view: TensorView, dtype: DType, dims: &[i64]) -> Result<TensorView> {
    // SAFETY: `view` is a compact tensor of one-byte elements; the new view covers the same
    // bytes with the same shape and keeps the same owner.
    unsafe {
        TensorView::from_raw_parts(
            view.data_ptr(),
            dtype,
            dims.to_vec(),
            compact_strides(dims),
            view.device(),
            view.owner().clone(),
            view.is_readonly(),
        )
    }
}

/// A compact copy of `view` with every null row set to `fill`.
fn fill_nulls(view: &TensorView, nulls: &NullBuffer, fill: f64, what: &str) -> Result<TensorView> {
    let pattern = encode_fill(view.dtype(), fill, what)?;
    let out = view.contiguous_copy()?;
    let rows = view.shape()[0] as usize;
    let per_row = out.numel().checked_div(rows).unwrap_or(0);
    let item = pattern.len();
    for row in (0..rows).filter(|&r| nulls.is_null(r)) {
        for e in 0..per_row {
            // SAFETY: `out` is a fresh compact host tensor of rows * per_row elements of
            // `item` bytes that nothing else references yet.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    pattern.as_ptr(),
                    out.data_ptr().add((row * per_row + e) * item),
                    item,
                )
            };
        }
    }
    Ok(out.into_readonly())
}

/// `value` as the bytes of one `dtype` element, refusing values the type cannot hold.
fn encode_fill(dtype: DType, value: f64, what: &str) -> Result<Vec<u8>> {
    let not_integral = || {
        invalid(
            what,
            format!("fill value {value} is not a {dtype} (an integer within its range)"),
        )
    };
    macro_rules! int {
        ($t:ty) => {{
            if value.fract() != 0.0 || value < <$t>::MIN as f64 || value > <$t>::MAX as f64 {
                return Err(not_integral());
            }
            (value as $t).to_ne_bytes().to_vec()
        }};
    }
    Ok(match dtype {
        DType::I8 => int!(i8),
        DType::I16 => int!(i16),
        DType::I32 => int!(i32),
        DType::I64 => int!(i64),
        DType::U8 => int!(u8),
        DType::U16 => int!(u16),
        DType::U32 => int!(u32),
        DType::U64 => int!(u64),
        DType::BOOL if value == 0.0 || value == 1.0 => vec![value as u8],
        DType::F16 => half::f16::from_f64(value).to_ne_bytes().to_vec(),
        DType::F32 => (value as f32).to_ne_bytes().to_vec(),
        DType::F64 => value.to_ne_bytes().to_vec(),
        _ => return Err(not_integral()),
    })
}

/// The Arrow array of a host tensor: (n,) → primitive, (n, K) → `FixedSizeList<K>`,
/// (n, R, C) → `FixedSizeList<R>` of `FixedSizeList<C>`. Zero-copy for compact tensors (the
/// array's buffer keeps the tensor's memory alive); strided tensors and booleans are copied
/// only with `allow_copy`.
pub fn tensor_to_array(view: &TensorView, what: &str, allow_copy: bool) -> Result<ExportedArray> {
    tensor_to_array_within(view, what, allow_copy, None)
}

/// [`tensor_to_array`], slicing the values out of `parent` (an Arrow buffer over the whole
/// allocation) when the tensor lies inside it, so arrays of one table share one allocation —
/// which is what lets a tensor map join their columns without a copy.
pub(crate) fn tensor_to_array_within(
    view: &TensorView,
    what: &str,
    allow_copy: bool,
    parent: Option<&ArrowBuffer>,
) -> Result<ExportedArray> {
    if !view.device().is_host_accessible() {
        return Err(invalid(
            what,
            format!(
                "it lives on {}; the Arrow C data interface is for host memory (use the \
                 device interface, __arrow_c_device_array__)",
                view.device()
            ),
        ));
    }
    if view.ndim() == 0 {
        return Err(invalid(
            what,
            "a 0-d tensor is not an Arrow array (it has no rows)",
        ));
    }
    let mut copied = false;
    let compact = if view.is_contiguous() {
        view.clone()
    } else if allow_copy {
        copied = true;
        view.contiguous_copy()?
    } else {
        return Err(Error::NotContiguous(format!(
            "{what} has shape {:?} and strides {:?}; Arrow stores each row's components \
             together, so this layout needs a copy (a transpose); allow it explicitly",
            view.shape(),
            view.strides()
        )));
    };
    let shape = compact.shape().to_vec();
    let numel = compact.numel();
    let mut array: ArrayRef = if compact.dtype() == DType::BOOL {
        if !allow_copy {
            return Err(invalid(
                what,
                "Arrow packs booleans into bits, so exporting a bool tensor is a copy; allow \
                 it explicitly",
            ));
        }
        copied = true;
        let bytes = reinterpret(compact, DType::U8, &shape)?.to_vec::<u8>()?;
        Arc::new(BooleanArray::from(
            bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>(),
        ))
    } else {
        let data_type = arrow_type_of(compact.dtype())?;
        let start = compact.data_ptr() as usize;
        let values = match parent {
            Some(p)
                if start >= p.as_ptr() as usize
                    && start + compact.nbytes() <= p.as_ptr() as usize + p.len() =>
            {
                p.slice_with_length(start - p.as_ptr() as usize, compact.nbytes())
            }
            _ => share_as_arrow_buffer(&compact)?,
        };
        let data = ArrayData::builder(data_type)
            .len(numel)
            .add_buffer(values)
            .build()
            .map_err(|e| invalid(what, e.to_string()))?;
        make_array(data)
    };
    for &k in shape[1..].iter().rev() {
        let field = Arc::new(Field::new("item", array.data_type().clone(), false));
        let size = i32::try_from(k).map_err(|_| invalid(what, "dimension exceeds i32"))?;
        array = Arc::new(
            FixedSizeListArray::try_new(field, size, array, None)
                .map_err(|e| invalid(what, e.to_string()))?,
        );
    }
    Ok(ExportedArray { array, copied })
}

/// An Arrow buffer over a compact tensor's bytes that keeps the tensor's owner alive.
pub(crate) fn share_as_arrow_buffer(view: &TensorView) -> Result<ArrowBuffer> {
    let bytes = view.nbytes();
    let ptr = NonNull::new(view.data_ptr()).unwrap_or(NonNull::dangling());
    let owner = Arc::new(AssertUnwindSafe(view.owner().clone()));
    // SAFETY: the view is compact, so its `nbytes` bytes from `data_ptr` are its elements,
    // valid while its owner lives; the Arrow buffer holds a clone of that owner. (A dangling
    // pointer only stands for zero bytes.) Unwind safety: the owner is only dropped.
    Ok(unsafe { ArrowBuffer::from_custom_allocation(ptr, bytes, owner) })
}
