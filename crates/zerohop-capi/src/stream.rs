//! The CUDA stream a table's data is produced on, and maps applied for the stream that will
//! read them: the C face of what DLPack's `stream` argument does for Python consumers. The
//! rules are the core's (`zerohop::handoff`); this converts C's numbering (0: no stream) once.

use zerohop::handoff::{ConsumerStream, Stream};
use zerohop::{Device, DeviceKind};

use crate::map::{apply, zh_map, zh_tensors};
use crate::status::{guard, handle, handle_mut, out_param, zh_status, Failure, Outcome};
use crate::table::zh_table;

/// Sets the CUDA stream `table`'s data is produced on, in DLPack's numbering: 1 the legacy
/// default stream, 2 the per-thread default stream, any other value a `cudaStream_t` (or
/// `CUstream`) of the table's device. Tables made on a device start on the legacy stream, and
/// a row slice (`zh_table_rows`) starts on its table's. `zh_table_write_column` copies on this
/// stream, and `zh_map_apply_on_stream` orders a consumer's stream after it. 0 is refused (it
/// means no stream in DLPack, ambiguous on a device), as is any stream for a host table
/// (`ZH_INVALID_ARGUMENT`). Not to be called while another thread uses the same handle.
///
/// # Safety
/// `table` must be a live handle or NULL; a stream other than 1 and 2 must be a live stream
/// of the table's device for as long as the table uses it.
#[no_mangle]
pub unsafe extern "C" fn zh_table_set_stream(table: *mut zh_table, stream: usize) -> zh_status {
    guard(|| {
        // SAFETY: per the contract.
        let t = unsafe { handle_mut(table, "table") }?;
        let device = t.table.device();
        if device.kind != DeviceKind::Cuda {
            return Err(Failure::invalid(format!(
                "stream {stream}: the table is on {device}; only tables on a CUDA device have \
                 a stream"
            )));
        }
        t.stream = Stream::cuda(stream)?;
        Ok(())
    })
}

/// The stream `table`'s data is produced on, into `*out` (0 for a host table).
///
/// # Safety
/// `table` must be a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_get_stream(table: *const zh_table, out: *mut usize) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let t = unsafe { handle(table, "table") }?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = t.stream.raw() };
        Ok(())
    })
}

/// `zh_map_apply` for work queued on `stream` (DLPack's numbering, as `zh_table_set_stream`):
/// when `table` is on a CUDA device and `stream` is not its stream, `stream` waits for the work
/// queued on the table's stream so far (an event recorded there; the host does not wait), so
/// the tensors may be read on `stream` at once. For a host table `stream` must be 0.
///
/// # Safety
/// `map` and `table` must be live handles or NULL; `out` writable or NULL; `stream` a live
/// stream of the table's device (or 1 or 2).
#[no_mangle]
pub unsafe extern "C" fn zh_map_apply_on_stream(
    map: *const zh_map,
    table: *const zh_table,
    stream: usize,
    out: *mut *mut zh_tensors,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let map = unsafe { handle(map, "map") }?;
        // SAFETY: per the contract.
        let t = unsafe { handle(table, "table") }?;
        let device = t.table.device();
        let consumer = ConsumerStream::from_c(stream, device)?;
        t.table.ready_on(t.stream, consumer)?;
        apply(map, t, out)
    })
}

/// A C caller's stream for work on `device`: none (0) for host data, a named stream on a
/// device, by the core's rule.
pub(crate) fn work_stream(value: usize, device: Device) -> Outcome<Stream> {
    Ok(match ConsumerStream::from_c(value, device)? {
        ConsumerStream::On(stream) => Stream::on(stream),
        _ => Stream::HOST,
    })
}
