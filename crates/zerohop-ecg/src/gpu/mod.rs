//! The segmentation stages on a CUDA device (feature `cuda`): the kernels in `kernels.cu`,
//! compiled once per device by NVRTC and launched through the driver on the caller's stream.
//! Results are bitwise identical to the CPU stages (see the kernels' notes); every output is a
//! device tensor from the device's current zerohop resource (plain device memory otherwise).
//!
//! What crosses between host and device: the signal once (unless it is already on the
//! device), the wavelet's taps, and per compaction one small array of block counts down and
//! their offsets back up — a few kilobytes against the signal's megabytes.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys};
use zerohop::cuda::{copy_async, synchronize, CudaDeviceResource, TimingEvent, CUDA_ALIGNMENT};
use zerohop::{Buffer, DType, Device, DeviceKind, Stream, TensorView};

use crate::error::{invalid, Result};
use crate::segment::{ricker, Params, Segmentation};

mod adaptive;
pub mod csv;
pub mod edf;
mod module;
pub mod ptx_cache;
mod staging;

const SOURCE: &str = include_str!("kernels.cu");
/// Threads per block and elements per thread of the compaction kernels (as in kernels.cu).
const THREADS: u32 = 256;
const ITEMS: u64 = 8;
/// Shared memory a block may use without opting in.
const SHARED_LIMIT: usize = 48 << 10;

/// The loaded kernels of one device (function handles as integers: they are plain driver
/// handles, valid in the device's primary context for the life of the process).
struct Kernels {
    curvature: usize,
    maxima_shared: usize,
    maxima_global: usize,
    count: usize,
    scatter: usize,
    lengths: usize,
    embed: usize,
    squared_slope: usize,
    integrate: usize,
    gather_shifted: usize,
    locate_peaks: usize,
}

static LOADED: module::PerDevice<Kernels> = module::PerDevice::new();

fn cuda_error(what: &str, err: impl std::fmt::Debug) -> crate::error::EcgError {
    invalid(&format!("CUDA {what}"), format!("{err:?}"))
}

/// Compiles and loads the kernels for `device` once.
fn kernels(device: i32) -> Result<Arc<Kernels>> {
    LOADED.get(device, SOURCE, |function| {
        Ok(Kernels {
            curvature: function("curvature")?,
            maxima_shared: function("local_maxima_shared")?,
            maxima_global: function("local_maxima_global")?,
            count: function("count_kept")?,
            scatter: function("scatter_kept")?,
            lengths: function("lengths_and_keep")?,
            embed: function("embed")?,
            squared_slope: function("squared_slope")?,
            integrate: function("integrate")?,
            gather_shifted: function("gather_shifted")?,
            locate_peaks: function("locate_peaks")?,
        })
    })
}

/// A kernel argument: the address of a value the launch copies.
fn arg<T>(value: &mut T) -> *mut c_void {
    value as *mut T as *mut c_void
}

/// Launches `function` on `blocks` blocks of `threads` threads.
///
/// # Safety
/// `args` must match the kernel's parameters in number, order and type, and every pointer
/// among them must be device memory the kernel may access as it does.
unsafe fn launch(
    function: usize,
    blocks: u64,
    threads: u32,
    shared: usize,
    stream: Stream,
    args: &mut [*mut c_void],
) -> Result<()> {
    let blocks =
        u32::try_from(blocks.max(1)).map_err(|_| invalid("CUDA launch", "too many blocks"))?;
    // SAFETY: per the caller's contract; the stream is the caller's handle.
    unsafe {
        result::launch_kernel(
            function as sys::CUfunction,
            (blocks, 1, 1),
            (threads, 1, 1),
            shared as u32,
            stream.raw() as sys::CUstream,
            args,
        )
    }
    .map_err(|e| cuda_error("kernel launch", e))
}

/// The device's current zerohop resource, or plain device memory.
fn device_resource(device: i32) -> Result<Arc<dyn zerohop::MemoryResource>> {
    Ok(
        match zerohop::memory::current_resource(Device::cuda(device)) {
            Some(r) => r,
            None => Arc::new(CudaDeviceResource::new(device)?),
        },
    )
}

/// A fresh device tensor of `len` elements from the device's current resource.
fn device_tensor(device: i32, dtype: DType, len: usize, stream: Stream) -> Result<TensorView> {
    let resource = device_resource(device)?;
    let bytes = len * dtype.itemsize();
    let buffer = Buffer::allocate(resource, bytes, CUDA_ALIGNMENT, stream)?;
    Ok(TensorView::from_buffer(buffer, dtype, &[len as i64])?)
}

fn ptr(view: &TensorView) -> u64 {
    view.data_ptr() as u64
}

/// Copies `len` elements of `T` from device memory into a host vector (waits for them).
fn download<T: Copy + Default>(
    device: i32,
    src: u64,
    len: usize,
    stream: Stream,
) -> Result<Vec<T>> {
    let mut out = vec![T::default(); len];
    // SAFETY: `src` holds `len` elements of T on the device (the caller's buffer); `out` is
    // host memory of the same size; the copy completes before `out` is read (synchronize).
    unsafe {
        copy_async(
            device,
            out.as_mut_ptr() as *mut u8,
            src as *const u8,
            len * std::mem::size_of::<T>(),
            stream,
        )?
    };
    synchronize(device, stream)?;
    Ok(out)
}

/// Copies host elements into a fresh device tensor.
fn upload<T: Copy>(device: i32, values: &[T], dtype: DType, stream: Stream) -> Result<TensorView> {
    let out = device_tensor(device, dtype, values.len(), stream)?;
    // SAFETY: `out` holds `values.len()` elements; the host slice stays alive until the
    // stream is synchronised below (pageable sources are staged by the driver anyway).
    unsafe {
        copy_async(
            device,
            out.data_ptr(),
            values.as_ptr() as *const u8,
            std::mem::size_of_val(values),
            stream,
        )?
    };
    synchronize(device, stream)?;
    Ok(out)
}

/// Order-keeping compaction of `m` flags (mode 0: rising edges; 1: set flags): the device
/// offsets of each block's output and the total kept.
fn block_offsets(
    k: &Kernels,
    device: i32,
    flags: u64,
    m: i64,
    mode: i32,
    stream: Stream,
) -> Result<(TensorView, usize, u64)> {
    let per_block = THREADS as u64 * ITEMS;
    let blocks = (m.max(0) as u64).div_ceil(per_block).max(1);
    let counts = device_tensor(device, DType::U64, blocks as usize, stream)?;
    let (mut f, mut n, mut mo, mut c) = (flags, m, mode, ptr(&counts));
    // SAFETY: count_kept(flags: u8*, m: i64, mode: i32, counts: u64*), with `blocks` counts.
    unsafe {
        launch(
            k.count,
            blocks,
            THREADS,
            0,
            stream,
            &mut [arg(&mut f), arg(&mut n), arg(&mut mo), arg(&mut c)],
        )?
    };
    let counts = download::<u64>(device, ptr(&counts), blocks as usize, stream)?;
    let mut offsets = Vec::with_capacity(counts.len());
    let mut total = 0u64;
    for c in counts {
        offsets.push(total);
        total += c;
    }
    let offsets = upload(device, &offsets, DType::U64, stream)?;
    Ok((offsets, total as usize, blocks))
}

/// One order-keeping compaction: `m` flags and the device offsets of each block's output.
struct Compaction {
    flags: u64,
    m: i64,
    offsets: u64,
    blocks: u64,
}

impl Compaction {
    /// Writes the kept elements in order: mode 0 their indices to `out.0`; mode 1 `src.0[i]`
    /// and `src.1[i]` to `out.0` and `out.1`.
    ///
    /// # Safety
    /// The outputs must hold as many elements as the offsets counted, the sources `m` (mode 1),
    /// all on the kernels' device.
    unsafe fn scatter(
        &self,
        k: &Kernels,
        stream: Stream,
        mode: i32,
        src: (u64, u64),
        out: (u64, u64),
    ) -> Result<()> {
        let (mut flags, mut m, mut mode, mut offsets) = (self.flags, self.m, mode, self.offsets);
        let (mut src_a, mut src_b, mut out_a, mut out_b) = (src.0, src.1, out.0, out.1);
        // SAFETY: scatter_kept(flags: u8*, m: i64, mode: i32, offsets: u64*, src_a, src_b:
        // i64*, out_a, out_b: i64*), sized per the caller's contract.
        unsafe {
            launch(
                k.scatter,
                self.blocks,
                THREADS,
                0,
                stream,
                &mut [
                    arg(&mut flags),
                    arg(&mut m),
                    arg(&mut mode),
                    arg(&mut offsets),
                    arg(&mut src_a),
                    arg(&mut src_b),
                    arg(&mut out_a),
                    arg(&mut out_b),
                ],
            )
        }
    }
}

/// Checks the signal's form: compact 1-d float32, on the host or on `cuda:device`.
fn check_signal(signal: &TensorView, device: i32) -> Result<usize> {
    if signal.dtype() != DType::F32 || signal.ndim() != 1 || !signal.is_contiguous() {
        return Err(invalid(
            "signal",
            format!(
                "must be a compact 1-d float32 tensor, got {} {:?} strides {:?}",
                signal.dtype(),
                signal.shape(),
                signal.strides()
            ),
        ));
    }
    let d = signal.device();
    if d.kind == DeviceKind::Cuda && d != Device::cuda(device) {
        return Err(invalid(
            "signal",
            format!("is on {d}; segmentation runs on cuda:{device}"),
        ));
    }
    Ok(signal.shape()[0] as usize)
}

/// Stage timings from CUDA events: each lap records an event on the stream and nothing waits
/// until `finish`, so the host keeps queueing work (the stages that read a count back still
/// wait for their own kernels). The scratch tensors that queued kernels may still read are
/// held until then.
struct Laps {
    device: i32,
    stream: Stream,
    start: TimingEvent,
    marks: Vec<(&'static str, TimingEvent)>,
    scratch: Vec<TensorView>,
}

impl Laps {
    fn new(device: i32, stream: Stream) -> Result<Self> {
        Ok(Laps {
            device,
            stream,
            start: TimingEvent::record(device, stream)?,
            marks: Vec::new(),
            scratch: Vec::new(),
        })
    }
    fn lap(&mut self, name: &'static str) -> Result<()> {
        let mark = TimingEvent::record(self.device, self.stream)?;
        self.marks.push((name, mark));
        Ok(())
    }
    /// Keeps `view` alive until the stream has finished with it (`finish`).
    fn hold(&mut self, view: TensorView) {
        self.scratch.push(view);
    }
    /// Waits for the last stage and returns each stage's GPU seconds, in order.
    fn finish(mut self) -> Result<Vec<(&'static str, f64)>> {
        synchronize(self.device, self.stream)?;
        self.scratch.clear();
        let mut timings = Vec::with_capacity(self.marks.len());
        let mut previous = &self.start;
        for (name, mark) in &self.marks {
            timings.push((*name, previous.seconds_until(mark)?));
            previous = mark;
        }
        Ok(timings)
    }
}

/// The signal on the device: shared when it is there already, else copied over once.
fn signal_on_device(
    signal: &TensorView,
    n: usize,
    device: i32,
    stream: Stream,
) -> Result<TensorView> {
    if signal.device().kind == DeviceKind::Cuda {
        return Ok(signal.clone());
    }
    let x = device_tensor(device, DType::F32, n, stream)?;
    // SAFETY: `x` holds n floats; the host signal holds n floats and outlives the copy (the
    // caller's next lap synchronises the stream before the signal can be dropped).
    unsafe { copy_async(device, x.data_ptr(), signal.data_ptr(), n * 4, stream)? };
    Ok(x)
}

/// The Ricker curvature of the `n` samples of `x`, as the CPU computes it.
fn curvature_on(
    k: &Kernels,
    laps: &mut Laps,
    x: &TensorView,
    n: usize,
    ricker_width: usize,
) -> Result<TensorView> {
    let (device, stream) = (laps.device, laps.stream);
    let taps: Vec<f32> = ricker(ricker_width).into_iter().rev().collect();
    let rev = upload(device, &taps, DType::F32, stream)?;
    let curvature = device_tensor(device, DType::F32, n, stream)?;
    let (mut xp, mut rp, mut w, mut nn, mut cp) = (
        ptr(x),
        ptr(&rev),
        ricker_width as i32,
        n as i64,
        ptr(&curvature),
    );
    // SAFETY: curvature(x: f32*, rev: f32*, w: i32, n: i64, out: f32*) over n outputs.
    unsafe {
        launch(
            k.curvature,
            (n as u64).div_ceil(THREADS as u64),
            THREADS,
            0,
            stream,
            &mut [
                arg(&mut xp),
                arg(&mut rp),
                arg(&mut w),
                arg(&mut nn),
                arg(&mut cp),
            ],
        )?
    };
    laps.hold(rev);
    Ok(curvature)
}

/// Flags `p` where the maximum of `values[p .. p + window]` is its centre (`local_maxima`).
fn maxima_on(
    k: &Kernels,
    device: i32,
    values: &TensorView,
    n: usize,
    window: usize,
    stream: Stream,
) -> Result<(TensorView, usize)> {
    let outputs = n + 1 - window;
    let flags = device_tensor(device, DType::U8, outputs, stream)?;
    let shared = (THREADS as usize + window - 1) * 4;
    let (mut cp, mut out_n, mut win, mut fp) =
        (ptr(values), outputs as i64, window as i32, ptr(&flags));
    let (function, shared) = if shared <= SHARED_LIMIT {
        (k.maxima_shared, shared)
    } else {
        (k.maxima_global, 0)
    };
    // SAFETY: local_maxima_*(curv: f32*, outputs: i64, window: i32, gates: u8*); `values`
    // holds outputs + window - 1 floats.
    unsafe {
        launch(
            function,
            (outputs as u64).div_ceil(THREADS as u64),
            THREADS,
            shared,
            stream,
            &mut [arg(&mut cp), arg(&mut out_n), arg(&mut win), arg(&mut fp)],
        )?
    };
    Ok((flags, outputs))
}

/// The indices of the rising edges of `m` flags, in order (the plateau fix, compacted).
fn rising_edge_indices(
    k: &Kernels,
    laps: &mut Laps,
    flags: &TensorView,
    m: usize,
) -> Result<(TensorView, usize)> {
    let (device, stream) = (laps.device, laps.stream);
    let (offsets, total, blocks) = block_offsets(k, device, ptr(flags), m as i64, 0, stream)?;
    let indices = device_tensor(device, DType::I64, total, stream)?;
    let compaction = Compaction {
        flags: ptr(flags),
        m: m as i64,
        offsets: ptr(&offsets),
        blocks,
    };
    // SAFETY: `indices` holds the `total` indices the offsets were counted for.
    unsafe { compaction.scatter(k, stream, 0, (0, 0), (ptr(&indices), 0))? };
    laps.hold(offsets);
    Ok((indices, total))
}

/// Beat rows: `x[starts[b] + t]` for `t < lengths[b]`, zeros to `width`, for `count` rows.
fn embed_on(
    k: &Kernels,
    device: i32,
    x: &TensorView,
    (starts, lengths): (&TensorView, &TensorView),
    count: usize,
    width: usize,
    stream: Stream,
) -> Result<TensorView> {
    let beats_flat = device_tensor(device, DType::F32, count * width, stream)?;
    let (mut xp, mut sp, mut lp, mut bn, mut wd, mut op) = (
        ptr(x),
        ptr(starts),
        ptr(lengths),
        count as i64,
        width as i32,
        ptr(&beats_flat),
    );
    // SAFETY: embed(x: f32*, starts, lengths: i64* of count, count, width, out: f32* of
    // count * width); the callers keep every start + length inside the signal.
    unsafe {
        launch(
            k.embed,
            ((count * width) as u64).div_ceil(THREADS as u64),
            THREADS,
            0,
            stream,
            &mut [
                arg(&mut xp),
                arg(&mut sp),
                arg(&mut lp),
                arg(&mut bn),
                arg(&mut wd),
                arg(&mut op),
            ],
        )?
    };
    reshape(beats_flat, &[count as i64, width as i64])
}

/// Runs `method` on `signal` (float32, 1-d, on the host or on `device`) on `stream`.
pub fn segment_cuda_with(
    signal: &TensorView,
    params: &Params,
    method: crate::detect::Method,
    device: i32,
    stream: Stream,
) -> Result<Segmentation> {
    if signal.device().is_host_accessible() && signal.dtype() == DType::F32 {
        crate::adaptive::check_finite(signal.as_slice::<f32>()?)?;
    }
    match method {
        crate::detect::Method::Blog => segment_cuda(signal, params, device, stream),
        crate::detect::Method::Adaptive => {
            adaptive::segment_adaptive_cuda(signal, params, device, stream)
        }
    }
}

/// Runs every stage of the blog's method on `signal` (float32, 1-d, on the host or on
/// `device`) on `stream`.
pub fn segment_cuda(
    signal: &TensorView,
    params: &Params,
    device: i32,
    stream: Stream,
) -> Result<Segmentation> {
    let n = check_signal(signal, device)?;
    if n < params.window {
        return Err(invalid(
            "signal",
            format!(
                "{n} samples is shorter than the {}-sample gate window",
                params.window
            ),
        ));
    }
    let k = kernels(device)?;
    let mut laps = Laps::new(device, stream)?;
    let x = signal_on_device(signal, n, device, stream)?;
    laps.lap("host→device")?;
    let curvature = curvature_on(&k, &mut laps, &x, n, params.ricker_width)?;
    laps.lap("curvature")?;
    let (flags, outputs) = maxima_on(&k, device, &curvature, n, params.window, stream)?;
    laps.lap("gates")?;
    let (gates, total) = rising_edge_indices(&k, &mut laps, &flags, outputs)?;
    laps.hold(flags);
    laps.lap("indices")?;

    let count = total.saturating_sub(1);
    let lengths = device_tensor(device, DType::I64, count, stream)?;
    let keep = device_tensor(device, DType::U8, count, stream)?;
    let (mut gp, mut tot, mut lo, mut hi, mut lp, mut kp) = (
        ptr(&gates),
        total as i64,
        params.min_length as i64,
        params.max_length as i64,
        ptr(&lengths),
        ptr(&keep),
    );
    // SAFETY: lengths_and_keep(gates: i64* of total, count: i64, lo, hi, lengths: i64* and
    // keep: u8* of total - 1).
    unsafe {
        launch(
            k.lengths,
            (count as u64).div_ceil(THREADS as u64),
            THREADS,
            0,
            stream,
            &mut [
                arg(&mut gp),
                arg(&mut tot),
                arg(&mut lo),
                arg(&mut hi),
                arg(&mut lp),
                arg(&mut kp),
            ],
        )?
    };
    let (offsets, beats_n, blocks) =
        block_offsets(&k, device, ptr(&keep), count as i64, 1, stream)?;
    let beat_starts = device_tensor(device, DType::I64, beats_n, stream)?;
    let beat_lengths = device_tensor(device, DType::I64, beats_n, stream)?;
    let compaction = Compaction {
        flags: ptr(&keep),
        m: count as i64,
        offsets: ptr(&offsets),
        blocks,
    };
    // SAFETY: gates and lengths hold `count` values; the outputs the `beats_n` kept.
    unsafe {
        compaction.scatter(
            &k,
            stream,
            1,
            (ptr(&gates), ptr(&lengths)),
            (ptr(&beat_starts), ptr(&beat_lengths)),
        )?
    };
    laps.lap("prune")?;

    let beats = embed_on(
        &k,
        device,
        &x,
        (&beat_starts, &beat_lengths),
        beats_n,
        params.width,
        stream,
    )?;
    laps.lap("embed")?;
    // The R peaks the gates mark: small arrays, shifted on the host.
    let to_peak = params.gate_to_peak().floor() as i64;
    let shift = |view: &TensorView, len: usize| -> Result<TensorView> {
        let mut values: Vec<i64> = download(device, ptr(view), len, stream)?;
        values.iter_mut().for_each(|v| *v += to_peak);
        upload(device, &values, DType::I64, stream)
    };
    let r_peaks = shift(&gates, total)?;
    let beat_peaks = shift(&beat_starts, beats_n)?;
    let timings = laps.finish()?;

    Ok(Segmentation {
        params: params.clone(),
        method: crate::detect::Method::Blog,
        curvature,
        energy: None,
        gates,
        lengths,
        r_peaks,
        beat_peaks,
        beat_starts,
        beat_lengths,
        beats,
        edge_dropped: 0,
        timings,
    })
}

/// The same compact data under another shape.
fn reshape(view: TensorView, shape: &[i64]) -> Result<TensorView> {
    // SAFETY: the same compact elements (product of `shape` = numel) and owner.
    Ok(unsafe {
        TensorView::from_raw_parts(
            view.data_ptr(),
            view.dtype(),
            shape.to_vec(),
            zerohop::tensor::compact_strides(shape),
            view.device(),
            view.owner().clone(),
            false,
        )
    }?)
}
