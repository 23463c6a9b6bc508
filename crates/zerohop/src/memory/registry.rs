//! The per-device "current resource": what zerohop allocates from unless told otherwise.

use std::sync::{Arc, RwLock};

use super::{default_host_resource, MemoryResource};
use crate::device::Device;

type Entry = (Device, Arc<dyn MemoryResource>);

static CURRENT: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

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

/// Removes what was installed for `device` (host devices fall back to the system resource).
pub fn reset_current_resource(device: Device) {
    let key = normalise(device);
    CURRENT
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(d, _)| *d != key);
}

/// Host memory is one address space: a "cpu" resource serves every host-kind device id.
fn normalise(device: Device) -> Device {
    if device.kind == crate::device::DeviceKind::Cpu {
        Device::CPU
    } else {
        device
    }
}
