//! `zh_table`: an SoA table (every column padded to the alignment in one buffer) on host or
//! device memory, its columns exported through DLPack, and DLPack tensors written into them.

use std::ffi::{c_char, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop::dlpack::{export_versioned, import_all_versioned, import_versioned, ExportOptions};
use zerohop::memory::current_resource;
use zerohop::soa::{ColumnOptions, ColumnTable, SoaTable, Table};
use zerohop::{DType, Device, Owner, ReleaseCallback, Stream, TensorView};

use crate::layout::alignment_or_default;
use crate::resource::zh_resource;
use crate::schema::zh_schema;
use crate::status::{
    give, guard, handle, handle_mut, out_param, release, text, zh_status, Failure, Outcome,
};

/// A table (opaque): an SoA table (one buffer, every column padded to the alignment) or a
/// table of adopted columns (`zh_table_from_columns`: separate tensors, shared as they are).
/// The table itself is the core's `zerohop::soa::Table`; the handle adds the stream its data
/// is produced on.
pub struct zh_table {
    pub(crate) table: Table,
    /// The CUDA stream the data is produced on (the legacy default stream unless set); none
    /// for host tables. See `zh_table_set_stream`.
    pub(crate) stream: Stream,
}

impl zh_table {
    /// A handle for `table`, on the legacy default stream when its data is on a CUDA device.
    pub(crate) fn new(table: Table) -> Self {
        let stream = match table.device().kind {
            zerohop::DeviceKind::Cuda => Stream::LEGACY,
            _ => Stream::HOST,
        };
        zh_table { table, stream }
    }

    /// The SoA table, or ZH_UNSUPPORTED naming `what` for a table of adopted columns.
    pub(crate) fn soa(&self, what: &str) -> Outcome<&SoaTable> {
        self.table.as_soa().ok_or_else(|| Failure {
            status: zh_status::ZH_UNSUPPORTED,
            message: format!(
                "{what} needs an SoA table (one buffer); this table adopts separate columns \
                 (zh_table_from_columns): use zh_table_column or a map"
            ),
        })
    }

    /// Column `name` as a view of the table's memory.
    pub(crate) fn column(&self, name: &str) -> zerohop::Result<TensorView> {
        Ok(self.table.column(name, ColumnOptions::default())?.0)
    }
}

/// What gives a caller's memory back: `release(ctx)`, called once when the last table or
/// tensor over the memory dies, or as soon as the call that took it refuses. From the moment
/// this returns the memory belongs to the owner; a NULL `release` is refused before that.
///
/// # Safety
/// `release(ctx)` must be safe to call once, from any thread.
pub(crate) unsafe fn owner_of(release: zh_release_fn, ctx: *mut c_void) -> Outcome<Owner> {
    let release = release.ok_or_else(|| {
        Failure::invalid("release is NULL: pass the function that gives the memory back")
    })?;
    // SAFETY: the caller's contract on `release` and `ctx`.
    Ok(Arc::new(unsafe { ReleaseCallback::new(release, ctx) }))
}

/// A window of `table`'s rows (`window` makes it from the core table) as a handle of its own
/// in `*out`, produced on the same stream.
///
/// # Safety
/// `table` a live handle or NULL; `out` writable or NULL.
pub(crate) unsafe fn give_window(
    table: *const zh_table,
    out: *mut *mut zh_table,
    window: impl FnOnce(&Table) -> zerohop::Result<Table>,
) -> Outcome {
    out_param(out, "out")?;
    // SAFETY: per the contract.
    let t = unsafe { handle(table, "table") }?;
    give(
        out,
        zh_table {
            table: window(&t.table)?,
            stream: t.stream,
        },
    );
    Ok(())
}

/// What a table is: sizes, where its buffer lives.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zh_table_info {
    pub rows: usize,
    pub columns: usize,
    /// The start of the table's one buffer (a device address for device tables).
    pub data: *mut c_void,
    /// The buffer's size, padding included.
    pub nbytes: usize,
    /// The alignment every column start has.
    pub alignment: usize,
    /// DLPack device type (1: CPU, 2: CUDA, 3: CUDA host) and id.
    pub device_type: i32,
    pub device_id: i32,
}

/// A zero-filled table of `rows` rows with `schema`'s columns, each column starting on an
/// `alignment`-byte boundary (0: 128), in memory from `resource` (NULL: the current host
/// resource). A device resource gives a device table.
///
/// # Safety
/// `schema` and `resource` must be live handles (or NULL where allowed); `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_new(
    schema: *const zh_schema,
    rows: usize,
    alignment: usize,
    resource: *const zh_resource,
    out: *mut *mut zh_table,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let schema = unsafe { handle(schema, "schema") }?.build()?;
        let resource = if resource.is_null() {
            current_resource(Device::CPU).expect("the host always has a resource")
        } else {
            // SAFETY: per the contract.
            unsafe { handle(resource, "resource") }?.inner.clone()
        };
        let alignment = alignment_or_default(alignment);
        let table = SoaTable::with_options(schema, rows, alignment, resource)?;
        give(out, zh_table::new(table.into()));
        Ok(())
    })
}

/// Gives memory back to the program that allocated it: called once with the context the
/// program passed along with the memory.
pub type zh_release_fn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// A table over memory the caller allocated (a `cudaMalloc`'d or framework-pool block, a host
/// array, a memory-mapped file), laid out for `schema`, `rows` and `alignment` (0: 128) by the
/// CMS SoA rules (`zh_table_column_info` tells where each column is): nothing is copied and
/// zerohop allocates nothing for it. `device` is -1 for host memory, N for CUDA device N (the
/// driver must agree the pointer is on that device); any other number is ZH_INVALID_ARGUMENT.
///
/// Ownership of the memory passes to the table in every case: `release(ctx)` runs exactly once,
/// when the last table, slice or exported tensor over the memory is gone (on whichever thread
/// drops it), or before this call returns when anything is refused: memory too small for the
/// layout, not aligned for its widest element, NULL, on another device than `device` says, a
/// `device` that is neither -1 nor a CUDA number, a bad schema or out-parameter. `release`
/// must not be NULL (pass a function that does nothing to keep ownership yourself, and keep the
/// memory alive until it is called).
///
/// # Safety
/// `schema` a live handle; `data..data + bytes` memory on `device` that stays valid until
/// `release(ctx)` is called; `release(ctx)` safe to call from any thread; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_wrap(
    schema: *const zh_schema,
    rows: usize,
    alignment: usize,
    data: *mut c_void,
    bytes: usize,
    device: i32,
    release: zh_release_fn,
    ctx: *mut c_void,
    out: *mut *mut zh_table,
) -> zh_status {
    guard(|| {
        // SAFETY: the caller's contract on `release` and `ctx`.
        let owner = unsafe { owner_of(release, ctx) }?;
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let schema = unsafe { handle(schema, "schema") }?.build()?;
        let alignment = alignment_or_default(alignment);
        // Only -1 and CUDA numbers: any other number is refused, not taken for the host.
        let device = Device::from_allocator_index(device)?;
        // SAFETY: the caller's contract: the memory lives until `owner` releases it.
        let table =
            unsafe { SoaTable::wrap(schema, rows, alignment, data.cast(), bytes, device, owner) }?;
        give(out, zh_table::new(table.into()));
        Ok(())
    })
}

/// Frees a table handle (NULL: nothing). Tensors exported from it keep its memory alive until
/// their deleters run.
///
/// # Safety
/// `table` must come from `zh_table_new` and not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn zh_table_free(table: *mut zh_table) {
    // SAFETY: per the contract.
    unsafe { release(table) }
}

/// The table's sizes and where its buffer lives.
///
/// # Safety
/// `table` must be a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_get_info(
    table: *const zh_table,
    out: *mut zh_table_info,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        // SAFETY: per the contract.
        let t = &unsafe { handle(table, "table") }?.table;
        let info = zh_table_info {
            rows: t.len(),
            columns: t.column_names().len(),
            // Only an SoA table has one buffer.
            data: t
                .as_soa()
                .map_or(std::ptr::null_mut(), |s| s.buffer().as_ptr().cast()),
            nbytes: t.nbytes(),
            alignment: t.as_soa().map_or(0, |s| s.alignment()),
            device_type: t.device().kind as i32,
            device_id: t.device().id,
        };
        // SAFETY: checked non-NULL above.
        unsafe { *out = info };
        Ok(())
    })
}

/// Exports column `name` as a DLPack tensor sharing the table's memory: (rows,) for a column,
/// (rows, K) for a vector, (rows, R, C) for a matrix (strides in elements, the padding
/// between components included). The caller owns `*out` and must call its deleter once (a
/// consumer such as `at::fromDLPackVersioned` does that).
///
/// # Safety
/// `table` must be a live handle or NULL; `name` NUL-terminated or NULL; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_column(
    table: *const zh_table,
    name: *const c_char,
    out: *mut *mut DLManagedTensorVersioned,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let t = unsafe { handle(table, "table") }?;
        // SAFETY: per the contract.
        let name = unsafe { text(name, "column name") }?;
        let view = t.column(name)?;
        let managed = export_versioned(&view, ExportOptions::default())?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = managed.as_ptr() };
        Ok(())
    })
}

/// Exports the table's whole buffer (padding included) as a 1-D uint8 DLPack tensor of
/// `zh_table_info.nbytes` bytes: one owner for every view of the table. A framework that keeps
/// it (libtorch: one storage) can build each mapped tensor (`zh_tensors_view`) over it at an
/// offset, instead of taking one managed tensor per column. Read-only for a read-only table.
///
/// # Safety
/// `table` must be a live handle or NULL; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_export(
    table: *const zh_table,
    out: *mut *mut DLManagedTensorVersioned,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let t = unsafe { handle(table, "table") }?.soa("zh_table_export")?;
        let nbytes = t.layout().total_bytes;
        let mut whole = TensorView::from_buffer(t.buffer().clone(), DType::U8, &[nbytes as i64])?;
        if t.is_readonly() {
            whole = whole.into_readonly();
        }
        let managed = export_versioned(&whole, ExportOptions::default())?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = managed.as_ptr() };
        Ok(())
    })
}

/// Copies the DLPack tensor `src` into column `name` (a model's outputs landing in the
/// table): same dtype and shape as `zh_table_column` gives for that column, any strides on
/// the host; on a device, both compact. Takes ownership of `src` whatever the outcome: its
/// deleter has run when this returns.
///
/// # Safety
/// `table` must be a live handle or NULL, with no tensor of column `name` read or written
/// during the call; `src` a live managed tensor whose ownership passes here, or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_write_column(
    table: *mut zh_table,
    name: *const c_char,
    src: *mut DLManagedTensorVersioned,
) -> zh_status {
    guard(|| {
        // Take `src` first, so it is released even when the other arguments are bad.
        let source = match NonNull::new(src) {
            // SAFETY: per the contract; on error the import has run the deleter.
            Some(managed) => {
                unsafe { import_versioned(managed) }
                    .map_err(|e| Failure::invalid(format!("source tensor: {e}")))?
                    .view
            }
            None => return Err(Failure::invalid("source tensor is NULL")),
        };
        // SAFETY: per the contract.
        let handle = unsafe { handle_mut(table, "table") }?;
        // SAFETY: per the contract.
        let name = unsafe { text(name, "column name") }?;
        let target = handle.column(name)?;
        write(&target, &source, name, handle.stream)
    })
}

fn write(target: &TensorView, source: &TensorView, name: &str, stream: Stream) -> Outcome {
    if target.dtype() != source.dtype() || target.shape() != source.shape() {
        return Err(Failure::invalid(format!(
            "column {name:?} is {} {:?}; the tensor written into it is {} {:?}",
            target.dtype(),
            target.shape(),
            source.dtype(),
            source.shape()
        )));
    }
    if source.data_ptr() == target.data_ptr() && source.strides() == target.strides() {
        return Ok(()); // the column's own tensor, written in place already
    }
    let (a, b) = (byte_span(target), byte_span(source));
    if target.device() == source.device() && a.0 < b.1 && b.0 < a.1 {
        return Err(Failure {
            status: zh_status::ZH_UNSUPPORTED,
            message: format!("column {name:?}: the tensor written into it overlaps the column"),
        });
    }
    let host = |v: &TensorView| v.device().is_host_accessible();
    if host(target) && host(source) {
        // SAFETY: the contract of zh_table_write_column rules out concurrent access to the
        // column, and the two ranges do not overlap (checked above).
        return Ok(unsafe { target.copy_from(source) }?);
    }
    device_write(target, source, name, stream)
}

/// The bytes `[first, last)` a view's elements occupy (addresses, any stride signs).
fn byte_span(view: &TensorView) -> (usize, usize) {
    let item = view.dtype().itemsize() as i64;
    if view.numel() == 0 {
        let at = view.data_ptr() as usize;
        return (at, at);
    }
    let (mut low, mut high) = (0i64, 0i64);
    for (&n, &s) in view.shape().iter().zip(view.strides()) {
        let reach = (n - 1) * s * item;
        if reach < 0 {
            low += reach;
        } else {
            high += reach;
        }
    }
    let base = view.data_ptr() as i64;
    ((base + low) as usize, (base + high + item) as usize)
}

#[cfg(feature = "cuda")]
fn device_write(target: &TensorView, source: &TensorView, name: &str, stream: Stream) -> Outcome {
    use zerohop::cuda::{copy_async, synchronize};
    use zerohop::DeviceKind;
    if !target.is_contiguous() || !source.is_contiguous() {
        return Err(Failure {
            status: zh_status::ZH_UNSUPPORTED,
            message: format!(
                "column {name:?}: device writes need compact tensors on both sides (strides \
                 {:?} and {:?})",
                target.strides(),
                source.strides()
            ),
        });
    }
    let device = [target.device(), source.device()]
        .into_iter()
        .find(|d| d.kind == DeviceKind::Cuda)
        .map_or(0, |d| d.id);
    // A host table's write to or from a device (no stream) goes on the legacy stream.
    let stream = match stream.cuda_stream() {
        Some(_) => stream,
        None => Stream::LEGACY,
    };
    // SAFETY: both ranges hold nbytes bytes of live memory (validated views kept alive for
    // the call); the table's stream orders the copy after the work queued on it, and the
    // host waits for it before returning (the source is released then).
    unsafe {
        copy_async(
            device,
            target.data_ptr(),
            source.data_ptr(),
            target.nbytes(),
            stream,
        )?
    };
    synchronize(device, stream)?;
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn device_write(_: &TensorView, source: &TensorView, name: &str, _: Stream) -> Outcome {
    Err(Failure {
        status: zh_status::ZH_UNSUPPORTED,
        message: format!(
            "column {name:?}: a tensor on {} needs the cuda feature",
            source.device()
        ),
    })
}

/// A table whose columns are the `n` DLPack tensors `tensors`, named `names[i]`, adopted as
/// they are (a model's outputs, another framework's arrays): nothing is copied, each tensor's
/// memory stays its producer's and is released through its deleter when the last table, slice
/// or exported tensor using it is gone. Every tensor must have at least one axis, the same first
/// extent (the rows) and the same device; names must be distinct and non-empty.
///
/// Ownership of all `n` tensors passes here whatever the outcome: on any error every deleter
/// has run when this returns. One managed tensor passed twice (for two columns) is refused
/// (ZH_INVALID_ARGUMENT) before any is taken; its deleter then runs once, like every other's.
///
/// Such a table maps one column per tensor, with the shapes an SoA table gives the same spec:
/// a plain (n,) column as (n, 1), a vector (n, R) and a matrix (n, R, C) as they are. A group of
/// several columns has no strided form across allocations: ZH_INVALID_ARGUMENT, as for any
/// group no strides describe. It slices with `zh_table_rows`, exports and writes columns;
/// `zh_table_export` and `zh_table_column_info` (one-buffer notions) are ZH_UNSUPPORTED, and
/// `zh_table_get_info` gives `data` NULL and `nbytes` the columns' bytes.
///
/// # Safety
/// `names` an array of `n` NUL-terminated strings (or NULL); `tensors` an array of `n` live
/// managed tensors whose ownership passes here (entries may be NULL: an error); `out`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn zh_table_from_columns(
    names: *const *const c_char,
    tensors: *const *mut DLManagedTensorVersioned,
    n: usize,
    out: *mut *mut zh_table,
) -> zh_status {
    guard(|| {
        let given: &[*mut DLManagedTensorVersioned] = if tensors.is_null() {
            &[]
        } else {
            // SAFETY: per the contract, `tensors` holds `n` entries.
            unsafe { std::slice::from_raw_parts(tensors, n) }
        };
        // Every tensor is taken first, each distinct one once, so that all are released
        // whatever else is wrong.
        // SAFETY: per the contract: ownership of every entry passes here.
        let views = unsafe { import_all_versioned(given, "column tensor") };
        if tensors.is_null() && n > 0 {
            return Err(Failure::invalid("tensors is NULL"));
        }
        let views = views?;
        out_param(out, "out")?;
        if names.is_null() {
            return Err(Failure::invalid("names is NULL"));
        }
        let mut columns = Vec::with_capacity(n);
        for (i, view) in views.into_iter().enumerate() {
            // SAFETY: per the contract, `names` holds `n` NUL-terminated strings.
            let name = unsafe { text(*names.add(i), "column name") }?;
            columns.push((name.to_owned(), view));
        }
        let on_cuda = columns
            .first()
            .is_some_and(|(_, v)| v.device().kind == zerohop::DeviceKind::Cuda);
        // The legacy default stream on CUDA, none on the host.
        let stream = if on_cuda {
            Stream::LEGACY
        } else {
            Stream::HOST
        };
        give(
            out,
            zh_table::new(ColumnTable::new(columns, stream)?.into()),
        );
        Ok(())
    })
}
