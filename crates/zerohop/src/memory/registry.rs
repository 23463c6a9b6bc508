//! The per-device "current resource": what zerohop allocates from unless told otherwise.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use super::{default_host_resource, MemoryResource, Stream, POOL_ALIGNMENT};
use crate::device::Device;
use crate::error::{Error, Result};

type Entry = (Device, Arc<dyn MemoryResource>);

static CURRENT: RwLock<Vec<Entry>> = RwLock::new(Vec::new());
/// What the framework hooks ([`framework_allocate`]) allocate from, where it differs from the
/// current resource: torch's share of a pool, so zerohop's own allocations on the device are
/// not counted as torch's.
static FRAMEWORKS: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Each block [`framework_allocate`] handed out, with the resource it came from: the current
/// resource may change before the block comes back (a job switches to shared memory for one
/// stage), and a block must go back where it came from.
type Blocks = HashMap<usize, Arc<dyn MemoryResource>>;
static FRAMEWORK_BLOCKS: LazyLock<Mutex<Blocks>> = LazyLock::new(Mutex::default);

fn framework_blocks() -> std::sync::MutexGuard<'static, Blocks> {
    FRAMEWORK_BLOCKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The resource installed for `device`; for host devices the system resource by default.
/// `None` for a device nobody installed a resource for (e.g. CUDA without zerohop's CUDA
/// support).
pub fn current_resource(device: Device) -> Option<Arc<dyn MemoryResource>> {
    let key = normalise(device);
    let installed = CURRENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(d, _)| *d == key)
        .map(|(_, r)| r.clone());
    installed.or_else(|| (key == Device::CPU).then(default_host_resource))
}

/// Installs `resource` for `device`, returning the one it replaces. Allocations already made
/// keep their own resource (each `Buffer` remembers where to give its memory back).
pub fn set_current_resource(
    device: Device,
    resource: Arc<dyn MemoryResource>,
) -> Option<Arc<dyn MemoryResource>> {
    let key = normalise(device);
    let mut table = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    let previous = match table.iter_mut().find(|(d, _)| *d == key) {
        Some(entry) => Some(std::mem::replace(&mut entry.1, resource)),
        None => {
            table.push((key, resource));
            None
        }
    };
    previous.or_else(|| (key == Device::CPU).then(default_host_resource))
}

/// Makes `resource` current where it serves: host-accessible memory (system, pinned, managed
/// and their adaptors) serves the host, CUDA device memory its device; anything else is
/// refused. Returns the slot it now serves.
pub fn make_current(resource: Arc<dyn MemoryResource>) -> Result<Device> {
    let device = resource.device();
    let slot = if device.is_host_accessible() {
        Device::CPU
    } else {
        device
    };
    if slot.kind != crate::device::DeviceKind::Cpu && slot.kind != crate::device::DeviceKind::Cuda {
        return Err(Error::Resource {
            what: "current resource".into(),
            reason: format!(
                "set_current takes host or CUDA resources; this one allocates on {slot}"
            ),
        });
    }
    set_current_resource(slot, resource);
    Ok(slot)
}

/// Removes what was installed for `device` (host devices fall back to the system resource).
pub fn reset_current_resource(device: Device) {
    let key = normalise(device);
    CURRENT
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(d, _)| *d != key);
}

/// A framework's allocation hook, in the shape of torch's pluggable allocator (a signed size,
/// an allocator device index where -1 is the host, a stream): `size` bytes from the current
/// resource of that device. `stream` is the raw `cudaStream_t` the framework passes (0, its
/// NULL stream, is the legacy default stream; host allocations have none). The C ABI's `zh_cuda_malloc` and the Python extension's
/// `zerohop_malloc` are this function behind their own symbols.
pub fn framework_allocate(size: isize, device: i32, stream: usize) -> Result<NonNull<u8>> {
    let outcome = allocate_for_framework(size, device, stream);
    LAST_REFUSAL.with(|last| {
        let mut last = last.borrow_mut();
        match &outcome {
            Err(err) => *last = Some(err.to_string()),
            // A refusal the framework recovered from (it freed its cache and asked again)
            // must not be blamed for a later, unrelated failure.
            Ok(_) if last.is_some() => *last = None,
            Ok(_) => {}
        }
    });
    outcome
}

fn allocate_for_framework(size: isize, device: i32, stream: usize) -> Result<NonNull<u8>> {
    let resource = framework_resource(device)?;
    let stream = Stream::from_allocator(resource.device(), stream);
    let ptr = resource.allocate(framework_size(size)?, POOL_ALIGNMENT, stream)?;
    framework_blocks().insert(ptr.as_ptr() as usize, resource);
    Ok(ptr)
}

thread_local! {
    /// Why [`framework_allocate`] last refused on this thread, until an allocation succeeds or
    /// [`take_framework_refusal`] takes it: a framework that handles the NULL itself (torch's
    /// caching allocator over a MemPool) raises its own out-of-memory error, and this is how
    /// that error learns zerohop's numbers (requested, in use, limit).
    static LAST_REFUSAL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The reason of this thread's last refused [`framework_allocate`], if no allocation succeeded
/// since; taking it clears it.
pub fn take_framework_refusal() -> Option<String> {
    LAST_REFUSAL.with(|last| last.borrow_mut().take())
}

/// Gives back a block of [`framework_allocate`]; a negative size is refused, nothing freed.
///
/// # Safety
/// `ptr` must come from `framework_allocate(size, device, …)` and must not be used afterwards.
/// It goes back to the resource that made it, whichever is current now; a pointer this
/// allocator did not hand out (or already took back) is refused, nothing freed.
pub unsafe fn framework_deallocate(
    ptr: NonNull<u8>,
    size: isize,
    device: i32,
    stream: usize,
) -> Result<()> {
    let bytes = framework_size(size)?;
    let stream = Stream::from_allocator(Device::from_allocator_index(device)?, stream);
    let owner = framework_blocks().remove(&(ptr.as_ptr() as usize));
    let Some(resource) = owner else {
        return Err(Error::InvalidFree {
            what: format!("free of {:p}", ptr.as_ptr()),
            reason: "not a block this allocator handed out (or freed twice): nothing freed".into(),
        });
    };
    // SAFETY: per this function's contract; `resource` is the one that made the block.
    unsafe { resource.deallocate(ptr, bytes, POOL_ALIGNMENT, stream) };
    Ok(())
}

/// Frameworks pass sizes signed (`ssize_t`): a negative one is refused, never wrapped.
fn framework_size(size: isize) -> Result<usize> {
    usize::try_from(size).map_err(|_| Error::Resource {
        what: "allocation size".into(),
        reason: format!("{size} is negative"),
    })
}

/// Makes the framework hooks of `resource`'s device ([`framework_allocate`]) allocate from it,
/// leaving the current resource as it is (None: they follow the current resource again).
/// Returns the slot.
pub fn set_framework_resource(device: Device, resource: Option<Arc<dyn MemoryResource>>) -> Device {
    let key = normalise(device);
    let mut table = FRAMEWORKS.write().unwrap_or_else(|p| p.into_inner());
    table.retain(|(d, _)| *d != key);
    if let Some(resource) = resource {
        table.push((key, resource));
    }
    key
}

/// [`set_framework_resource`] for `resource`'s own device.
pub fn serve_frameworks(resource: Arc<dyn MemoryResource>) -> Device {
    set_framework_resource(resource.device(), Some(resource))
}

fn framework_resource(device: i32) -> Result<Arc<dyn MemoryResource>> {
    let place = Device::from_allocator_index(device)?;
    let own = FRAMEWORKS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(d, _)| *d == normalise(place))
        .map(|(_, r)| r.clone());
    own.or_else(|| current_resource(place))
        .ok_or_else(|| Error::Resource {
            what: format!("allocation on {place}"),
            reason: "no resource is current for it: set one (zh_resource_set_current in C, \
                 zerohop.memory.set_current in Python)"
                .into(),
        })
}

/// Host memory is one address space: a "cpu" resource serves every host-kind device id.
fn normalise(device: Device) -> Device {
    if device.kind == crate::device::DeviceKind::Cpu {
        Device::CPU
    } else {
        device
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::PoolConfig;

    #[test]
    fn a_framework_allocates_from_the_current_host_resource_and_frees_there() {
        let ptr = framework_allocate(1000, -1, 0).unwrap();
        assert_eq!(ptr.as_ptr() as usize % POOL_ALIGNMENT, 0);
        // SAFETY: the block was allocated just above with these arguments.
        unsafe { ptr.as_ptr().write_bytes(7, 1000) };
        // SAFETY: as above, freed once.
        unsafe { framework_deallocate(ptr, 1000, -1, 0) }.unwrap();
    }

    #[test]
    fn a_framework_gets_a_reason_for_a_negative_size_or_a_device_without_a_resource() {
        let negative = framework_allocate(-1, -1, 0).unwrap_err().to_string();
        assert!(negative.contains("-1 is negative"), "{negative}");
        // No test installs a resource for cuda:77.
        let none = framework_allocate(64, 77, 0).unwrap_err().to_string();
        assert!(
            none.contains("cuda:77") && none.contains("set_current"),
            "{none}"
        );
        let dangling = NonNull::<u8>::dangling();
        // SAFETY: refused before any resource is touched.
        let refused = unsafe { framework_deallocate(dangling, -8, -1, 0) };
        assert!(refused.is_err());
    }

    #[test]
    fn a_pool_whose_maximum_is_below_its_first_reservation_is_refused() {
        let err = PoolConfig::checked(1 << 20, Some(1 << 10)).unwrap_err();
        assert!(err.to_string().contains("smaller than initial"), "{err}");
        assert!(PoolConfig::checked(1 << 10, Some(1 << 20)).is_ok());
        assert!(PoolConfig::checked(1 << 20, None).is_ok());
    }
}
