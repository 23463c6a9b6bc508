//! Kernel sources compiled by NVRTC and loaded into the current context, with the PTX cached
//! on disk (`ptx_cache`) so only a machine's first process pays for the compilation.

use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};
use cudarc::nvrtc;
use zerohop::cuda::bind;

use super::{cuda_error, ptx_cache};
use crate::error::{invalid, Result};

/// Compiles `source` (or takes its cached PTX) and loads it into the current context. The
/// module is never unloaded, so function handles from it stay valid for the process.
pub(super) fn load(source: &str) -> Result<sys::CUmodule> {
    // SAFETY: only asks the loader whether libnvrtc can be opened.
    if !unsafe { nvrtc::sys::is_culib_present() } {
        return Err(invalid(
            "CUDA kernels",
            "NVRTC (libnvrtc.so) was not found; install the CUDA runtime's NVRTC, or call \
             zerohop.cuda.preload_nvrtc() to load the one pip's nvidia packages ship",
        ));
    }
    let arch = vec!["--gpu-architecture=compute_75".to_string()];
    let cache = ptx_cache::path(
        source,
        &[arch.as_slice(), &["--fmad=false".into()]].concat(),
    );
    let load_ptx = |ptx: &str| -> Result<sys::CUmodule> {
        let image = CString::new(ptx).map_err(|e| cuda_error("PTX", e))?;
        // SAFETY: a NUL-terminated PTX image; the caller made the device's context current.
        unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| cuda_error("module load", e))
    };
    // A cached PTX that does not load (damaged, or for another driver) is compiled again.
    let cached = cache.as_deref().and_then(ptx_cache::read);
    if let Some(Ok(module)) = cached.as_deref().map(load_ptx) {
        return Ok(module);
    }
    let options = nvrtc::CompileOptions {
        // Separate multiply and add: the CPU code does not fuse them either.
        fmad: Some(false),
        options: arch,
        ..Default::default()
    };
    let ptx = nvrtc::compile_ptx_with_opts(source, options)
        .map_err(|e| cuda_error("kernel compilation", e))?
        .to_src();
    let module = load_ptx(&ptx)?;
    if let Some(path) = &cache {
        ptx_cache::write(path, &ptx);
    }
    Ok(module)
}

/// The handle of kernel `name` in `module` (as an integer: a plain driver handle, valid in the
/// device's primary context for the life of the process).
pub(super) fn function(module: sys::CUmodule, name: &str) -> Result<usize> {
    let name = CString::new(name).map_err(|e| cuda_error("kernel name", e))?;
    // SAFETY: `module` is loaded and never unloaded.
    unsafe { result::module::get_function(module, name) }
        .map(|f| f as usize)
        .map_err(|e| cuda_error("kernel lookup", e))
}

/// The kernels of one source, loaded once per device.
pub(super) struct PerDevice<K>(Mutex<Vec<(i32, Arc<K>)>>);

impl<K> PerDevice<K> {
    pub(super) const fn new() -> Self {
        PerDevice(Mutex::new(Vec::new()))
    }

    /// The kernels of `source` on `device`, compiled, loaded and looked up (`lookup`) on first
    /// use; the device's context is current on return.
    pub(super) fn get(
        &self,
        device: i32,
        source: &str,
        lookup: impl FnOnce(&dyn Fn(&str) -> Result<usize>) -> Result<K>,
    ) -> Result<Arc<K>> {
        bind(device)?;
        let mut loaded = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, k)) = loaded.iter().find(|(d, _)| *d == device) {
            return Ok(k.clone());
        }
        let module = load(source)?;
        let k = Arc::new(lookup(&|name| function(module, name))?);
        loaded.push((device, k.clone()));
        Ok(k)
    }
}
