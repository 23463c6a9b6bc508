//! The Arrow C device data interface: `ArrowDeviceArray`, for arrays whose buffers live in
//! device memory. arrow-rs has no device support and treats every buffer as host memory, so
//! device arrays never go through its importer; this module builds and reads them itself and
//! never dereferences a buffer pointer.
//!
//! Synchronisation is the caller's: an exporter passes the `sync_event` it recorded (and an
//! owner that frees the event, dropped in `release`); an importer must make its stream wait on
//! the event it gets back before touching the data.

use std::ffi::c_void;
use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_schema::{DataType, Field, Fields};

use super::ffi_check::{check_array, check_unreadable_array, raw, schema_data_type, RawArrowArray};
use super::types::{arrow_type_of, dtype_of_arrow};
use crate::buffer::Owner;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{compact_strides, TensorView};

/// `struct ArrowDeviceArray` of the C device data interface.
#[repr(C)]
#[derive(Debug)]
pub struct FFI_ArrowDeviceArray {
    pub array: FFI_ArrowArray,
    pub device_id: i64,
    /// The DLPack device type code (the two specs share them).
    pub device_type: i32,
    /// A pointer *to* the event (`cudaEvent_t*`), or NULL when the data is ready.
    pub sync_event: *mut c_void,
    /// Must be zero.
    pub reserved: [i64; 3],
}

const _: () = assert!(std::mem::size_of::<FFI_ArrowDeviceArray>() == 128);

impl FFI_ArrowDeviceArray {
    /// A released (empty) struct, for a producer to fill in.
    pub fn empty() -> Self {
        FFI_ArrowDeviceArray {
            array: FFI_ArrowArray::empty(),
            device_id: -1,
            device_type: 0,
            sync_event: std::ptr::null_mut(),
            reserved: [0; 3],
        }
    }
}

/// The event a consumer must wait on, with whatever frees it.
pub struct SyncEvent {
    /// Points to the event handle (`cudaEvent_t*`), and stays valid while `owner` lives.
    pub pointer: *mut c_void,
    pub owner: Owner,
}

fn bad(what: &str, reason: impl Into<String>) -> Error {
    Error::Arrow {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// What an exported device array owns: the tables its pointers point into, its children
/// (released with it), and whatever keeps the device memory (and event) alive.
struct ExportPrivate {
    buffers: Box<[*const c_void]>,
    children: Box<[*mut RawArrowArray]>,
    _owner: Owner,
}

/// The `release` of arrays built by [`raw_array`]: releases the children, frees the private
/// data (dropping the owner), and marks the struct released.
unsafe extern "C" fn release_export(array: *mut RawArrowArray) {
    if array.is_null() {
        return;
    }
    // SAFETY: `array` was built by `raw_array`, so private_data is our boxed ExportPrivate and
    // each child a boxed RawArrowArray built the same way; this runs once per array (release
    // is cleared below, and consumers call only the base release).
    unsafe {
        let private = Box::from_raw((*array).private_data.cast::<ExportPrivate>());
        for &child in private.children.iter() {
            let mut child = Box::from_raw(child);
            if let Some(release) = child.release {
                release(&mut *child);
            }
        }
        drop(private);
        (*array).private_data = std::ptr::null_mut();
        (*array).release = None;
    }
}

/// A C ArrowArray built by hand, so no Rust reference to device memory is ever formed
/// (arrow-rs's buffers deref to slices, which device pointers must never become).
/// Every value in between is an `FFI_ArrowArray`, whose Drop releases it, so an error
/// part-way through an export leaks nothing.
fn raw_array(
    length: usize,
    buffers: Vec<*const c_void>,
    children: Vec<FFI_ArrowArray>,
    owner: Owner,
) -> FFI_ArrowArray {
    let mut private = Box::new(ExportPrivate {
        buffers: buffers.into_boxed_slice(),
        children: children
            .into_iter()
            .map(|c| Box::into_raw(Box::new(from_ffi(c))))
            .collect(),
        _owner: owner,
    });
    into_ffi(RawArrowArray {
        length: length as i64,
        null_count: 0,
        offset: 0,
        n_buffers: private.buffers.len() as i64,
        n_children: private.children.len() as i64,
        buffers: private.buffers.as_mut_ptr(),
        children: private.children.as_mut_ptr() as *const *const RawArrowArray,
        dictionary: std::ptr::null(),
        release: Some(release_export),
        private_data: Box::into_raw(private).cast(),
    })
}

/// A compact device tensor as a C array: primitive for (n,), FixedSizeLists for more
/// dimensions; and its Arrow type.
fn device_tensor_array(view: &TensorView, what: &str) -> Result<(FFI_ArrowArray, DataType)> {
    if view.ndim() == 0 || !view.is_contiguous() {
        return Err(bad(
            what,
            format!(
                "shape {:?} strides {:?}: device arrays are exported from compact tensors of \
                 at least one dimension (no copies are made on the device)",
                view.shape(),
                view.strides()
            ),
        ));
    }
    let mut data_type = arrow_type_of(view.dtype())?;
    let owner = view.owner().clone();
    let values = view.data_ptr() as *const c_void;
    let mut array = raw_array(
        view.numel(),
        vec![std::ptr::null(), values],
        vec![],
        owner.clone(),
    );
    let mut rows = view.numel();
    for &k in view.shape()[1..].iter().rev() {
        rows /= (k as usize).max(1);
        let size = i32::try_from(k).map_err(|_| bad(what, "dimension exceeds i32"))?;
        data_type = DataType::FixedSizeList(Arc::new(Field::new("item", data_type, false)), size);
        array = raw_array(rows, vec![std::ptr::null()], vec![array], owner.clone());
    }
    Ok((array, data_type))
}

fn into_ffi(raw: RawArrowArray) -> FFI_ArrowArray {
    // SAFETY: identical `#[repr(C)]` layouts (asserted in ffi_check), and `release_export`
    // has the ABI of FFI_ArrowArray's release callback.
    unsafe { std::mem::transmute::<RawArrowArray, FFI_ArrowArray>(raw) }
}

/// The inverse of [`into_ffi`]: ownership moves into the raw struct (the parent's release
/// releases it from then on).
fn from_ffi(array: FFI_ArrowArray) -> RawArrowArray {
    // SAFETY: as in `into_ffi`; the transmute consumes `array`, so its Drop does not run.
    unsafe { std::mem::transmute::<FFI_ArrowArray, RawArrowArray>(array) }
}

/// Exports named device tensors (all of `n` rows, on one device) as one struct array — a
/// record batch — or a single tensor as a plain array when `columns` has one unnamed entry.
/// `sync` is recorded by the caller after the producing work; its owner is freed by the
/// consumer's `release`.
pub fn export_device(
    columns: &[(String, TensorView)],
    as_batch: bool,
    sync: Option<SyncEvent>,
) -> Result<(FFI_ArrowDeviceArray, FFI_ArrowSchema)> {
    let first = columns
        .first()
        .ok_or_else(|| bad("device export", "no columns to export"))?;
    let device = first.1.device();
    let keep: Owner = match &sync {
        Some(s) => s.owner.clone(),
        None => Arc::new(()),
    };
    let mut children = Vec::new();
    let mut fields = Vec::new();
    for (name, view) in columns {
        let what = format!("column {name:?}");
        if view.device() != device || view.shape().first() != first.1.shape().first() {
            return Err(bad(
                &what,
                format!(
                    "is {:?} on {}, the first column is {:?} on {device}: a batch needs one \
                     device and one row count",
                    view.shape(),
                    view.device(),
                    first.1.shape()
                ),
            ));
        }
        // The event owner rides with each column so the consumer's release frees it.
        let held = attach_owner(view, &keep)?;
        let (array, data_type) = device_tensor_array(&held, &what)?;
        fields.push(Field::new(name, data_type, false));
        children.push(array);
    }
    let (array, data_type) = if as_batch {
        let rows = first.1.shape()[0] as usize;
        let data_type = DataType::Struct(Fields::from(fields.clone()));
        (
            raw_array(rows, vec![std::ptr::null()], children, keep.clone()),
            data_type,
        )
    } else {
        if children.len() != 1 {
            return Err(bad(
                "device export",
                "a plain array holds exactly one column",
            ));
        }
        let data_type = fields[0].data_type().clone();
        (children.pop().expect("one child"), data_type)
    };
    let schema = if as_batch {
        FFI_ArrowSchema::try_from(&data_type)
    } else {
        FFI_ArrowSchema::try_from(&fields[0])
    }
    .map_err(|e| bad("device export schema", e.to_string()))?;
    Ok((
        FFI_ArrowDeviceArray {
            array,
            device_id: i64::from(device.id),
            device_type: device.kind as i32,
            sync_event: sync.map_or(std::ptr::null_mut(), |s| s.pointer),
            reserved: [0; 3],
        },
        schema,
    ))
}

/// `view` with `extra` added to what keeps it alive.
fn attach_owner(view: &TensorView, extra: &Owner) -> Result<TensorView> {
    let owner: Owner = Arc::new((view.owner().clone(), extra.clone()));
    // SAFETY: same memory and layout as `view`; the new owner holds the old one.
    unsafe {
        TensorView::from_raw_parts(
            view.data_ptr(),
            view.dtype(),
            view.shape().to_vec(),
            view.strides().to_vec(),
            view.device(),
            owner,
            view.is_readonly(),
        )
    }
}

/// Device tensors read from an `ArrowDeviceArray`.
pub struct DeviceImport {
    pub device: Device,
    /// Named columns (one unnamed column when the array was not a struct).
    pub columns: Vec<(String, TensorView)>,
    /// The event to wait on before reading (NULL: ready). Valid while the columns live.
    pub sync_event: *mut c_void,
}

/// Reads a device array of numeric primitives or FixedSizeLists of them (or a struct of
/// those) without touching its buffers. The views keep the array (and so its producer's
/// memory and event) alive until the last one drops. Nulls are refused: their bitmap lives on
/// the device and cannot be inspected here. Memory on a CUDA device this process cannot reach
/// is refused (see [`crate::gate::require_present`]); the array is released on any refusal.
pub fn import_device(
    array: FFI_ArrowDeviceArray,
    schema: &FFI_ArrowSchema,
) -> Result<DeviceImport> {
    import_device_where(array, schema, crate::gate::require_present)
}

/// [`import_device`] with the check that the device is reachable passed in, so tests on a
/// machine without a GPU can present host memory as a CUDA device's.
pub(crate) fn import_device_where(
    mut array: FFI_ArrowDeviceArray,
    schema: &FFI_ArrowSchema,
    present: fn(Device, &str) -> Result<()>,
) -> Result<DeviceImport> {
    let device = Device::from_raw(
        array.device_type,
        i32::try_from(array.device_id).unwrap_or(-1),
    )?;
    let (data_type, _) = schema_data_type(schema)?;
    // The type first: a string or list column's offsets live on the device, and checking
    // them would read device memory on the host.
    check_tensor_form(&data_type, schema.name())?;
    if crate::gate::host_may_read(device) {
        check_array(&array.array, &data_type, "(device)")?;
    } else {
        check_unreadable_array(&array.array, &data_type, "(device)")?;
    }
    present(device, "Arrow device array")?;
    let sync_event = array.sync_event;
    let taken = std::mem::replace(&mut array.array, FFI_ArrowArray::empty());
    let holder: Arc<FFI_ArrowArray> = Arc::new(taken);
    let owner: Owner = holder.clone();
    let top = raw(&holder);
    let mut columns = Vec::new();
    match &data_type {
        DataType::Struct(fields) => {
            // SAFETY: check_array verified the struct's one-entry buffer table.
            if top.null_count != 0 && !unsafe { *top.buffers }.is_null() {
                return Err(bad("Arrow device struct", "has null rows"));
            }
            for (i, f) in fields.iter().enumerate() {
                // SAFETY: check_array verified the children table and entries.
                let child = unsafe { &**top.children.add(i) };
                let view = leaf_view(
                    child,
                    f.data_type(),
                    top.offset as usize,
                    top.length as usize,
                    device,
                    &owner,
                    f.name(),
                )?;
                columns.push((f.name().clone(), view));
            }
        }
        other => {
            // An unnamed plain array is one column named "values", as the host import names it.
            let name = match schema.name() {
                Some(name) if !name.is_empty() => name.to_string(),
                _ => "values".to_string(),
            };
            let view = leaf_view(top, other, 0, top.length as usize, device, &owner, &name)?;
            columns.push((name, view));
        }
    }
    Ok(DeviceImport {
        device,
        columns,
        sync_event,
    })
}

/// Refuses, by column name, a type with no tensor form on a device (strings, lists, …)
/// before its buffers are looked at.
fn check_tensor_form(data_type: &DataType, name: Option<&str>) -> Result<()> {
    fn leaf(t: &DataType, name: &str) -> Result<()> {
        match t {
            DataType::FixedSizeList(f, _) => leaf(f.data_type(), name),
            t if dtype_of_arrow(t).is_some() => Ok(()),
            t => Err(bad(
                &format!("device column {name:?}"),
                format!(
                    "Arrow type {t} has no tensor form on the device (numeric primitives and \
                     FixedSizeLists of them only); it was refused before any of its buffers \
                     were read"
                ),
            )),
        }
    }
    match data_type {
        DataType::Struct(fields) => fields
            .iter()
            .try_for_each(|f| leaf(f.data_type(), f.name())),
        other => leaf(other, name.filter(|n| !n.is_empty()).unwrap_or("values")),
    }
}

/// A (rows, dims…) view of `a` starting at logical row `parent_offset`.
fn leaf_view(
    a: &RawArrowArray,
    data_type: &DataType,
    parent_offset: usize,
    rows: usize,
    device: Device,
    owner: &Owner,
    name: &str,
) -> Result<TensorView> {
    let what = format!("device column {name:?}");
    let mut dims = vec![rows as i64];
    let mut node = a;
    let mut node_type = data_type.clone();
    let mut start = parent_offset
        .checked_add(node.offset as usize)
        .ok_or_else(|| bad(&what, "offsets overflow"))?;
    loop {
        if node.null_count != 0 && node.n_buffers > 0 {
            // SAFETY: check_array verified the buffer table holds n_buffers entries.
            let validity = unsafe { *node.buffers };
            if !validity.is_null() {
                return Err(bad(
                    &what,
                    "has a validity bitmap in device memory; nulls on the device are not \
                     supported (fill them on the producer side)",
                ));
            }
        }
        match node_type {
            DataType::FixedSizeList(f, k) => {
                // SAFETY: check_array verified one non-NULL child.
                let child = unsafe { &**node.children };
                start = start
                    .checked_mul(k as usize)
                    .and_then(|s| s.checked_add(child.offset as usize))
                    .ok_or_else(|| bad(&what, "offsets overflow"))?;
                dims.push(k as i64);
                node = child;
                node_type = f.data_type().clone();
            }
            ref leaf => {
                let dtype = dtype_of_arrow(leaf).ok_or_else(|| {
                    bad(
                        &what,
                        format!("Arrow type {leaf} has no tensor form on the device"),
                    )
                })?;
                // SAFETY: a primitive array has two buffers (validity, values), verified.
                let values = unsafe { *node.buffers.add(1) } as *mut u8;
                let byte_offset = start
                    .checked_mul(dtype.itemsize())
                    .ok_or_else(|| bad(&what, "offsets overflow"))?;
                // SAFETY: the producer promises the values buffer covers offset + length
                // elements (the C data interface's rule); `owner` keeps the producer's array
                // alive; the pointer is never dereferenced on the host.
                return unsafe {
                    TensorView::from_raw_parts(
                        values.wrapping_add(byte_offset),
                        dtype,
                        dims.clone(),
                        compact_strides(&dims),
                        device,
                        owner.clone(),
                        true,
                    )
                };
            }
        }
    }
}
