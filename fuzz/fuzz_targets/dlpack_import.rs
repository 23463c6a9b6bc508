//! The DLPack importer against arbitrary struct contents: versions, flags, devices, dtypes,
//! ndim, shapes, strides, data pointers and byte offsets.
//!
//! Properties: no panic; the producer's deleter runs exactly once whether the import succeeds
//! or fails; an accepted tensor's element span fits the address space and survives a
//! re-export and re-import unchanged. The shape and strides arrays hold exactly `ndim`
//! entries, so a read past them is caught by AddressSanitizer. No data is ever read.
#![no_main]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop::dlpack::ffi::*;
use zerohop::dlpack::{export_versioned, import_legacy, import_versioned, ExportOptions};
use zerohop::tensor::MAX_NDIM;

static DELETED: AtomicUsize = AtomicUsize::new(0);

#[derive(Arbitrary, Debug)]
struct Input {
    versioned: bool,
    major: u32,
    minor: u32,
    flags: u64,
    ndim: i32,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    null_shape: bool,
    device_type: i32,
    device_id: i32,
    code: u8,
    bits: u8,
    lanes: u16,
    data: usize,
    byte_offset: u64,
}

/// The arrays the producer owns; freed by the deleter.
struct Owned {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    DELETED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: made by Box::into_raw below, and DLPack calls the deleter once.
    let m = unsafe { Box::from_raw(m) };
    // SAFETY: manager_ctx is the Box<Owned> leaked with it.
    drop(unsafe { Box::from_raw(m.manager_ctx as *mut Owned) });
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    DELETED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: as above.
    let m = unsafe { Box::from_raw(m) };
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(m.manager_ctx as *mut Owned) });
}

/// Exactly as many entries as `ndim` says, when that is a sane count; otherwise as many as
/// the input has (at most MAX_NDIM), which the importer must never read.
fn sized(values: &[i64], ndim: i32) -> Vec<i64> {
    let n = if (0..=MAX_NDIM as i32).contains(&ndim) {
        ndim as usize
    } else {
        values.len().min(MAX_NDIM)
    };
    (0..n)
        .map(|i| values.get(i).copied().unwrap_or(1))
        .collect()
}

fuzz_target!(|input: Input| {
    DELETED.store(0, Ordering::SeqCst);
    let mut owned = Box::new(Owned {
        shape: sized(&input.shape, input.ndim),
        strides: input.strides.as_deref().map(|s| sized(s, input.ndim)),
    });
    let dl_tensor = DLTensor {
        data: input.data as *mut _,
        device: DLDevice {
            device_type: input.device_type,
            device_id: input.device_id,
        },
        ndim: input.ndim,
        dtype: DLDataType {
            code: input.code,
            bits: input.bits,
            lanes: input.lanes,
        },
        shape: if input.null_shape {
            std::ptr::null_mut()
        } else {
            owned.shape.as_mut_ptr()
        },
        strides: owned
            .strides
            .as_mut()
            .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
        byte_offset: input.byte_offset,
    };
    let ctx = Box::into_raw(owned) as *mut std::ffi::c_void;
    let result = if input.versioned {
        let managed = Box::new(DLManagedTensorVersioned {
            version: DLPackVersion {
                major: input.major,
                minor: input.minor,
            },
            manager_ctx: ctx,
            deleter: Some(delete_versioned),
            flags: input.flags,
            dl_tensor,
        });
        // SAFETY: a live, uniquely owned struct whose arrays hold what `ndim` says (or the
        // importer refuses ndim before reading them).
        unsafe { import_versioned(NonNull::from(Box::leak(managed))) }
    } else {
        let managed = Box::new(DLManagedTensor {
            dl_tensor,
            manager_ctx: ctx,
            deleter: Some(delete_legacy),
        });
        // SAFETY: as above.
        unsafe { import_legacy(NonNull::from(Box::leak(managed))) }
    };
    match result {
        Err(err) => {
            assert!(!err.to_string().is_empty());
            assert_eq!(
                DELETED.load(Ordering::SeqCst),
                1,
                "a refused import must release"
            );
        }
        Ok(import) => {
            let view = import.view;
            assert_eq!(view.ndim(), input.ndim as usize);
            let _ = view
                .numel()
                .checked_mul(view.dtype().itemsize())
                .expect("span fits");
            assert_eq!(
                DELETED.load(Ordering::SeqCst),
                0,
                "released while still viewed"
            );
            if let Ok(exported) = export_versioned(&view, ExportOptions::default()) {
                // SAFETY: our own fresh export.
                let again = unsafe { import_versioned(exported) }.expect("own export re-imports");
                assert_eq!(again.view.shape(), view.shape());
                assert_eq!(again.view.strides(), view.strides());
                if view.numel() > 0 {
                    // Empty tensors are exported with NULL data, as the header recommends.
                    assert_eq!(again.view.data_ptr(), view.data_ptr());
                }
                assert_eq!(again.view.dtype(), view.dtype());
                assert_eq!(again.view.device(), view.device());
                assert_eq!(again.view.is_readonly(), view.is_readonly());
            }
            drop(view);
            assert_eq!(
                DELETED.load(Ordering::SeqCst),
                1,
                "the deleter must run once"
            );
        }
    }
});
