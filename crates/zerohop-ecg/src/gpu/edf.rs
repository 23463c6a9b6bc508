//! The EDF/BDF reader onto a CUDA device: the file's data records go through pinned buffers
//! into device memory as they are (`staging`), a kernel scales the chosen signals into the
//! float32 columns of a zerohop table there (`edf_kernels.cu`, bitwise the CPU reader's
//! values), and only the annotation signal's bytes come back to be parsed on the host.
//!
//! An EDF+D file whose records must be laid out around gaps is read by the CPU reader and
//! its table copied over once; the report says so.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use zerohop::cuda::synchronize;
use zerohop::soa::{SoaTable, SOA_DEFAULT_ALIGNMENT};
use zerohop::{Buffer, Stream};

use super::module::PerDevice;
use super::{arg, device_resource, download, launch};
use crate::edf::{open_edf, read_opened, ChunkResult, Continuity, Plan, Recording};
use crate::error::Result;

const SOURCE: &str = include_str!("edf_kernels.cu");
/// Threads per block (as in edf_kernels.cu).
const THREADS: u32 = 256;

struct EdfKernels {
    scale: usize,
    gather: usize,
}

static LOADED: PerDevice<EdfKernels> = PerDevice::new();

fn kernels(device: i32) -> Result<Arc<EdfKernels>> {
    LOADED.get(device, SOURCE, |function| {
        Ok(EdfKernels {
            scale: function("edf_scale")?,
            gather: function("edf_gather_bytes")?,
        })
    })
}

/// Launches `function` with one thread per item of `items`.
///
/// # Safety
/// As [`launch`]: `args` are the kernel's, and what it touches is valid on this device.
unsafe fn launch_over(
    function: usize,
    items: u64,
    stream: Stream,
    args: &mut [*mut std::ffi::c_void],
) -> Result<()> {
    // SAFETY: per this function's contract.
    unsafe {
        launch(
            function,
            items.div_ceil(u64::from(THREADS)),
            THREADS,
            0,
            stream,
            args,
        )
    }
}

/// A recording read onto the device, and how.
pub struct DeviceEdf {
    /// Its table is in the device's memory.
    pub recording: Recording,
    /// Bytes of data records moved to the device.
    pub bytes: usize,
    /// Why the file was read on the host and copied over (None: it was not).
    pub fallback: Option<String>,
    /// Wall seconds of each step, in order.
    pub timings: Vec<(&'static str, f64)>,
}

/// Reads the chosen signals of an EDF/BDF file ([`crate::edf::read_edf`]'s leads) into a
/// table of float32 columns in `device`'s memory (its current zerohop resource, plain device
/// memory otherwise), ready when this returns; `stream` orders the work with the caller's.
pub fn read_edf_cuda(
    path: &Path,
    leads: &[String],
    device: i32,
    stream: Stream,
) -> Result<DeviceEdf> {
    let mut clock = Instant::now();
    let mut timings = Vec::new();
    let mut lap = |name: &'static str| {
        let now = Instant::now();
        timings.push((name, (now - clock).as_secs_f64()));
        clock = now;
    };
    let opened = open_edf(path)?;
    let resource = device_resource(device)?;
    if opened.header.continuity == Continuity::Discontinuous {
        let variant = opened.header.variant();
        let mut recording = read_opened(opened, path, leads)?;
        recording.table = recording.table.copy_to(resource, stream)?;
        synchronize(device, stream)?;
        lap("host read + copy to device");
        return Ok(DeviceEdf {
            recording,
            bytes: 0,
            fallback: Some(format!(
                "{variant}: its records are laid out around their gaps on the host"
            )),
            timings,
        });
    }
    let file = opened.file;
    let plan = Plan::new(
        opened.header,
        leads,
        opened.len,
        &path.display().to_string(),
    )?;
    let k = kernels(device)?;
    let record_bytes = plan.header.record_bytes();
    let bytes = plan.records as usize * record_bytes;
    let data = Buffer::allocate(resource.clone(), bytes, 256, stream)?;
    // The reading threads copy on their own streams: whatever `stream` still does with memory
    // the pool just handed out must be over first.
    synchronize(device, stream)?;
    super::staging::upload_file(
        &file,
        path,
        plan.header.header_bytes as u64,
        bytes,
        device,
        data.as_ptr() as u64,
    )?;
    lap("read + copy to device");

    // SAFETY: the scale kernel writes every row of every column below (one thread per
    // row), or the table is dropped unread on an error.
    let table = unsafe {
        SoaTable::new_uninit_in(
            plan.schema()?,
            plan.rows,
            SOA_DEFAULT_ALIGNMENT,
            resource.clone(),
            stream,
        )
    }?;
    let counters = Buffer::allocate(resource.clone(), 8 * plan.chosen.len(), 256, stream)?;
    // SAFETY: the counters' 8 × chosen bytes on this device, zeroed before the kernels add.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            counters.as_ptr() as u64,
            0,
            8 * plan.chosen.len(),
            stream.raw() as _,
        )
    }
    .map_err(|e| super::cuda_error("memset", e))?;
    let width = plan.header.format.width() as u32;
    for (column, (&s, scale)) in plan.chosen.iter().zip(plan.scales()).enumerate() {
        let signal = &plan.header.signals[s];
        let out = table.column_view(&plan.names[column])?.data_ptr() as u64;
        let (mut dp, mut rb, mut off, mut per, mut w, mut n) = (
            data.as_ptr() as u64,
            record_bytes as u64,
            signal.offset as u64,
            plan.per_record as u64,
            width,
            plan.rows as u64,
        );
        let (mut gain, mut zero, mut low, mut high) = scale;
        let (mut op, mut cp) = (out, counters.as_ptr() as u64 + 8 * column as u64);
        // SAFETY: edf_scale reads records × record_bytes bytes of `data` (the uploaded
        // records; every read lies inside: offset + per_record × width ≤ record_bytes), writes
        // `rows` floats of the column and adds to its counter, all on this device.
        unsafe {
            launch_over(
                k.scale,
                plan.rows as u64,
                stream,
                &mut [
                    arg(&mut dp),
                    arg(&mut rb),
                    arg(&mut off),
                    arg(&mut per),
                    arg(&mut w),
                    arg(&mut n),
                    arg(&mut gain),
                    arg(&mut zero),
                    arg(&mut low),
                    arg(&mut high),
                    arg(&mut op),
                    arg(&mut cp),
                ],
            )?
        };
    }
    let at_limits: Vec<u64> =
        download(device, counters.as_ptr() as u64, plan.chosen.len(), stream)?;
    lap("scale on device");
    let annotations = gather_annotations(&plan, &k, &data, record_bytes, device, stream)?;
    drop(data);
    lap("annotations to host");
    let mut chunk = ChunkResult {
        starts: vec![None; plan.records as usize],
        annotations: Vec::new(),
        at_limits,
    };
    if let Some((bytes, len)) = annotations {
        // Each record's annotation bytes sit at the same offsets as in the file, relative to
        // the first annotation signal: parse them as a record of those signals alone.
        let first = plan.header.signals[plan.annotation_signals[0]].offset;
        let mut record = vec![0u8; record_bytes];
        for (r, part) in bytes.chunks_exact(len).enumerate() {
            record[first..first + len].copy_from_slice(part);
            plan.annotations_of(&record, r as u64, &mut chunk, r)?;
        }
    }
    let recording = plan.finish(table, vec![chunk])?;
    Ok(DeviceEdf {
        recording,
        bytes,
        fallback: None,
        timings,
    })
}

/// The annotation signals' bytes of every record (they are adjacent in a record when there
/// are several: the span from the first to the end of the last), gathered on the device and
/// copied back; None when the file has none.
fn gather_annotations(
    plan: &Plan,
    k: &EdfKernels,
    data: &Buffer,
    record_bytes: usize,
    device: i32,
    stream: Stream,
) -> Result<Option<(Vec<u8>, usize)>> {
    let (Some(&first), Some(&last)) = (
        plan.annotation_signals.first(),
        plan.annotation_signals.last(),
    ) else {
        return Ok(None);
    };
    let width = plan.header.format.width();
    let start = plan.header.signals[first].offset;
    let end =
        plan.header.signals[last].offset + plan.header.signals[last].samples_per_record * width;
    let len = end - start;
    let total = len * plan.records as usize;
    if total == 0 {
        return Ok(None);
    }
    let out = Buffer::allocate(device_resource(device)?, total, 256, stream)?;
    let (mut dp, mut rb, mut off, mut l, mut t, mut op) = (
        data.as_ptr() as u64,
        record_bytes as u64,
        start as u64,
        len as u64,
        total as u64,
        out.as_ptr() as u64,
    );
    // SAFETY: edf_gather_bytes reads `len` bytes at `start` of each uploaded record (inside
    // it) and writes `total` bytes of `out`, on this device.
    unsafe {
        launch_over(
            k.gather,
            total as u64,
            stream,
            &mut [
                arg(&mut dp),
                arg(&mut rb),
                arg(&mut off),
                arg(&mut l),
                arg(&mut t),
                arg(&mut op),
            ],
        )?
    };
    let bytes: Vec<u8> = download(device, out.as_ptr() as u64, total, stream)?;
    Ok(Some((bytes, len)))
}
