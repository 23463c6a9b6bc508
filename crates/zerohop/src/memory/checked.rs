//! Frees from callers the core cannot hold to `deallocate`'s contract: the Python and C faces
//! hand raw addresses to code that may give back any integer. Each block a face hands out is
//! recorded here, and a face's free reaches the resource only for a recorded block, once, with
//! the size and alignment it was allocated with; anything else is an error naming the address.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{MemoryResource, Stream};
use crate::error::{Error, Result};

/// A block handed out through a face.
struct Receipt {
    /// The resource it came from. A weak handle also keeps the resource's address from being
    /// reused while the record exists, so the address identifies it.
    resource: Weak<dyn MemoryResource>,
    bytes: usize,
    align: usize,
}

static HANDED_OUT: Mutex<Option<HashMap<usize, Receipt>>> = Mutex::new(None);

fn handed_out() -> MutexGuard<'static, Option<HashMap<usize, Receipt>>> {
    // Every update is one insert or remove, so a poisoned lock's map is still consistent.
    HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner())
}

fn same_resource(receipt: &Receipt, resource: &Arc<dyn MemoryResource>) -> bool {
    std::ptr::addr_eq(receipt.resource.as_ptr(), Arc::as_ptr(resource))
        || receipt
            .resource
            .upgrade()
            .is_some_and(|r| r.is_equal(&**resource))
}

/// Allocates from `resource` for a caller that will free through [`checked_deallocate`].
pub fn checked_allocate(
    resource: &Arc<dyn MemoryResource>,
    bytes: usize,
    align: usize,
    stream: Stream,
) -> Result<NonNull<u8>> {
    let ptr = resource.allocate(bytes, align, stream)?;
    let receipt = Receipt {
        resource: Arc::downgrade(resource),
        bytes,
        align,
    };
    // An older record at this address is of a block freed some other way: this one is live.
    handed_out()
        .get_or_insert_with(HashMap::new)
        .insert(ptr.as_ptr().expose_provenance(), receipt);
    Ok(ptr)
}

/// Gives back `address` if [`checked_allocate`] handed it out from `resource` (or one equal to
/// it) with these `bytes` and `align` and it was not given back since; otherwise frees nothing
/// and says why, naming the address.
pub fn checked_deallocate(
    resource: &Arc<dyn MemoryResource>,
    address: usize,
    bytes: usize,
    align: usize,
    stream: Stream,
) -> Result<()> {
    let refuse = |reason: String| Error::InvalidFree {
        what: format!("free of 0x{address:x}"),
        reason,
    };
    let receipt = {
        let mut handed = handed_out();
        let map = handed.get_or_insert_with(HashMap::new);
        let Some(receipt) = map.get(&address) else {
            return Err(refuse(
                "not a block handed out and not yet freed (a double free, or an address no \
                 resource gave)"
                    .into(),
            ));
        };
        if !same_resource(receipt, resource) {
            return Err(refuse("the block came from another resource".into()));
        }
        if (receipt.bytes, receipt.align) != (bytes, align) {
            return Err(refuse(format!(
                "freed as {bytes} bytes aligned to {align}, allocated as {} bytes aligned to {}; \
                 the block stays allocated",
                receipt.bytes, receipt.align
            )));
        }
        map.remove(&address)
    };
    let ptr = receipt
        .and_then(|_| NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(address)))
        .ok_or_else(|| refuse("address 0 is never handed out".into()))?;
    // SAFETY: `address` came from `resource.allocate(bytes, align, _)` (or an equal resource's)
    // in `checked_allocate`, whose exposed provenance it carries; its record is removed, so it
    // is freed once.
    unsafe { resource.deallocate(ptr, bytes, align, stream) };
    Ok(())
}
