//! zerohop's C exchange entries that need no Python (Miri runs these): the allocator, the
//! work stream and the non-owning description.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;

use super::exchange::{allocate_like, describe, work_stream};
use super::ffi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor};
use super::import_versioned;
use crate::tensor::TensorView;

fn prototype(shape: &mut [i64], code: u8) -> DLTensor {
    DLTensor {
        data: null_mut(),
        device: DLDevice {
            device_type: 1,
            device_id: 0,
        },
        ndim: shape.len() as i32,
        dtype: DLDataType {
            code,
            bits: 32,
            lanes: 1,
        },
        shape: shape.as_mut_ptr(),
        strides: null_mut(),
        byte_offset: 0,
    }
}

unsafe extern "C" fn remember(ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    // SAFETY: the tests pass a String as the context; the strings are the allocator's.
    let seen = unsafe { &mut *(ctx as *mut String) };
    // SAFETY: NUL-terminated strings from the allocator.
    let (kind, message) = unsafe { (CStr::from_ptr(kind), CStr::from_ptr(message)) };
    *seen = format!("{}: {}", kind.to_string_lossy(), message.to_string_lossy());
}

#[test]
fn the_allocator_makes_a_zeroed_tensor_like_its_prototype() {
    let mut shape = [3_i64, 4];
    let mut proto = prototype(&mut shape, 2);
    let mut out: *mut DLManagedTensorVersioned = null_mut();
    let mut seen = String::new();
    let ctx = &mut seen as *mut String as *mut c_void;
    // SAFETY: a valid prototype and out-parameter; `remember` takes this context.
    assert_eq!(
        unsafe { allocate_like(&mut proto, &mut out, ctx, remember) },
        0
    );
    // SAFETY: a managed tensor the allocator handed over; imported (and freed) once.
    let view = unsafe { import_versioned(std::ptr::NonNull::new(out).unwrap()) }
        .unwrap()
        .into_view(false);
    assert_eq!(view.shape(), &[3, 4]);
    assert_eq!(view.to_vec::<f32>().unwrap(), vec![0.0; 12]);
    assert!(seen.is_empty());

    proto.dtype.code = 99;
    // SAFETY: as above; refused before anything is made.
    assert_eq!(
        unsafe { allocate_like(&mut proto, &mut out, ctx, remember) },
        -1
    );
    assert_eq!(seen, "RuntimeError: unsupported dtype");
    proto.dtype.code = 2;
    // SAFETY: a NULL out: the tensor made is freed, the caller told.
    assert_eq!(
        unsafe { allocate_like(&mut proto, null_mut(), ctx, remember) },
        -1
    );
    assert_eq!(seen, "RuntimeError: out is NULL");
    // SAFETY: a NULL prototype is refused.
    assert_eq!(
        unsafe { allocate_like(null_mut(), &mut out, ctx, remember) },
        -1
    );
    assert!(seen.contains("prototype is NULL"), "{seen}");
}

#[test]
fn the_work_stream_is_the_legacy_stream_on_cuda_and_null_on_the_host() {
    let mut out: *mut c_void = 7 as *mut c_void;
    // SAFETY: a writable out-parameter, then NULL (refused).
    unsafe {
        assert_eq!(work_stream(1, 0, &mut out), 0);
        assert!(out.is_null());
        assert_eq!(work_stream(2, 0, &mut out), 0);
        assert_eq!(out as usize, 1);
        assert_eq!(work_stream(2, 0, null_mut()), -1);
    }
}

#[test]
fn a_description_points_into_the_view_and_refuses_what_exports_refuse() {
    let view = TensorView::from_slice(&[1_i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let mut shape = [0_i64; 0];
    let mut d = prototype(&mut shape, 0);
    describe(&view, &mut d).unwrap();
    assert_eq!(d.data as usize, view.data_ptr() as usize);
    // SAFETY: `describe` points these at the view's two sizes and two strides.
    let (sizes, strides) = unsafe {
        (
            std::slice::from_raw_parts(d.shape, 2),
            std::slice::from_raw_parts(d.strides, 2),
        )
    };
    assert_eq!((sizes, strides), (&[2_i64, 3][..], &[3_i64, 1][..]));
    let flipped = view.flip(1).unwrap();
    assert!(
        describe(&flipped, &mut d).is_err(),
        "negative strides never leave"
    );
}
