//! Pickling tensors and tables (PEP 574): what travels for each object, and the object a
//! received state and its data rebuild. A face (Python's `__reduce_ex__` and its rebuild
//! functions) converts [`Value`]s and buffers and does nothing else.
//!
//! What travels, in order of preference:
//! - memory in a shared segment: a handle, never the bytes, at any protocol; the receiver on
//!   the same machine maps the same memory;
//! - protocol 5 and up: the data's span out of band, and the rebuilt object is a view of
//!   whatever buffer the receiver is handed, which it keeps alive;
//! - older protocols: the data's bytes in the stream (a compact copy for tensors);
//! - CUDA memory: a CUDA IPC handle to the same device memory; while an
//!   [`AcrossMachines`](super::AcrossMachines) block is open, where a handle would not open,
//!   its bytes staged through the host and put back on a device of the receiver (one copy
//!   each way, asked for by that setting).
//!
//! Other device data is refused: zerohop never copies it to the host behind the caller's back.

use std::sync::Arc;

use super::across::across_machines;
use super::{check_format, parse_dtype, schema_from_wire, schema_to_wire};
use super::{TableState, TensorState, WireColumn};
use crate::buffer::{Buffer, Owner};
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::memory::{SharedHandle, Stream};
use crate::soa::{Schema, SoaTable, Table};
use crate::tensor::TensorView;
use crate::value::{DictBuilder, Fields, Value};

/// The data that travels beside a state.
pub enum Outgoing {
    /// A shared-segment handle (a dict), in place of the bytes.
    Shared(Value),
    /// Host bytes the receiver views: out of band (a buffer the face keeps alive through
    /// `owner`) when `out_of_band`, else copied into the stream (writable when not `readonly`).
    Bytes {
        start: *mut u8,
        len: usize,
        owner: Owner,
        readonly: bool,
        out_of_band: bool,
    },
    /// Nothing: the state carries a CUDA IPC handle.
    Nothing,
    /// An Arrow table: the face pickles its record batch as its Arrow library does, and the
    /// receiver imports it again.
    ArrowBatch,
}

// SAFETY: `start` points into memory `owner` (Send + Sync) keeps alive; nothing else is held.
unsafe impl Send for Outgoing {}

/// What `__reduce_ex__` sends: `(rebuild, (FORMAT, state, data))`.
pub struct Reduced {
    pub state: Value,
    pub data: Outgoing,
}

fn refuse_device(what: &str, device: Device, how: &str) -> Error {
    Error::WrongType(format!(
        "cannot pickle a {what} on {device}: zerohop does not copy device memory to the host \
         behind your back. {how}"
    ))
}

fn tensor_state_value(state: &TensorState) -> DictBuilder {
    let mut d = DictBuilder::new();
    d.set("dtype", Value::str(state.dtype.to_string()))
        .set("shape", Value::ints(&state.shape))
        .set("strides", Value::ints(&state.strides))
        .set("offset", Value::count(state.offset))
        .set("nbytes", Value::count(state.nbytes))
        .set("readonly", Value::Bool(state.readonly))
        .set("is_copied", Value::Bool(state.is_copied));
    d
}

fn shared_value(h: SharedHandle) -> Value {
    DictBuilder::new()
        .set("shared", Value::str(h.name))
        .set("boot_id", Value::str(h.boot_id))
        .set("pid", Value::int(h.pid))
        .set("fd", Value::int(h.fd))
        .set("dev", Value::int(h.dev))
        .set("ino", Value::int(h.ino))
        .set("segment_bytes", Value::count(h.segment_len))
        .set("offset", Value::count(h.offset))
        .set("nbytes", Value::count(h.len))
        .build()
}

fn shared_handle_of(value: &Value) -> Result<SharedHandle> {
    let f = Fields::of(value, "pickled shared-memory handle")?;
    Ok(SharedHandle {
        name: f.str("shared", "a segment name")?.to_owned(),
        boot_id: f.str("boot_id", "a string")?.to_owned(),
        pid: f.int("pid", "a process id")?,
        fd: f.int("fd", "a descriptor number")?,
        dev: f.int("dev", "an int")?,
        ino: f.int("ino", "an int")?,
        segment_len: f.int("segment_bytes", "a byte count")?,
        offset: f.int("offset", "a byte offset")?,
        len: f.int("nbytes", "a byte count")?,
    })
}

/// The handle of `start..start + len` when it lies in a shared segment and may travel as one
/// (not while pickling for another machine, where no handle opens).
fn shared_handle(start: *const u8, len: usize) -> Result<Option<SharedHandle>> {
    if across_machines() || len == 0 {
        return Ok(None);
    }
    crate::memory::handle_for(start, len)
}

/// What a tensor sends: `view` (a copy when `is_copied`), produced on `stream`.
pub fn reduce_tensor(
    view: &TensorView,
    is_copied: bool,
    stream: Stream,
    protocol: i32,
) -> Result<Reduced> {
    let device = view.device();
    if device.kind == DeviceKind::Cuda {
        return reduce_cuda_tensor(view, is_copied, stream, protocol);
    }
    if !device.is_host_accessible() {
        return Err(refuse_device(
            "zerohop.Tensor",
            device,
            "Copy it to the host with the framework that made it (for example \
             zerohop.from_dlpack(torch.from_dlpack(t).cpu())), or share it within one process \
             through DLPack",
        ));
    }
    let (state, start) = TensorState::of(view, is_copied)?;
    let data = match shared_handle(start, state.nbytes)? {
        Some(handle) => Some(Outgoing::Shared(shared_value(handle))),
        // The whole span, strides and all: the receiver shares this memory.
        None if protocol >= 5 => Some(Outgoing::Bytes {
            start,
            len: state.nbytes,
            owner: view.owner().clone(),
            readonly: view.is_readonly(),
            out_of_band: true,
        }),
        None => None,
    };
    if let Some(data) = data {
        return Ok(Reduced {
            state: tensor_state_value(&state).build(),
            data,
        });
    }
    // In band the bytes are copied anyway: only the elements travel, compacted. The compact
    // copy is temporary, so it never travels as a handle (it may come from a shared current
    // resource, and would be freed before anyone attached).
    let compact = if view.is_contiguous() {
        view.clone()
    } else {
        view.contiguous_copy()?
    };
    let (compact_state, compact_start) = TensorState::of(&compact, is_copied)?;
    let compact_state = TensorState {
        readonly: view.is_readonly(),
        ..compact_state
    };
    Ok(Reduced {
        state: tensor_state_value(&compact_state).build(),
        data: Outgoing::Bytes {
            start: compact_start,
            len: compact_state.nbytes,
            owner: compact.owner().clone(),
            readonly: view.is_readonly(),
            out_of_band: false,
        },
    })
}

#[cfg(feature = "cuda")]
fn reduce_cuda_tensor(
    view: &TensorView,
    is_copied: bool,
    stream: Stream,
    protocol: i32,
) -> Result<Reduced> {
    let (state, start) = TensorState::of(view, is_copied)?;
    let mut dict = tensor_state_value(&state);
    let device = view.device().id;
    if across_machines() {
        dict.set("staged_from", Value::int(device));
        // SAFETY: the span of the tensor being pickled, which the caller holds for this call.
        let data = unsafe { staged(device, start, state.nbytes, stream, protocol) }?;
        return Ok(Reduced {
            state: dict.build(),
            data,
        });
    }
    // SAFETY: the span of a live tensor's elements on its device, produced on `stream`.
    let handle =
        unsafe { super::cuda_ipc::export(device, start as usize, state.nbytes.max(1), stream) }?;
    dict.set("cuda_ipc", handle);
    Ok(Reduced {
        state: dict.build(),
        data: Outgoing::Nothing,
    })
}

#[cfg(not(feature = "cuda"))]
fn reduce_cuda_tensor(view: &TensorView, _: bool, _: Stream, _: i32) -> Result<Reduced> {
    Err(Error::without_cuda(format!(
        "pickling data on {}",
        view.device()
    )))
}

/// `nbytes` of CUDA `device` memory at `start`, copied to the host once `stream`'s work
/// before it is done: data that travels as host bytes do (never a handle).
///
/// # Safety
/// `start..start + nbytes` must be live device memory for the duration of the call.
#[cfg(feature = "cuda")]
unsafe fn staged(
    device: i32,
    start: *const u8,
    nbytes: usize,
    stream: Stream,
    protocol: i32,
) -> Result<Outgoing> {
    // SAFETY: per this function's contract.
    let host = unsafe { super::host_copy(device, start, nbytes, stream) }?;
    let start = host.as_ptr();
    Ok(Outgoing::Bytes {
        start,
        len: host.len(),
        owner: Arc::new(host),
        readonly: true,
        out_of_band: protocol >= 5,
    })
}

/// What a table sends; `stream` is the one its data is produced on.
pub fn reduce_table(table: &Table, stream: Stream, protocol: i32) -> Result<Reduced> {
    let mut state = DictBuilder::new();
    state.set("storage", Value::str(table.kind()));
    let t = match table {
        Table::Soa(t) => t,
        #[cfg(feature = "arrow")]
        Table::Arrow(_) => {
            return Ok(Reduced {
                state: state.build(),
                data: Outgoing::ArrowBatch,
            })
        }
        Table::Columns(c) => {
            return Err(refuse_device(
                "zerohop.Table",
                c.device(),
                "Copy its columns to the host with the framework that made them and build a \
                 host table (zerohop.Table.from_tensors)",
            ))
        }
    };
    let device = t.device();
    if device.kind != DeviceKind::Cuda && !device.is_host_accessible() {
        return Err(refuse_device(
            "zerohop.Table",
            device,
            "table.to(\"cpu\") makes a host copy that pickles",
        ));
    }
    let wire_state = TableState::of(t);
    state
        .set("schema", schema_value(&wire_state.schema))
        .set("rows", Value::count(wire_state.rows))
        .set("alignment", Value::count(wire_state.alignment))
        .set("first_row", Value::count(wire_state.first_row))
        .set("len", Value::count(wire_state.len))
        .set("readonly", Value::Bool(wire_state.readonly))
        .set("nbytes", Value::count(wire_state.nbytes));
    let start = t.buffer().as_ptr();
    let data = if device.kind == DeviceKind::Cuda {
        cuda_table_data(
            &mut state,
            device.id,
            start,
            wire_state.nbytes,
            stream,
            protocol,
        )?
    } else {
        match shared_handle(start, wire_state.nbytes)? {
            Some(handle) => Outgoing::Shared(shared_value(handle)),
            None => Outgoing::Bytes {
                start,
                len: wire_state.nbytes,
                owner: Arc::new(t.buffer().clone()),
                readonly: t.is_readonly(),
                out_of_band: protocol >= 5,
            },
        }
    };
    Ok(Reduced {
        state: state.build(),
        data,
    })
}

/// A CUDA table's one buffer: by IPC handle, or staged for another machine.
#[cfg(feature = "cuda")]
fn cuda_table_data(
    state: &mut DictBuilder,
    device: i32,
    start: *mut u8,
    nbytes: usize,
    stream: Stream,
    protocol: i32,
) -> Result<Outgoing> {
    if across_machines() {
        state.set("staged_from", Value::int(device));
        // SAFETY: the whole buffer of the table being pickled, which the caller holds.
        return unsafe { staged(device, start, nbytes, stream, protocol) };
    }
    // SAFETY: the table's whole buffer is live device memory, produced on `stream`, held by
    // the table being pickled.
    let handle = unsafe { super::cuda_ipc::export(device, start as usize, nbytes.max(1), stream) }?;
    state.set("cuda_ipc", handle);
    Ok(Outgoing::Nothing)
}

#[cfg(not(feature = "cuda"))]
fn cuda_table_data(
    _: &mut DictBuilder,
    device: i32,
    _: *mut u8,
    _: usize,
    _: Stream,
    _: i32,
) -> Result<Outgoing> {
    Err(Error::without_cuda(format!(
        "pickling data on cuda:{device}"
    )))
}

/// Schema items as tuples: (name, dtype, kind, K or R, C, order), see [`WireColumn`].
fn schema_value(schema: &Schema) -> Value {
    Value::List(
        schema_to_wire(schema)
            .into_iter()
            .map(|c| {
                Value::List(vec![
                    Value::str(c.name),
                    Value::str(c.dtype),
                    Value::str(c.kind),
                    Value::count(c.a),
                    Value::count(c.b),
                    Value::str(c.order),
                ])
            })
            .collect(),
    )
}

fn schema_of(value: &Value) -> Result<Schema> {
    let Value::List(items) = value else {
        return Err(Error::WrongType(format!(
            "pickled table: schema must be a list, got {value}"
        )));
    };
    let mut columns = Vec::with_capacity(items.len());
    for item in items {
        let column = match item {
            Value::List(parts) => match parts.as_slice() {
                [Value::Str(name), Value::Str(dtype), Value::Str(kind), Value::Int(a), Value::Int(b), Value::Str(order)] => {
                    match (usize::try_from(*a), usize::try_from(*b)) {
                        (Ok(a), Ok(b)) => Some(WireColumn {
                            name: name.clone(),
                            dtype: dtype.clone(),
                            kind: kind.clone(),
                            a,
                            b,
                            order: order.clone(),
                        }),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        columns.push(column.ok_or_else(|| {
            Error::WrongType(format!(
                "pickled table: schema item {item} must be (name, dtype, kind, int, int, order)"
            ))
        })?);
    }
    schema_from_wire(columns)
}

/// The data that arrived beside a state, as the face received it.
pub enum Incoming {
    /// A shared-segment handle (a dict).
    Shared(Value),
    /// A buffer that keeps its exporter alive; `in_band` when it is the unpickler's own copy
    /// (data that came in the stream).
    Bytes {
        buffer: Buffer,
        writable: bool,
        in_band: bool,
    },
}

struct Received {
    buffer: Buffer,
    writable: bool,
    in_band: bool,
}

fn received(data: Incoming) -> Result<Received> {
    Ok(match data {
        Incoming::Shared(value) => {
            let attached = crate::memory::attach(&shared_handle_of(&value)?)?;
            Received {
                buffer: attached.buffer,
                writable: attached.writable,
                in_band: false,
            }
        }
        Incoming::Bytes {
            buffer,
            writable,
            in_band,
        } => Received {
            buffer,
            writable,
            in_band,
        },
    })
}

/// Where a state's data is: beside it (host bytes or a shared handle), staged from a CUDA
/// device of another machine, or in the producer's device memory (a CUDA IPC handle).
enum Route {
    Beside,
    Staged(i32),
    #[cfg(feature = "cuda")]
    CudaIpc(crate::cuda::ipc::IpcHandle),
}

impl Route {
    /// False for a CUDA IPC handle, which locates the data by itself.
    fn needs_data(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Route::CudaIpc(_) = self {
            return false;
        }
        true
    }

    fn of(f: &Fields<'_>) -> Result<Self> {
        if let Some(from) = f.optional("staged_from", |f| {
            f.int("staged_from", "a CUDA device number")
        })? {
            return Ok(Route::Staged(from));
        }
        match f.get("cuda_ipc") {
            None => Ok(Route::Beside),
            #[cfg(feature = "cuda")]
            Some(_) => Ok(Route::CudaIpc(super::cuda_ipc::handle_of(
                &f.dict("cuda_ipc")?,
            )?)),
            #[cfg(not(feature = "cuda"))]
            Some(_) => Err(Error::without_cuda("a pickled CUDA IPC handle")),
        }
    }
}

/// A rebuilt object: `copy_note` says why a copy was made when the received data had to be
/// realigned (a face reports it), `stream` the stream its data is ordered on when not the
/// default one.
pub struct Rebuilt<T> {
    pub value: T,
    pub is_copied: bool,
    pub copy_note: Option<String>,
    pub stream: Option<Stream>,
}

fn realigned(what: &str, at: *const u8, needed: usize) -> String {
    format!(
        "the received {what} starts at {at:p}, not aligned to the {needed} bytes its elements \
         need: copied"
    )
}

/// A received tensor state, checked; [`TensorWire::rebuild`] lays it over its data.
pub struct TensorWire {
    state: TensorState,
    route: Route,
}

impl TensorWire {
    /// Reads and checks `Tensor.__reduce_ex__`'s format and state.
    pub fn parse(format: &Value, state: &Value) -> Result<Self> {
        check_wire_format(format)?;
        let f = Fields::of(state, "pickled zerohop data")?;
        let state = TensorState {
            dtype: parse_dtype(f.str("dtype", "a dtype name")?)?,
            shape: f.ints("shape")?,
            strides: f.ints("strides")?,
            offset: f.int("offset", "a byte offset")?,
            nbytes: f.int("nbytes", "a byte count")?,
            readonly: f.bool("readonly")?,
            is_copied: f.bool("is_copied")?,
        };
        state.check()?;
        Ok(TensorWire {
            route: Route::of(&f)?,
            state,
        })
    }

    /// False when the state alone locates the data (a CUDA IPC handle).
    pub fn needs_data(&self) -> bool {
        self.route.needs_data()
    }

    /// The tensor over `data` (`None` when [`TensorWire::needs_data`] is false).
    pub fn rebuild(self, data: Option<Incoming>) -> Result<Rebuilt<TensorView>> {
        let state = self.state;
        match self.route {
            #[cfg(feature = "cuda")]
            Route::CudaIpc(handle) => {
                let buffer = super::cuda_ipc::import(&handle, state.nbytes.max(1), "tensor")?;
                let device = buffer.device();
                // SAFETY: `parse` checked that the layout from `offset` lies inside `nbytes`
                // bytes, which the mapping holds and the view keeps.
                let value = unsafe {
                    TensorView::from_raw_parts(
                        buffer.as_ptr().wrapping_add(state.offset),
                        state.dtype,
                        state.shape,
                        state.strides,
                        device,
                        Arc::new(buffer),
                        state.readonly,
                    )
                }?;
                // The import made the legacy stream wait on the producer's event.
                Ok(Rebuilt {
                    value,
                    is_copied: state.is_copied,
                    copy_note: None,
                    stream: Some(crate::cuda::LEGACY_STREAM),
                })
            }
            Route::Staged(from) => {
                let host = received(need(data)?)?.buffer;
                let value = staged_tensor(&state, &host, from)?;
                Ok(Rebuilt {
                    value,
                    is_copied: true,
                    copy_note: None,
                    stream: None,
                })
            }
            Route::Beside => {
                let Received {
                    buffer, writable, ..
                } = received(need(data)?)?;
                let at = buffer.as_ptr();
                let (value, copied) = state.view_over(buffer, writable)?;
                Ok(Rebuilt {
                    value,
                    is_copied: state.is_copied || copied,
                    copy_note: copied.then(|| realigned("tensor", at, state.dtype.alignment())),
                    stream: None,
                })
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn staged_tensor(state: &TensorState, host: &Buffer, from: i32) -> Result<TensorView> {
    state.view_on_device(host, super::receiving_device(from)?)
}

#[cfg(not(feature = "cuda"))]
fn staged_tensor(_: &TensorState, _: &Buffer, from: i32) -> Result<TensorView> {
    Err(Error::without_cuda(format!("data staged from cuda:{from}")))
}

#[cfg(feature = "cuda")]
fn staged_table(state: TableState, host: &Buffer, from: i32) -> Result<SoaTable> {
    state.table_on_device(host, super::receiving_device(from)?)
}

#[cfg(not(feature = "cuda"))]
fn staged_table(_: TableState, _: &Buffer, from: i32) -> Result<SoaTable> {
    Err(Error::without_cuda(format!("data staged from cuda:{from}")))
}

fn need(data: Option<Incoming>) -> Result<Incoming> {
    data.ok_or_else(|| {
        Error::WrongType(
            "pickled zerohop data must come with a bytes-like buffer or a shared-memory \
             handle, got None"
                .into(),
        )
    })
}

fn check_wire_format(format: &Value) -> Result<()> {
    let number = match format {
        Value::Int(n) => u32::try_from(*n).ok(),
        _ => None,
    };
    check_format(number, &format.to_string())
}

/// A received table state, checked; an Arrow table is rebuilt by the face's Arrow import.
pub enum TableWire {
    Arrow,
    Soa(Box<SoaWire>),
}

pub struct SoaWire {
    state: TableState,
    route: Route,
}

impl TableWire {
    /// Reads and checks `Table.__reduce_ex__`'s format and state.
    pub fn parse(format: &Value, state: &Value) -> Result<Self> {
        check_wire_format(format)?;
        let f = Fields::of(state, "pickled zerohop data")?;
        match f.str("storage", "a storage kind")? {
            "soa" => {}
            "arrow" => return Ok(TableWire::Arrow),
            other => {
                return Err(Error::Wire(format!(
                    "pickled table: storage {other:?} must be 'soa' or 'arrow'"
                )))
            }
        }
        let state = TableState {
            schema: schema_of(f.required("schema")?)?,
            rows: f.int("rows", "a row count")?,
            alignment: f.int("alignment", "a power of two")?,
            first_row: f.int("first_row", "a row number")?,
            len: f.int("len", "a row count")?,
            readonly: f.bool("readonly")?,
            nbytes: f.int("nbytes", "a byte count")?,
        };
        state.check()?;
        Ok(TableWire::Soa(Box::new(SoaWire {
            route: Route::of(&f)?,
            state,
        })))
    }
}

impl SoaWire {
    /// False when the state alone locates the data (a CUDA IPC handle).
    pub fn needs_data(&self) -> bool {
        self.route.needs_data()
    }

    /// The table over `data` (`None` when [`SoaWire::needs_data`] is false).
    pub fn rebuild(self, data: Option<Incoming>) -> Result<Rebuilt<SoaTable>> {
        let state = self.state;
        let done = |value, copy_note| Rebuilt {
            value,
            is_copied: false,
            copy_note,
            stream: None,
        };
        match self.route {
            #[cfg(feature = "cuda")]
            Route::CudaIpc(handle) => {
                let buffer = super::cuda_ipc::import(&handle, state.nbytes.max(1), "table")?;
                // The import made the legacy stream wait on the producer's event. The buffer
                // is the span the handle covers (at least one byte): the table lies over it.
                let readonly = state.readonly;
                Ok(done(state.laid_over(buffer, readonly)?, None))
            }
            Route::Staged(from) => {
                let host = received(need(data)?)?.buffer;
                Ok(done(staged_table(state, &host, from)?, None))
            }
            Route::Beside => {
                let Received {
                    buffer,
                    writable,
                    in_band,
                } = received(need(data)?)?;
                let at = buffer.as_ptr();
                let widest = state.element_alignment();
                let (table, copied) = state.table_over(buffer, writable, in_band)?;
                // Data that came in band is the unpickler's own copy: one more is not news.
                let note = (copied && !in_band).then(|| realigned("table", at, widest));
                Ok(done(table, note))
            }
        }
    }
}
