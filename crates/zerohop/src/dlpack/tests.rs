//! DLPack export/import, including every malformed-input path. Runs under Miri.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::ffi::*;
use super::*;
use crate::{Buffer, DType, Device, Owner, TensorView};

fn iota_f32(shape: &[i64]) -> TensorView {
    let n: i64 = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|v| v as f32).collect();
    TensorView::from_slice(&values, shape).unwrap()
}

/// Deletes through the managed tensor's own deleter, as a consumer would.
unsafe fn delete(m: NonNull<DLManagedTensorVersioned>) {
    // SAFETY: the caller passes a live export it owns.
    unsafe { (m.as_ref().deleter.unwrap())(m.as_ptr()) }
}

#[test]
fn versioned_export_describes_the_view_exactly() {
    let view = iota_f32(&[2, 3]);
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    // SAFETY: fresh export owned by this test.
    let managed = unsafe { m.as_ref() };
    assert_eq!(managed.version, DLPackVersion { major: 1, minor: 3 });
    assert_eq!(managed.flags, 0);
    let t = &managed.dl_tensor;
    assert_eq!(t.data as *mut u8, view.data_ptr());
    assert_eq!(t.byte_offset, 0);
    assert_eq!(t.ndim, 2);
    assert_eq!((t.dtype.code, t.dtype.bits, t.dtype.lanes), (2, 32, 1));
    assert_eq!((t.device.device_type, t.device.device_id), (1, 0));
    // SAFETY: shape and strides point to ndim elements each.
    unsafe {
        assert_eq!(std::slice::from_raw_parts(t.shape, 2), &[2, 3]);
        assert_eq!(std::slice::from_raw_parts(t.strides, 2), &[3, 1]);
        delete(m);
    }
}

#[test]
fn export_keeps_the_owner_alive_until_the_deleter_runs() {
    let buffer = Buffer::zeroed_host(64, 64).unwrap();
    let view = TensorView::from_buffer(buffer.clone(), DType::F32, &[16]).unwrap();
    let owner = view.owner().clone();
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    let legacy = export_legacy(&view).unwrap();
    drop(view);
    assert_eq!(
        Arc::strong_count(&owner),
        3,
        "two exports plus the test's handle"
    );
    // SAFETY: each export is deleted exactly once.
    unsafe {
        delete(m);
        (legacy.as_ref().deleter.unwrap())(legacy.as_ptr());
    }
    assert_eq!(Arc::strong_count(&owner), 1);
    drop(owner);
    assert_eq!(buffer.ref_count(), 1);
}

#[test]
fn round_trip_shares_memory_and_values() {
    let view = iota_f32(&[4, 5]).transpose(0, 1).unwrap();
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    // SAFETY: ownership of the fresh export passes to the importer.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert_eq!(back.view.data_ptr(), view.data_ptr());
    assert_eq!(back.view.shape(), &[5, 4]);
    assert_eq!(back.view.strides(), &[1, 5]);
    assert_eq!(
        back.view.to_vec::<f32>().unwrap(),
        view.to_vec::<f32>().unwrap()
    );
    assert_eq!(back.version.minor, 3);

    let legacy = export_legacy(&view).unwrap();
    // SAFETY: ownership passes to the importer.
    let back = unsafe { import_legacy(legacy) }.unwrap();
    assert_eq!(back.view.data_ptr(), view.data_ptr());
    assert!(!back.view.is_readonly());
}

#[test]
fn read_only_travels_as_a_flag_and_never_as_legacy() {
    let view = iota_f32(&[3]).into_readonly();
    let m = export_versioned(&view, ExportOptions { is_copied: true }).unwrap();
    // SAFETY: fresh export.
    let flags = unsafe { m.as_ref().flags };
    assert_eq!(
        flags,
        DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED
    );
    // SAFETY: ownership passes to the importer.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert!(back.view.is_readonly());
    assert!(back.is_copied);
    let err = export_legacy(&view).unwrap_err().to_string();
    assert!(err.contains("read-only"), "{err}");
}

#[test]
fn negative_strides_are_never_exported() {
    let flipped = iota_f32(&[4]).flip(0).unwrap();
    let err = export_versioned(&flipped, ExportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
    assert!(export_legacy(&flipped).is_err());
    let copy = flipped.contiguous_copy().unwrap();
    let m = export_versioned(&copy, ExportOptions { is_copied: true }).unwrap();
    // SAFETY: ownership passes to the importer.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert_eq!(back.view.to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0, 0.0]);
}

#[test]
fn empty_and_zero_d_tensors_export_as_dlpack_expects() {
    let empty = iota_f32(&[0, 3]);
    let m = export_versioned(&empty, ExportOptions::default()).unwrap();
    // SAFETY: fresh export.
    assert!(unsafe { m.as_ref().dl_tensor.data }.is_null());
    // SAFETY: ownership passes to the importer.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert_eq!(back.view.shape(), &[0, 3]);
    assert_eq!(back.view.numel(), 0);

    let scalar = iota_f32(&[]);
    let m = export_versioned(&scalar, ExportOptions::default()).unwrap();
    // SAFETY: ownership passes to the importer.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert_eq!(back.view.ndim(), 0);
    assert_eq!(back.view.as_slice::<f32>().unwrap(), &[0.0]);
}

#[test]
fn the_deleter_may_run_on_another_thread() {
    let view = iota_f32(&[8]);
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    let addr = m.as_ptr() as usize;
    std::thread::spawn(move || {
        // SAFETY: the export moves to this thread and is deleted once here.
        unsafe { delete(NonNull::new(addr as *mut DLManagedTensorVersioned).unwrap()) }
    })
    .join()
    .unwrap();
    // SAFETY: ownership passes to the importer; the view is dropped on another thread.
    let back =
        unsafe { import_versioned(export_versioned(&view, ExportOptions::default()).unwrap()) }
            .unwrap();
    std::thread::spawn(move || drop(back)).join().unwrap();
}

/// A hand-made foreign tensor whose deleter counts its calls.
struct Foreign {
    managed: Box<DLManagedTensorVersioned>,
    data: Vec<f32>,
    shape: Vec<i64>,
    strides: Vec<i64>,
    // An Arc, not a Box: moving a Box would invalidate the raw pointer the deleter uses.
    deleted: Arc<AtomicUsize>,
}

unsafe extern "C" fn count_deletion(m: *mut DLManagedTensorVersioned) {
    // SAFETY: manager_ctx points at the fixture's counter, which outlives the managed tensor.
    unsafe { (*((*m).manager_ctx as *const AtomicUsize)).fetch_add(1, Ordering::SeqCst) };
}

impl Foreign {
    fn new(shape: &[i64], strides: Option<&[i64]>) -> Self {
        let data: Vec<f32> = (0..64).map(|v| v as f32).collect();
        let deleted = Arc::new(AtomicUsize::new(0));
        let mut f = Foreign {
            managed: Box::new(DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: Arc::as_ptr(&deleted) as *mut c_void,
                deleter: Some(count_deletion),
                flags: 0,
                dl_tensor: DLTensor {
                    data: std::ptr::null_mut(),
                    device: DLDevice {
                        device_type: 1,
                        device_id: 0,
                    },
                    ndim: shape.len() as i32,
                    dtype: DLDataType {
                        code: 2,
                        bits: 32,
                        lanes: 1,
                    },
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
            }),
            data,
            shape: shape.to_vec(),
            strides: strides.map(<[i64]>::to_vec).unwrap_or_default(),
            deleted,
        };
        f.managed.dl_tensor.data = f.data.as_mut_ptr() as *mut c_void;
        f.managed.dl_tensor.shape = f.shape.as_mut_ptr();
        if strides.is_some() {
            f.managed.dl_tensor.strides = f.strides.as_mut_ptr();
        }
        f
    }

    fn import(&mut self) -> crate::Result<Import> {
        // SAFETY: the fixture keeps data, shape and strides alive for the test's duration.
        unsafe { import_versioned(NonNull::from(&mut *self.managed)) }
    }

    fn deletions(&self) -> usize {
        self.deleted.load(Ordering::SeqCst)
    }
}

#[test]
fn foreign_import_calls_the_deleter_exactly_once() {
    let mut f = Foreign::new(&[2, 3], Some(&[3, 1]));
    let imported = f.import().unwrap();
    let second = imported.view.clone();
    drop(imported);
    assert_eq!(f.deletions(), 0);
    assert_eq!(
        second.to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    drop(second);
    assert_eq!(f.deletions(), 1);
}

#[test]
fn null_strides_mean_compact_and_byte_offset_is_folded() {
    let mut f = Foreign::new(&[2, 2], None);
    f.managed.dl_tensor.byte_offset = 8;
    let imported = f.import().unwrap();
    assert_eq!(imported.view.strides(), &[2, 1]);
    assert_eq!(
        imported.view.data_ptr(),
        f.data.as_mut_ptr().wrapping_add(2) as *mut u8
    );
    assert_eq!(
        imported.view.to_vec::<f32>().unwrap(),
        vec![2.0, 3.0, 4.0, 5.0]
    );
}

#[test]
fn zero_d_import_accepts_null_shape() {
    let mut f = Foreign::new(&[], None);
    f.managed.dl_tensor.shape = std::ptr::null_mut();
    let imported = f.import().unwrap();
    assert_eq!(imported.view.to_vec::<f32>().unwrap(), vec![0.0]);
}

#[test]
fn empty_import_accepts_null_data() {
    let mut f = Foreign::new(&[0, 4], Some(&[0, 0]));
    f.managed.dl_tensor.data = std::ptr::null_mut();
    let imported = f.import().unwrap();
    assert_eq!(imported.view.numel(), 0);
}

#[test]
fn read_only_flag_is_surfaced_on_import() {
    let mut f = Foreign::new(&[4], Some(&[1]));
    f.managed.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let imported = f.import().unwrap();
    assert!(imported.view.is_readonly());
    // SAFETY: the call must refuse before producing a slice.
    assert!(unsafe { imported.view.as_mut_slice::<f32>() }.is_err());
}

fn assert_rejected(mut f: Foreign, expect: &str) {
    let err = f.import().unwrap_err().to_string();
    assert!(err.contains(expect), "expected {expect:?} in {err:?}");
    assert_eq!(
        f.deletions(),
        1,
        "a rejected tensor is still released, once"
    );
}

#[test]
fn malformed_tensors_get_clear_errors_and_are_released() {
    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.ndim = -1;
    assert_rejected(f, "ndim is negative");

    assert_rejected(
        Foreign::new(&[2, -3], Some(&[1, 1])),
        "shape[1] = -3 is negative",
    );

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.data = std::ptr::null_mut();
    assert_rejected(f, "NULL");

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.shape = std::ptr::null_mut();
    assert_rejected(f, "shape is NULL");

    assert_rejected(
        Foreign::new(&[1 << 40, 1 << 40], Some(&[1, 1])),
        "more elements than fit",
    );
    assert_rejected(
        Foreign::new(&[4], Some(&[i64::MAX / 2])),
        "beyond the address space",
    );
    // Found by the dlpack_import fuzz target: a stride-0 broadcast whose element count fits
    // but whose byte count does not (nbytes() then overflowed).
    assert_rejected(
        Foreign::new(&[1 << 61], Some(&[0])),
        "more bytes than the address space",
    );

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.dtype = DLDataType {
        code: 99,
        bits: 32,
        lanes: 1,
    };
    assert_rejected(f, "unknown DLPack type code");

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.dtype = DLDataType {
        code: 17,
        bits: 4,
        lanes: 1,
    };
    assert_rejected(f, "packed sub-byte");

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.device = DLDevice {
        device_type: 6,
        device_id: 0,
    };
    assert_rejected(f, "unsupported device");

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.ndim = 1000;
    assert_rejected(f, "exceeds the limit");

    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.dl_tensor.byte_offset = u64::MAX;
    assert_rejected(f, "byte_offset");
}

#[test]
fn an_unknown_major_version_is_released_without_reading_further() {
    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.version = DLPackVersion { major: 2, minor: 0 };
    // Poison what a major-2 struct may have moved: an importer that read it would fail
    // differently (or crash under Miri).
    f.managed.dl_tensor.ndim = -7;
    assert_rejected(f, "major version 2.0");
}

#[test]
fn a_null_deleter_is_allowed() {
    let mut f = Foreign::new(&[2], Some(&[1]));
    f.managed.deleter = None;
    let imported = f.import().unwrap();
    drop(imported);
    assert_eq!(f.deletions(), 0);
}

#[test]
fn foreign_owned_views_export_again() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let data = vec![1.0f32, 2.0];
    let owner: Owner = Arc::new((Guard(drops.clone()), data));
    let ptr = owner
        .downcast_ref::<(Guard, Vec<f32>)>()
        .unwrap()
        .1
        .as_ptr() as *mut u8;
    // SAFETY: the Vec inside `owner` holds two f32 for as long as `owner` lives.
    let view = unsafe {
        TensorView::from_raw_parts(ptr, DType::F32, vec![2], vec![1], Device::CPU, owner, false)
    }
    .unwrap();
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    drop(view);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: deleted once.
    unsafe { delete(m) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_legacy_view_is_read_only_unless_the_caller_vouches_and_a_versioned_flag_is_kept() {
    let view = iota_f32(&[3]);
    let take_legacy = || {
        let legacy = export_legacy(&view).unwrap();
        // SAFETY: ownership of the fresh export passes to the importer.
        unsafe { import_legacy(legacy) }.unwrap()
    };
    let shared = take_legacy().into_view(false);
    assert!(shared.is_readonly());
    assert_eq!(shared.data_ptr(), view.data_ptr());
    assert!(!take_legacy().into_view(true).is_readonly());
    let readonly = view.clone().into_readonly();
    let m = export_versioned(&readonly, ExportOptions::default()).unwrap();
    // SAFETY: as above.
    let back = unsafe { import_versioned(m) }.unwrap();
    assert!(
        back.into_view(true).is_readonly(),
        "vouching never lifts READ_ONLY"
    );
    let m = export_versioned(&view, ExportOptions::default()).unwrap();
    // SAFETY: as above.
    assert!(!unsafe { import_versioned(m) }
        .unwrap()
        .into_view(false)
        .is_readonly());
}
