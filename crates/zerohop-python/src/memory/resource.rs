//! `zerohop.memory`: resource stacks from Python, the current host resource, statistics and
//! leak reports, and the C allocator symbols other frameworks load.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};
use zerohop::memory::{
    checked_allocate, checked_deallocate, current_resource, make_current, ArenaResource,
    FailureCallbackResource, LimitResource, LogResource, MemoryResource, MonotonicResource,
    PoolConfig, PoolResource, StatsResource, SystemResource, TrackingResource, POOL_ALIGNMENT,
};
use zerohop::{cuda as zc, Device, Stream};

use crate::base::errors::IntoPyResult;
use crate::base::value::object_of;

/// What a `Resource` is, with the concrete handle its introspection methods need.
#[derive(Clone)]
enum Kind {
    System,
    Shared,
    Pool(Arc<PoolResource>),
    Arena(Arc<ArenaResource>),
    Monotonic(Arc<MonotonicResource>),
    Limit(Arc<LimitResource>),
    Stats(Arc<StatsResource>),
    Tracking(Arc<TrackingResource>),
    Log(Arc<LogResource>),
    /// A resource with no methods of its own, by its Python constructor's name.
    Plain(&'static str),
    /// A resource zerohop did not build from Python (the default, or one set from Rust).
    Opaque,
}

/// A memory resource, possibly wrapping another (`upstream`).
#[pyclass(name = "Resource", module = "zerohop.memory", frozen)]
pub struct PyResource {
    pub inner: Arc<dyn MemoryResource>,
    kind: Kind,
    upstream: Option<Py<PyResource>>,
}

impl PyResource {
    fn new(inner: Arc<dyn MemoryResource>, kind: Kind, upstream: Option<Py<PyResource>>) -> Self {
        PyResource {
            inner,
            kind,
            upstream,
        }
    }

    fn tracking(&self) -> PyResult<&TrackingResource> {
        match &self.kind {
            Kind::Tracking(t) => Ok(t),
            _ => Err(PyTypeError::new_err(format!(
                "{} does not track allocations; wrap it in zerohop.memory.Tracking(...)",
                self.name()
            ))),
        }
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::System => "System",
            Kind::Shared => "Shared",
            Kind::Pool(_) => "Pool",
            Kind::Arena(_) => "Arena",
            Kind::Monotonic(_) => "Monotonic",
            Kind::Limit(_) => "Limit",
            Kind::Stats(_) => "Stats",
            Kind::Tracking(_) => "Tracking",
            Kind::Log(_) => "Log",
            Kind::Plain(name) => name,
            Kind::Opaque => "Resource",
        }
    }
}

#[pymethods]
impl PyResource {
    /// The resource this one wraps, or None.
    #[getter]
    fn upstream(&self, py: Python<'_>) -> Option<Py<PyResource>> {
        self.upstream.as_ref().map(|u| u.clone_ref(py))
    }

    /// The device this resource's memory is on: "cpu", "cuda:N", "cuda_host" or
    /// "cuda_managed".
    #[getter]
    fn device(&self) -> String {
        self.inner.device().to_string()
    }

    /// Statistics of this resource (a `Stats` adaptor).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        match &self.kind {
            Kind::Stats(s) => Ok(object_of(py, s.statistics().record())?.cast_into()?),
            _ => Err(PyTypeError::new_err(format!(
                "{} keeps no statistics; wrap it in zerohop.memory.Stats(...)",
                self.name()
            ))),
        }
    }

    /// Outstanding allocations of a `Tracking` adaptor, as dicts.
    fn leaks<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let leaks = self.tracking()?.outstanding();
        leaks.iter().map(|a| object_of(py, a.record())).collect()
    }

    /// Frees a `Tracking` adaptor refused (double frees, foreign pointers, wrong sizes), as
    /// dicts; `allocated_bytes` is None when the pointer was not a live allocation.
    fn invalid_frees<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let refused = self.tracking()?.invalid_frees();
        refused.iter().map(|f| object_of(py, f.record())).collect()
    }

    /// The report of a `Tracking` adaptor: refused frees, then leaks ("" when clean).
    fn report(&self) -> PyResult<String> {
        Ok(self.tracking()?.report())
    }

    /// A `Pool`'s reserved/in-use bytes, chunks and free blocks.
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let fields = match &self.kind {
            Kind::Pool(p) => p.usage().fields(),
            Kind::Limit(l) => l.usage_fields(),
            Kind::Monotonic(m) => m.usage().fields(),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "{} reports no usage (Pool, Monotonic and Limit do)",
                    self.name()
                )))
            }
        };
        fields.into_py_dict(py)
    }

    /// Gives a `Pool`'s idle chunks back upstream (returns the bytes released), or flushes
    /// this thread's `Arena` cache.
    fn release(&self) -> PyResult<usize> {
        match &self.kind {
            Kind::Pool(p) => Ok(p.release()),
            Kind::Arena(a) => {
                a.flush_thread_cache();
                Ok(0)
            }
            _ => Err(PyTypeError::new_err(format!(
                "{} holds nothing to release",
                self.name()
            ))),
        }
    }

    /// Writes a `Log`'s buffered lines to its file.
    fn flush(&self) -> PyResult<()> {
        match &self.kind {
            Kind::Log(l) => l.flush().py(),
            _ => Err(PyTypeError::new_err(format!("{} has no log", self.name()))),
        }
    }

    /// Allocates `nbytes` for use on `stream` (a CUDA stream handle; 0 is the legacy
    /// default, and the only value for host memory) and returns the address (for tests and
    /// foreign callers; give it back with `deallocate`, or use `Block` to own it).
    #[pyo3(signature = (nbytes, align=POOL_ALIGNMENT, stream=0))]
    fn allocate(
        &self,
        py: Python<'_>,
        nbytes: usize,
        align: usize,
        stream: usize,
    ) -> PyResult<usize> {
        let inner = self.inner.clone();
        // The address crosses the detach as an integer (pointers are not Send).
        crate::memory::python_stack::detach(py, move || {
            let stream = Stream::from_allocator(inner.device(), stream);
            checked_allocate(&inner, nbytes, align, stream).map(|p| p.as_ptr() as usize)
        })
        .py()
    }

    /// Gives back a block from `allocate` on this resource, with the size and alignment it
    /// was allocated with; work already queued on `stream` may still use it, so another
    /// stream gets it only after that work (see `Pool`). Any other address, a second free or
    /// another size raises `ValueError` naming the address, and frees nothing.
    #[pyo3(signature = (address, nbytes, align=POOL_ALIGNMENT, stream=0))]
    fn deallocate(
        &self,
        address: usize,
        nbytes: usize,
        align: usize,
        stream: usize,
    ) -> PyResult<()> {
        let stream = Stream::from_allocator(self.inner.device(), stream);
        checked_deallocate(&self.inner, address, nbytes, align, stream).py()
    }

    fn __repr__(&self) -> String {
        match &self.upstream {
            Some(u) => format!("{}({})", self.name(), u.get().__repr__()),
            None => format!("{}()", self.name()),
        }
    }
}

type Built = (Arc<dyn MemoryResource>, Kind);

fn wrap(
    upstream: &Bound<'_, PyResource>,
    build: impl FnOnce(Arc<dyn MemoryResource>) -> zerohop::Result<Built>,
) -> PyResult<PyResource> {
    let (inner, kind) = build(upstream.get().inner.clone()).py()?;
    let upstream = Some(upstream.clone().unbind());
    Ok(PyResource::new(inner, kind, upstream))
}

/// Host memory from the system allocator, aligned as asked: the default host resource.
/// The package's `zerohop.memory.System()` builds it.
#[pyfunction]
fn system() -> PyResource {
    PyResource::new(Arc::new(SystemResource::new()), Kind::System, None)
}

/// Host memory other processes on this machine can map (one sealed memfd per allocation):
/// zerohop tensors and tables in it pickle as a handle instead of bytes.
#[pyfunction]
fn shared() -> PyResult<PyResource> {
    let inner = zerohop::memory::SharedResource::new().py()?;
    Ok(PyResource::new(Arc::new(inner), Kind::Shared, None))
}

fn cuda<R: MemoryResource + 'static>(
    made: zerohop::Result<R>,
    name: &'static str,
) -> PyResult<PyResource> {
    let inner = Arc::new(made.py()?);
    Ok(PyResource::new(inner, Kind::Plain(name), None))
}

/// Device memory of CUDA device `device` (cuMemAlloc/cuMemFree). Addresses it hands out are
/// device pointers: give them to frameworks, never dereference them on the host.
#[pyfunction]
#[pyo3(signature = (device=0))]
fn cuda_device(device: i32) -> PyResult<PyResource> {
    cuda(zc::CudaDeviceResource::new(device), "CudaDevice")
}

/// Device memory backed as it is asked for within `reserve` bytes of addresses reserved
/// once (CUDA's virtual memory management): a Pool over it merges across its chunks and
/// grows to every byte of its maximum; `Pool.release()` unmaps idle chunks.
#[pyfunction]
#[pyo3(signature = (device=0, reserve=None))]
fn cuda_virtual(device: i32, reserve: Option<usize>) -> PyResult<PyResource> {
    cuda(zc::cuda_virtual(device, reserve), "CudaVirtual")
}

/// Stream-ordered device memory (cuMemAllocAsync on the device's memory pool).
#[pyfunction]
#[pyo3(signature = (device=0))]
fn cuda_async(device: i32) -> PyResult<PyResource> {
    cuda(zc::CudaAsyncResource::new(device), "CudaAsync")
}

/// Managed memory (cuMemAllocManaged): may exceed the device's memory.
#[pyfunction]
#[pyo3(signature = (device=0))]
fn cuda_managed(device: i32) -> PyResult<PyResource> {
    cuda(zc::CudaManagedResource::new(device), "CudaManaged")
}

/// Pinned host memory (cuMemHostAlloc), for copies that overlap the host.
#[pyfunction]
#[pyo3(signature = (device=0))]
fn cuda_pinned(device: i32) -> PyResult<PyResource> {
    cuda(zc::CudaPinnedResource::new(device), "CudaPinned")
}

/// One allocation owned by a Python object: freed (on its stream) when the object dies.
/// What CuPy's and Numba's allocator plug-ins hand out.
#[pyclass(name = "Block", module = "zerohop.memory", frozen)]
pub struct PyBlock {
    resource: Arc<dyn MemoryResource>,
    ptr: NonNull<u8>,
    nbytes: usize,
    stream: Stream,
}

// SAFETY: the block is an address owned by this object alone; resources are Send + Sync.
unsafe impl Send for PyBlock {}
// SAFETY: shared access only reads the address.
unsafe impl Sync for PyBlock {}

#[pymethods]
impl PyBlock {
    #[new]
    #[pyo3(signature = (resource, nbytes, stream=0))]
    fn new(
        py: Python<'_>,
        resource: &Bound<'_, PyResource>,
        nbytes: usize,
        stream: usize,
    ) -> PyResult<Self> {
        let inner = resource.get().inner.clone();
        let held = inner.clone();
        let stream = Stream::from_allocator(inner.device(), stream);
        let allocate = move || held.allocate(nbytes, POOL_ALIGNMENT, stream);
        let address = py
            .detach(move || allocate().map(|p| p.as_ptr() as usize))
            .py()?;
        let ptr = NonNull::new(address as *mut u8)
            .ok_or_else(|| PyValueError::new_err("the resource returned NULL"))?;
        Ok(PyBlock {
            resource: inner,
            ptr,
            nbytes,
            stream,
        })
    }

    /// The block's address.
    #[getter]
    fn ptr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The bytes asked for (the resource may have rounded up internally).
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The stream the block was allocated on, and is freed on (0: none).
    #[getter]
    fn stream(&self) -> usize {
        self.stream.raw()
    }
}

impl Drop for PyBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` from this resource with these arguments, freed once.
        unsafe {
            self.resource
                .deallocate(self.ptr, self.nbytes, POOL_ALIGNMENT, self.stream)
        };
    }
}

/// A pool over `upstream`: chunks reserved from it (`initial` bytes first, never more
/// than `maximum` in all) carved into reusable blocks, by size class up to 4 MiB and by
/// coalescing best fit above; reuse is stream-ordered. Built by `zerohop.memory.Pool`.
#[pyfunction]
#[pyo3(signature = (upstream, initial=0, maximum=None))]
fn pool(
    upstream: &Bound<'_, PyResource>,
    initial: usize,
    maximum: Option<usize>,
) -> PyResult<PyResource> {
    let config = PoolConfig::checked(initial, maximum).py()?;
    wrap(upstream, |up| {
        let p = Arc::new(PoolResource::new(up, config));
        Ok((p.clone(), Kind::Pool(p)))
    })
}

/// Per-thread caches of small blocks (at most `cached_per_class` per size class) in front of
/// `upstream`, so threads allocating at once rarely share a lock. Built by
/// `zerohop.memory.Arena`.
#[pyfunction]
#[pyo3(signature = (upstream, cached_per_class=zerohop::memory::DEFAULT_CACHED_PER_CLASS))]
fn arena(upstream: &Bound<'_, PyResource>, cached_per_class: usize) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let a = Arc::new(ArenaResource::with_cache_size(up, cached_per_class));
        Ok((a.clone(), Kind::Arena(a)))
    })
}

/// Consecutive blocks from chunks of `chunk` bytes of `upstream`, never reused; a chunk goes
/// back once a newer one replaced it and its blocks are all freed. Over `Shared`: many results
/// in a few segments, each freeable as soon as a consumer mapped it. Built by
/// `zerohop.memory.Monotonic`.
#[pyfunction]
#[pyo3(signature = (upstream, chunk=zerohop::memory::DEFAULT_MONOTONIC_CHUNK))]
fn monotonic(upstream: &Bound<'_, PyResource>, chunk: usize) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let m = Arc::new(MonotonicResource::new(up, chunk)?);
        Ok((m.clone(), Kind::Monotonic(m)))
    })
}

/// Refuses any allocation that would take the bytes outstanding through it above
/// `nbytes`, raising `OutOfMemoryError` with the numbers. Built by `zerohop.memory.Limit`.
#[pyfunction]
fn limit(upstream: &Bound<'_, PyResource>, nbytes: usize) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let l = Arc::new(LimitResource::new(up, nbytes));
        Ok((l.clone(), Kind::Limit(l)))
    })
}

/// Runs `callback(nbytes)` when `upstream` refuses an allocation (to free caches or spill),
/// then retries once if it returns true. It runs holding the GIL; an exception it raises goes
/// to `sys.unraisablehook` and counts as giving up. Built by `zerohop.memory.OnFailure`.
#[pyfunction]
fn on_failure(upstream: &Bound<'_, PyResource>, callback: Py<PyAny>) -> PyResult<PyResource> {
    let ask = move |bytes: usize| {
        Python::attach(|py| {
            let answer = callback.call1(py, (bytes,)).and_then(|r| r.is_truthy(py));
            answer.unwrap_or_else(|err| {
                err.write_unraisable(py, None);
                false
            })
        })
    };
    wrap(upstream, |up| {
        let made = FailureCallbackResource::new(up, Box::new(ask));
        Ok((Arc::new(made), Kind::Plain("OnFailure")))
    })
}

/// Counts what passes through to `upstream`: current, peak and total bytes and counts,
/// failures, a power-of-two size histogram. Built by `zerohop.memory.Stats`.
#[pyfunction]
fn stats(upstream: &Bound<'_, PyResource>) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let s = Arc::new(StatsResource::new(up));
        Ok((s.clone(), Kind::Stats(s)))
    })
}

/// Records every live allocation through it, with the Python stack (and a Rust backtrace
/// when `backtraces`), for leak and invalid-free reports. Built by `zerohop.memory.Tracking`.
#[pyfunction]
#[pyo3(signature = (upstream, backtraces=false))]
fn tracking(upstream: &Bound<'_, PyResource>, backtraces: bool) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let t = Arc::new(TrackingResource::new(up, backtraces));
        Ok((t.clone(), Kind::Tracking(t)))
    })
}

/// Appends one CSV row per allocation and free to `path`
/// (`time_us,thread,action,pointer,size,stream`). Built by `zerohop.memory.Log`.
#[pyfunction]
fn log(upstream: &Bound<'_, PyResource>, path: PathBuf) -> PyResult<PyResource> {
    wrap(upstream, |up| {
        let l = Arc::new(LogResource::new(up, &path)?);
        Ok((l.clone(), Kind::Log(l)))
    })
}

/// Python handles of the current resources, so `get_current` returns the very object set.
static CURRENT_SET: std::sync::Mutex<Vec<(Device, Py<PyResource>)>> =
    std::sync::Mutex::new(Vec::new());

/// Makes `resource` the one zerohop allocates from on its device: host resources (system,
/// pinned, managed and their adaptors) serve the host; CUDA resources serve their device, for
/// zerohop's own device allocations and for the C symbols torch loads.
#[pyfunction]
fn set_current(resource: &Bound<'_, PyResource>) -> PyResult<()> {
    let slot = make_current(resource.get().inner.clone()).py()?;
    let mut set = CURRENT_SET.lock().unwrap_or_else(|p| p.into_inner());
    set.retain(|(d, _)| *d != slot);
    set.push((slot, resource.clone().unbind()));
    Ok(())
}

/// Makes the C symbols frameworks load allocate from `resource` on its device, leaving the
/// current resource (zerohop's own allocations) as it is; None ends that on `device`: the
/// symbols serve its current resource again.
#[pyfunction]
#[pyo3(signature = (resource, device="cuda:0"))]
fn set_framework_resource(resource: Option<&Bound<'_, PyResource>>, device: &str) -> PyResult<()> {
    match resource {
        Some(r) => zerohop::memory::serve_frameworks(r.get().inner.clone()),
        None => zerohop::memory::set_framework_resource(Device::parse(device).py()?, None),
    };
    Ok(())
}

/// The current resource for `device` ("cpu" or "cuda:N"); None for a device without one.
#[pyfunction]
#[pyo3(signature = (device="cpu"))]
fn get_current(py: Python<'_>, device: &str) -> PyResult<Option<Py<PyResource>>> {
    let slot = Device::parse(device).py()?;
    let Some(installed) = current_resource(slot) else {
        return Ok(None);
    };
    let set = CURRENT_SET.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, known)) = set.iter().find(|(d, _)| *d == slot) {
        if known.get().inner.is_equal(&*installed) {
            return Ok(Some(known.clone_ref(py)));
        }
    }
    let found = PyResource::new(installed, Kind::Opaque, None);
    Ok(Some(Py::new(py, found)?))
}

/// Restores the defaults: the system resource for the host, none for devices.
#[pyfunction]
#[pyo3(signature = (device="cpu"))]
fn reset_current(device: &str) -> PyResult<()> {
    let slot = Device::parse(device).py()?;
    zerohop::memory::reset_current_resource(slot);
    CURRENT_SET
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(d, _)| *d != slot);
    Ok(())
}

/// C allocator entry point with the signature torch's `CUDAPluggableAllocator` loads:
/// `void* alloc(ssize_t size, int device, cudaStream_t stream)`. Device -1 means the host.
/// Returns NULL when no resource serves `device` or the resource refuses, the reason raised on
/// the calling Python thread (`report_refusal`). The logic is the core's
/// `framework_allocate`, which the C ABI's `zh_cuda_malloc` shares.
#[no_mangle]
pub extern "C" fn zerohop_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    framework_malloc(size, device, stream, true)
}

/// [`zerohop_malloc`] for callers that handle NULL themselves (torch's caching allocator over
/// a MemPool frees its cache, retries, then raises its own error): nothing is raised, and the
/// reason waits for `take_refusal` on this thread.
#[no_mangle]
pub extern "C" fn zerohop_malloc_quiet(
    size: isize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    framework_malloc(size, device, stream, false)
}

fn framework_malloc(size: isize, device: c_int, stream: *mut c_void, raise: bool) -> *mut c_void {
    let allocate = || zerohop::memory::framework_allocate(size, device, stream as usize);
    match std::panic::catch_unwind(allocate) {
        Ok(Ok(ptr)) => ptr.as_ptr().cast(),
        Ok(Err(err)) if raise => report_refusal(err),
        _ => std::ptr::null_mut(),
    }
}

/// Why the extension's allocator last refused on this thread (None after a success).
#[pyfunction]
fn take_refusal() -> Option<String> {
    zerohop::memory::take_framework_refusal()
}

/// A C caller gets NULL for a refused allocation, and torch's pluggable allocator does not
/// check for it: it would hand out a tensor at address 0. So the refusal is also raised as a
/// Python exception on the calling thread (attaching to the interpreter: torch calls its
/// allocator with the GIL released), which Python reports when torch returns — a SystemError
/// caused by zerohop's OutOfMemoryError — instead of handing out the tensor. Threads with no
/// Python caller get only the NULL.
fn report_refusal(err: zerohop::Error) -> *mut c_void {
    let _ = Python::try_attach(|py| crate::base::errors::to_py(err).restore(py));
    std::ptr::null_mut()
}

/// C free entry point matching [`zerohop_malloc`]:
/// `void free(void* ptr, ssize_t size, int device, cudaStream_t stream)`.
///
/// # Safety
/// `ptr` must come from `zerohop_malloc(size, device, …)` while the same resource was
/// current for `device`, and must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn zerohop_free(
    ptr: *mut c_void,
    size: isize,
    device: c_int,
    stream: *mut c_void,
) {
    let Some(ptr) = NonNull::new(ptr as *mut u8) else {
        return;
    };
    // A refused free (a negative size, no resource) has nobody to tell: the block stays.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: per this function's contract.
        unsafe { zerohop::memory::framework_deallocate(ptr, size, device, stream as usize) }
    });
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyResource>()?;
    m.add_class::<PyBlock>()?;
    for f in [
        wrap_pyfunction!(system, m)?,
        wrap_pyfunction!(shared, m)?,
        wrap_pyfunction!(cuda_device, m)?,
        wrap_pyfunction!(cuda_async, m)?,
        wrap_pyfunction!(cuda_virtual, m)?,
        wrap_pyfunction!(cuda_managed, m)?,
        wrap_pyfunction!(cuda_pinned, m)?,
        wrap_pyfunction!(pool, m)?,
        wrap_pyfunction!(arena, m)?,
        wrap_pyfunction!(monotonic, m)?,
        wrap_pyfunction!(limit, m)?,
        wrap_pyfunction!(on_failure, m)?,
        wrap_pyfunction!(stats, m)?,
        wrap_pyfunction!(tracking, m)?,
        wrap_pyfunction!(log, m)?,
        wrap_pyfunction!(set_current, m)?,
        wrap_pyfunction!(get_current, m)?,
        wrap_pyfunction!(reset_current, m)?,
        wrap_pyfunction!(take_refusal, m)?,
        wrap_pyfunction!(set_framework_resource, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
