//! The checks every import route shares before it trusts foreign memory: whether the host may
//! read it, whether the device it claims exists here, whether a claimed extent can exist at
//! all, and allocations sized by foreign numbers that fail as errors instead of aborting.
//!
//! The routes (DLPack, the array interfaces, Arrow host and device arrays, pickled states, the
//! C wraps) differ in how they read their format; what they may conclude from it is decided
//! here, once.

use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};

/// No user-space pointer on a platform zerohop builds for lies at or above this address:
/// x86-64 with 5-level paging gives processes 2^56 bytes, AArch64 at most 2^52. An extent
/// that ends beyond it cannot be backed by memory, whatever the producer says.
#[cfg(target_pointer_width = "64")]
pub const ADDRESS_LIMIT: usize = 1 << 57;
#[cfg(not(target_pointer_width = "64"))]
pub const ADDRESS_LIMIT: usize = usize::MAX;

/// True when this process may dereference memory on `device` (host memory, pinned or
/// managed memory). Everything else is read only by its device.
pub fn host_may_read(device: Device) -> bool {
    device.is_host_accessible()
}

/// Refuses an extent of `bytes` from address `start` that cannot exist (it wraps or ends past
/// [`ADDRESS_LIMIT`]); `what` names the buffer.
pub fn check_extent(start: usize, bytes: usize, what: &str) -> Result<()> {
    match start.checked_add(bytes) {
        Some(end) if end <= ADDRESS_LIMIT => Ok(()),
        _ => Err(Error::InvalidArgument {
            what: what.to_string(),
            reason: format!(
                "claims {bytes} bytes from {start:#x}, past the end of any address space \
                 (its length or offset is a lie)"
            ),
        }),
    }
}

/// Refuses memory said to be on a CUDA device that this process cannot reach: no driver, no
/// such device, or a build without CUDA. Data there could never be read, copied or even
/// synchronised on, so it is refused where it enters rather than at its first use. Kinds
/// zerohop has no driver for (ROCm, …) are taken as said: they are only passed through.
pub fn require_present(device: Device, what: &str) -> Result<()> {
    if !matches!(
        device.kind,
        DeviceKind::Cuda | DeviceKind::CudaHost | DeviceKind::CudaManaged
    ) {
        return Ok(());
    }
    cuda_present(device, what)
}

#[cfg(feature = "cuda")]
fn cuda_present(device: Device, what: &str) -> Result<()> {
    let count = crate::cuda::device_count();
    if count == 0 {
        return Err(Error::CudaUnavailable {
            what: what.to_string(),
            reason: format!(
                "its memory is on {device}, and CUDA is not available on this machine \
                 (no driver or GPU)"
            ),
        });
    }
    let numbered = device.kind == DeviceKind::Cuda;
    if numbered && (device.id < 0 || device.id as usize >= count) {
        return Err(Error::InvalidArgument {
            what: what.to_string(),
            reason: format!("its memory is on {device}, which does not exist ({count} visible)"),
        });
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn cuda_present(device: Device, what: &str) -> Result<()> {
    Err(Error::CudaUnavailable {
        what: what.to_string(),
        reason: format!("its memory is on {device}, and zerohop was built without CUDA"),
    })
}

/// An empty vector with room for `count` items, or an out-of-memory error naming `what`:
/// for buffers whose size a producer chose.
pub fn try_vec<T>(count: usize, what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(count)
        .map_err(|e| Error::OutOfMemory {
            requested: count.saturating_mul(std::mem::size_of::<T>()),
            device: Device::CPU,
            reason: format!("{what}: {e}"),
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_past_the_address_space_are_refused_by_name() {
        assert!(check_extent(0x1000, 1 << 40, "values").is_ok());
        let err = check_extent(0x1000, usize::MAX, "values").unwrap_err();
        assert!(err.to_string().contains("values"), "{err}");
        let err = check_extent(0x1000, ADDRESS_LIMIT, "bitmap").unwrap_err();
        assert!(err.to_string().contains("past the end"), "{err}");
    }

    #[test]
    fn a_vector_too_large_for_memory_is_an_error_with_the_numbers() {
        let err = try_vec::<u64>(usize::MAX / 4, "booleans of column \"b\"").unwrap_err();
        match err {
            Error::OutOfMemory {
                requested, reason, ..
            } => {
                assert_eq!(requested, usize::MAX);
                assert!(reason.contains("column \"b\""), "{reason}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(try_vec::<u8>(16, "x").unwrap().capacity(), 16);
    }

    #[test]
    fn host_and_unknown_devices_need_no_driver() {
        assert!(require_present(Device::CPU, "x").is_ok());
        let rocm = Device::from_raw(DeviceKind::Rocm as i32, 0).unwrap();
        assert!(require_present(rocm, "x").is_ok());
        assert!(host_may_read(Device::CUDA_HOST));
        assert!(!host_may_read(Device::cuda(0)));
    }

    /// CI has no GPU: a CUDA claim is refused where it enters.
    #[test]
    fn cuda_memory_without_cuda_is_refused() {
        #[cfg(feature = "cuda")]
        if crate::cuda::is_available() {
            return;
        }
        for device in [Device::cuda(0), Device::CUDA_HOST] {
            let err = require_present(device, "Arrow device array").unwrap_err();
            assert!(matches!(err, Error::CudaUnavailable { .. }), "{err}");
            assert!(err.to_string().contains("Arrow device array"), "{err}");
        }
    }
}
