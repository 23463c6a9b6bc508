//! `zh_tensors`: a table's columns as tensors, picked, grouped and ordered by a spec, with
//! shapes and strides computed so every tensor is a view of the table's buffer.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::guard::WriteGuard;
use zerohop::handoff::{plan, Allowance, Consumer, Plan};
use zerohop::soa::{MapOptions, MappedTensor, TensorMap};

use crate::status::{
    give, guard, guarded, handle, out_param, release, text, zh_status, Failure, Outcome,
};
use crate::table::zh_table;

/// Export the tensors read-only (DLPack's READ_ONLY flag set).
pub const ZH_MAP_READONLY: u32 = 1;
/// Allow a copy for a group whose columns strides cannot describe (reported per tensor by
/// `zh_tensors_copied`) instead of failing.
pub const ZH_MAP_ALLOW_COPY: u32 = 2;
/// Const inputs shared without a copy, checked afterwards: the tensors are read-only views of
/// the table (as with ZH_MAP_READONLY, which libtorch ignores), the bytes of every column they
/// show are fingerprinted when the map is applied, and `zh_tensors_verify_unwritten` says
/// after the model ran whether any was written, naming the column.
pub const ZH_MAP_GUARD_CONST: u32 = 4;
/// The tensors go to libtorch, which ignores DLPack's read-only flag: read-only tensors (a
/// read-only table, ZH_MAP_READONLY) are refused (`ZH_READ_ONLY`) unless the caller allows a
/// private copy (ZH_MAP_ALLOW_COPY, reported by `zh_tensors_copied`), accepts the risk
/// (ZH_MAP_SHARE_READONLY) or has the writes checked (ZH_MAP_GUARD_CONST). The same rule as
/// Python's `tensors(..., "torch")`, decided by the core's hand-off plan.
pub const ZH_MAP_FOR_LIBTORCH: u32 = 8;
/// With ZH_MAP_FOR_LIBTORCH: share read-only memory with libtorch on the caller's word that
/// nothing writes to it there.
pub const ZH_MAP_SHARE_READONLY: u32 = 16;
const ALL_FLAGS: u32 = ZH_MAP_READONLY
    | ZH_MAP_ALLOW_COPY
    | ZH_MAP_GUARD_CONST
    | ZH_MAP_FOR_LIBTORCH
    | ZH_MAP_SHARE_READONLY;

/// A parsed spec with its flags (opaque): made once, applied to every table (event) with
/// `zh_map_apply`, so the per-event cost is the views alone.
pub struct zh_map {
    map: TensorMap,
    options: MapOptions,
    guard_const: bool,
    /// The consumer and what the caller allows it, for the hand-off plan.
    consumer: Consumer,
    allow: Allowance,
    names: Arc<[CString]>,
}

/// The tensors of one map applied to one table (opaque).
pub struct zh_tensors {
    tensors: Vec<MappedTensor>,
    names: Arc<[CString]>,
    /// The fingerprints taken when mapped with ZH_MAP_GUARD_CONST.
    guard: Option<WriteGuard>,
}

/// Tensor `index` of a `zh_tensors`, described without making an owner (see
/// `zh_tensors_view`): what a framework needs to build its own view over memory it already
/// holds, e.g. one libtorch storage for the whole table (`zh_table_export`) shared by every
/// tensor of an event instead of one DLPack deleter each.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zh_tensor_view {
    /// The first element (a device address for device tables).
    pub data: *mut c_void,
    pub ndim: i32,
    /// `ndim` sizes and strides (in elements), valid while the `zh_tensors` handle lives.
    pub shape: *const i64,
    pub strides: *const i64,
    /// DLPack's DLDataType: type code, bits and lanes.
    pub dtype_code: u8,
    pub dtype_bits: u8,
    pub dtype_lanes: u16,
    /// DLPack device type (1: CPU, 2: CUDA, 3: CUDA host) and id.
    pub device_type: i32,
    pub device_id: i32,
    /// A copy (ZH_MAP_ALLOW_COPY) in memory of its own, not in the table's buffer: export it
    /// with `zh_tensors_export`, which carries that memory's owner.
    pub copied: bool,
    /// Mapped with ZH_MAP_READONLY (or from a read-only table): the consumer must not write.
    pub readonly: bool,
}

impl zh_tensors {
    fn at(&self, index: usize) -> Outcome<&MappedTensor> {
        self.tensors.get(index).ok_or_else(|| {
            Failure::not_found(format!(
                "tensor index {index} is out of range ({} tensors)",
                self.tensors.len()
            ))
        })
    }
}

fn compile(spec: *const c_char, flags: u32) -> Outcome<zh_map> {
    // SAFETY: the callers' contracts: NUL-terminated or NULL.
    let spec = unsafe { text(spec, "spec") }?;
    if flags & !ALL_FLAGS != 0 {
        return Err(Failure::invalid(format!(
            "flags {flags:#x} has unknown bits"
        )));
    }
    let map = TensorMap::parse(spec)?;
    let names = map
        .names()
        .into_iter()
        .map(|n| CString::new(n).map_err(|_| Failure::invalid("a NUL in a tensor name")))
        .collect::<Outcome<Vec<_>>>()?;
    Ok(zh_map {
        map,
        options: MapOptions {
            readonly: flags & (ZH_MAP_READONLY | ZH_MAP_GUARD_CONST) != 0,
            allow_copy: flags & ZH_MAP_ALLOW_COPY != 0,
        },
        guard_const: flags & ZH_MAP_GUARD_CONST != 0,
        consumer: match flags & ZH_MAP_FOR_LIBTORCH {
            0 => Consumer::Honouring,
            _ => Consumer::Torch,
        },
        allow: Allowance {
            copy: flags & ZH_MAP_ALLOW_COPY != 0,
            // A guarded map checks afterwards that nothing wrote: the risk is covered.
            share_readonly: flags & (ZH_MAP_SHARE_READONLY | ZH_MAP_GUARD_CONST) != 0,
        },
        names: names.into(),
    })
}

pub(crate) fn apply(map: &zh_map, table: &zh_table, out: *mut *mut zh_tensors) -> Outcome {
    let mut tensors = table.table.map(&map.map, map.options, None)?;
    for tensor in &mut tensors {
        if let Plan::Copy(reason) = plan(&tensor.name, &tensor.view, map.consumer, map.allow)? {
            tensor.view = tensor.view.private_copy()?;
            tensor.copy = Some(reason);
        }
    }
    // On a device, fingerprinted on the stream the data is produced on.
    let watch = map
        .guard_const
        .then(|| WriteGuard::over_mapped(&table.table, &tensors, table.stream))
        .transpose()?;
    let made = zh_tensors {
        tensors,
        names: map.names.clone(),
        guard: watch,
    };
    give(out, made);
    Ok(())
}

/// Parses `spec` ("name: col, col; name2: col", see `zh_table_map`) once, with `flags` (0 or
/// an OR of `ZH_MAP_READONLY`, `ZH_MAP_ALLOW_COPY` and `ZH_MAP_GUARD_CONST`), for
/// `zh_map_apply` on many tables.
/// Free with `zh_map_free`.
///
/// # Safety
/// `spec` must be NUL-terminated or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_map_new(
    spec: *const c_char,
    flags: u32,
    out: *mut *mut zh_map,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        let map = compile(spec, flags)?;
        give(out, map);
        Ok(())
    })
}

/// Frees a map (NULL: nothing); tensors made with it live on.
///
/// # Safety
/// `map` must come from `zh_map_new` and not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn zh_map_free(map: *mut zh_map) {
    // SAFETY: per the contract.
    unsafe { release(map) }
}

/// Applies a map made by `zh_map_new` to `table`: the tensors in `*out`, as `zh_table_map`
/// gives them. Columns the map names must exist in the table, with one dtype per group.
///
/// # Safety
/// `map` and `table` must be live handles or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_map_apply(
    map: *const zh_map,
    table: *const zh_table,
    out: *mut *mut zh_tensors,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let map = unsafe { handle(map, "map") }?;
        // SAFETY: per the contract.
        let table = unsafe { handle(table, "table") }?;
        apply(map, table, out)
    })
}

/// Maps `table` by `spec` into `*out`: `zh_map_new` and `zh_map_apply` in one call. The spec
/// is groups separated by ';', each "name: column, column" (one tensor of those columns) or a
/// bare column (a tensor of its own name), in output order; `flags` is 0 or an OR of
/// `ZH_MAP_READONLY`, `ZH_MAP_ALLOW_COPY` and `ZH_MAP_GUARD_CONST`. Free with
/// `zh_tensors_free`.
///
/// Shapes and strides (in elements) of a group of k columns over n rows, S the pitch of a
/// component and D the distance between the group's consecutive columns (`zh_table_column_info`):
/// * one plain column: (n, 1), strides (1, S); k plain columns: (n, k), strides (1, D);
/// * one vector of R: (n, R), strides (1, S); k vectors: (n, k, R), strides (1, D, S);
/// * one R×C matrix: (n, R, C); k matrices (n, k, R, C), strides following the component
///   order (column-major: (…, S, R·S));
/// * k table scalars: (n, k) with row stride 0 (or a filled copy, with `ZH_MAP_ALLOW_COPY`).
///
/// Columns that are not evenly spaced cannot be strided views: an error naming them, or a
/// reported copy with `ZH_MAP_ALLOW_COPY`. Thread safety: any number of threads may map,
/// export from and read one table at once; writes (`zh_table_write_column`) must not overlap
/// with other use of the same column. `*out` and every tensor exported from it are the
/// caller's; each exported tensor keeps the table's memory alive on its own.
///
/// # Safety
/// `table` must be a live handle or NULL; `spec` NUL-terminated or NULL; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_map(
    table: *const zh_table,
    spec: *const c_char,
    flags: u32,
    out: *mut *mut zh_tensors,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let table = unsafe { handle(table, "table") }?;
        apply(&compile(spec, flags)?, table, out)
    })
}

/// Frees the tensors' handle (NULL: nothing); exported tensors live on.
///
/// # Safety
/// `tensors` must come from `zh_table_map` and not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_free(tensors: *mut zh_tensors) {
    // SAFETY: per the contract.
    unsafe { release(tensors) }
}

/// How many tensors the map gave (0 for NULL).
///
/// # Safety
/// `tensors` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_len(tensors: *const zh_tensors) -> usize {
    // SAFETY: per the contract.
    guarded(|| Ok(unsafe { handle(tensors, "tensors") }.map_or(0, |t| t.tensors.len())))
        .unwrap_or(0)
}

/// The name of tensor `index`, valid while the handle lives; NULL when out of range.
///
/// # Safety
/// `tensors` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_name(
    tensors: *const zh_tensors,
    index: usize,
) -> *const c_char {
    guarded(|| {
        // SAFETY: per the contract.
        Ok(unsafe { handle(tensors, "tensors") }
            .ok()
            .and_then(|t| t.names.get(index))
            .map_or(std::ptr::null(), |n| n.as_ptr()))
    })
    .unwrap_or(std::ptr::null())
}

/// True when tensor `index` is a copy (ZH_MAP_ALLOW_COPY), false for a view of the table.
///
/// # Safety
/// `tensors` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_copied(tensors: *const zh_tensors, index: usize) -> bool {
    guarded(|| {
        // SAFETY: per the contract.
        Ok(unsafe { handle(tensors, "tensors") }
            .ok()
            .and_then(|t| t.tensors.get(index))
            .is_some_and(|m| m.copied()))
    })
    .unwrap_or(false)
}

thread_local! {
    static COPY_REASON: std::cell::RefCell<CString> = std::cell::RefCell::default();
}

/// Why tensor `index` is a copy, in words (the same as Python's `CopyWarning`), or NULL when
/// it is a view of the table (or `tensors` or `index` is invalid). The string stays valid
/// until the calling thread's next call of this function.
///
/// # Safety
/// `tensors` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_copy_reason(
    tensors: *const zh_tensors,
    index: usize,
) -> *const c_char {
    guarded(|| {
        // SAFETY: per the contract.
        let reason = unsafe { handle(tensors, "tensors") }
            .ok()
            .and_then(|t| t.tensors.get(index))
            .and_then(|m| m.copy.as_ref());
        let Some(reason) = reason else {
            return Ok(std::ptr::null());
        };
        let text = CString::new(crate::wording::in_c_terms(reason.to_string()).replace('\0', " "))
            .unwrap_or_default();
        Ok(COPY_REASON
            .try_with(|cell| {
                let mut kept = cell.borrow_mut();
                *kept = text;
                kept.as_ptr()
            })
            .unwrap_or(std::ptr::null()))
    })
    .unwrap_or(std::ptr::null())
}

/// Exports tensor `index` as a DLPack 1.3 managed tensor (the caller owns it and calls its
/// deleter once; `at::fromDLPackVersioned` takes it over). Each call makes a new one over the
/// same memory.
///
/// # Safety
/// `tensors` must be a live handle or NULL; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_export(
    tensors: *const zh_tensors,
    index: usize,
    out: *mut *mut DLManagedTensorVersioned,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let mapped = unsafe { handle(tensors, "tensors") }?.at(index)?;
        let managed = export_versioned(
            &mapped.view,
            ExportOptions {
                is_copied: mapped.copied(),
            },
        )?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = managed.as_ptr() };
        Ok(())
    })
}

/// Describes tensor `index` in `*out` (pointer, shape, strides, dtype, device) without making
/// an owner: the memory stays the table's, so the description is only good while the table
/// (or a tensor exported from it) lives, and `shape`/`strides` while `tensors` does.
/// ZH_NOT_FOUND for an index out of range.
///
/// # Safety
/// `tensors` must be a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_view(
    tensors: *const zh_tensors,
    index: usize,
    out: *mut zh_tensor_view,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let mapped = unsafe { handle(tensors, "tensors") }?.at(index)?;
        let view = &mapped.view;
        let (dtype, device) = (view.dtype(), view.device());
        let described = zh_tensor_view {
            data: view.data_ptr().cast(),
            ndim: view.ndim() as i32,
            shape: view.shape().as_ptr(),
            strides: view.strides().as_ptr(),
            dtype_code: dtype.code as u8,
            dtype_bits: dtype.bits,
            dtype_lanes: dtype.lanes,
            device_type: device.kind as i32,
            device_id: device.id,
            copied: mapped.copied(),
            readonly: view.is_readonly(),
        };
        // SAFETY: checked non-NULL above.
        unsafe { *out = described };
        Ok(())
    })
}

/// Whether the columns behind `tensors` (mapped with `ZH_MAP_GUARD_CONST`) are still as they
/// were when mapped: ZH_OK, or ZH_READ_ONLY with a message naming the first column written and
/// listing every other. Call it after the consumer (the model) ran. `stream`: for a device
/// table, the stream the consumer's work was queued on (DLPack's numbering; the fingerprint
/// runs there and the host waits for it); 0 for a host table, which nothing may write during
/// the call. Tensors the map copied (`zh_tensors_copied`) are not the table's memory and are
/// not checked. ZH_INVALID_ARGUMENT when the map had no `ZH_MAP_GUARD_CONST`.
///
/// # Safety
/// `tensors` must be a live handle or NULL; a stream other than 0, 1 and 2 a live stream of
/// the table's device.
#[no_mangle]
pub unsafe extern "C" fn zh_tensors_verify_unwritten(
    tensors: *const zh_tensors,
    stream: usize,
) -> zh_status {
    guard(|| {
        // SAFETY: per the contract.
        let t = unsafe { handle(tensors, "tensors") }?;
        let watch = t.guard.as_ref().ok_or_else(|| {
            Failure::invalid("tensors were mapped without ZH_MAP_GUARD_CONST: nothing to verify")
        })?;
        let device = watch.device();
        Ok(watch.verify(crate::stream::work_stream(stream, device)?)?)
    })
}
