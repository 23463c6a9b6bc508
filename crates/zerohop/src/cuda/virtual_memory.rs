//! Device memory through CUDA's virtual memory management: one address range reserved with
//! `cuMemAddressReserve`, pieces backed with `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`
//! as a `VirtualResource` asks, and given back with `cuMemUnmap` + `cuMemRelease`. A `Pool`
//! over it grows to every byte of its maximum (see `memory::virtual_space`).

use std::ffi::c_int;

use cudarc::driver::{result, sys};

use super::{bind, driver_error, order_streams};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{AddressSpace, Stream, VirtualResource};

/// A reserved range of device `ordinal`'s addresses.
#[derive(Debug)]
pub struct CudaAddressSpace {
    ordinal: i32,
    base: usize,
    length: usize,
    granule: usize,
}

/// Device memory of `ordinal`, pinned to it (what `cuMemCreate` makes).
fn device_memory(ordinal: i32) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct; all-zero is its documented default (no handle types, no
    // flags), and the fields that matter are set below.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location(ordinal);
    prop
}

fn location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal as c_int,
    }
}

/// The virtual memory management calls need a device that supports them.
fn check(what: &str, code: sys::CUresult) -> Result<()> {
    code.result().map_err(|e| driver_error(what, e))
}

impl CudaAddressSpace {
    /// Reserves `bytes` of addresses (rounded up to the device's recommended granule, 2 MiB
    /// on current GPUs) for device `ordinal`. Nothing is backed yet: reserving costs no
    /// memory, so the range may be as large as the device.
    pub fn reserve(ordinal: i32, bytes: usize) -> Result<Self> {
        bind(ordinal)?;
        let prop = device_memory(ordinal);
        let mut granule = 0usize;
        // SAFETY: `prop` and `granule` are valid for the call; the context is current.
        check("granularity", unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granule,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        })?;
        if granule == 0 || !granule.is_power_of_two() {
            return Err(Error::Device {
                what: format!("cuda:{ordinal}"),
                reason: format!("the driver reports a granule of {granule} bytes"),
            });
        }
        let length = bytes
            .max(1)
            .checked_next_multiple_of(granule)
            .ok_or_else(|| Error::Resource {
                what: "reserved range".into(),
                reason: format!("{bytes} bytes overflow when rounded to {granule}"),
            })?;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: `base` receives the reserved address; no fixed address is asked for.
        check("reserve addresses", unsafe {
            sys::cuMemAddressReserve(&mut base, length, granule, 0, 0)
        })?;
        Ok(CudaAddressSpace {
            ordinal,
            base: base as usize,
            length,
            granule,
        })
    }
}

impl AddressSpace for CudaAddressSpace {
    fn device(&self) -> Device {
        Device::cuda(self.ordinal)
    }

    fn range(&self) -> (usize, usize) {
        (self.base, self.length)
    }

    fn granule(&self) -> usize {
        self.granule
    }

    unsafe fn back(&self, addr: usize, bytes: usize) -> Result<u64> {
        bind(self.ordinal)?;
        let prop = device_memory(self.ordinal);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        let oom = |what: &str, e| Error::OutOfMemory {
            requested: bytes,
            device: self.device(),
            reason: format!("{what}: {}", driver_error(what, e)),
        };
        // SAFETY: `prop` describes device memory; `bytes` is a multiple of the granule.
        unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) }
            .result()
            .map_err(|e| oom("cuMemCreate", e))?;
        let access = sys::CUmemAccessDesc {
            location: location(self.ordinal),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the piece is reserved, granule aligned and unbacked (the caller's contract),
        // and `handle` holds exactly `bytes`.
        let mapped = unsafe { sys::cuMemMap(addr as sys::CUdeviceptr, bytes, 0, handle, 0) }
            .result()
            .and_then(|()| {
                // SAFETY: the piece was just mapped; `access` names this device.
                unsafe { sys::cuMemSetAccess(addr as sys::CUdeviceptr, bytes, &access, 1) }
                    .result()
                    .inspect_err(|_| {
                        // SAFETY: mapped just above, used by nobody yet.
                        let _ = unsafe { sys::cuMemUnmap(addr as sys::CUdeviceptr, bytes) };
                    })
            });
        if let Err(e) = mapped {
            // SAFETY: the handle is mapped nowhere now.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(oom("cuMemMap", e));
        }
        Ok(handle)
    }

    unsafe fn unback(&self, addr: usize, bytes: usize, handle: u64) {
        if bind(self.ordinal).is_err() {
            return; // The process is going down; the driver takes everything back.
        }
        // Work queued on any stream may still use the piece: unmapping under it would fault.
        // Giving memory back is rare (a pool's release), so waiting for the device is fine.
        let _ = result::ctx::synchronize();
        // SAFETY: exactly one piece `back` mapped (the caller's contract), unused from now on.
        unsafe {
            let _ = sys::cuMemUnmap(addr as sys::CUdeviceptr, bytes);
            let _ = sys::cuMemRelease(handle);
        }
    }

    fn release_range(&self) {
        if bind(self.ordinal).is_ok() {
            // SAFETY: the range `reserve` got, with nothing in it mapped (the caller's promise).
            let _ = unsafe { sys::cuMemAddressFree(self.base as sys::CUdeviceptr, self.length) };
        }
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        order_streams(self.ordinal, freed_on, next)
    }
}

/// Device memory backed as it is asked for within one reserved range: the upstream of a
/// growable pool (`PoolResource` over it merges across chunks and reaches its maximum).
pub type CudaVirtualResource = VirtualResource<CudaAddressSpace>;

/// A [`CudaVirtualResource`] reserving `bytes` of device `ordinal`'s addresses (None: as
/// many as the device has memory).
pub fn cuda_virtual(ordinal: i32, bytes: Option<usize>) -> Result<CudaVirtualResource> {
    let bytes = match bytes {
        Some(bytes) => bytes,
        None => super::memory_info(ordinal)?.1,
    };
    Ok(VirtualResource::new(CudaAddressSpace::reserve(
        ordinal, bytes,
    )?))
}
