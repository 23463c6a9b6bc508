//! Messages a C caller reads name what a C caller passes (`ZH_MAP_ALLOW_COPY`), never the
//! Python package's keywords (`copy=True`). Host memory only: runs under Miri.

use std::ffi::c_void;
use std::ptr::{addr_of_mut, null, null_mut};

use zerohop::dlpack::ffi::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use zerohop_capi::*;

mod common;
use common::{c, last_error};

fn speaks_c(says: &str) {
    assert!(!says.contains("copy=True"), "Python's spelling: {says}");
    assert!(!says.contains("True") && !says.contains("None"), "{says}");
}

#[test]
fn a_group_strides_cannot_describe_names_the_map_flag_that_allows_a_copy() {
    let (mut s, mut t, mut tensors) = (null_mut(), null_mut(), null_mut());
    // SAFETY: live handles, NUL-terminated strings.
    unsafe {
        zh_schema_new(&mut s);
        for name in ["x", "y", "z"] {
            zh_schema_add_column(s, c(name).as_ptr(), c("float32").as_ptr());
        }
        assert_eq!(zh_table_new(s, 10, 0, null(), &mut t), zh_status::ZH_OK);
        let spec = c("zyx: z, y, x");
        assert_eq!(
            zh_table_map(t, spec.as_ptr(), 0, &mut tensors),
            zh_status::ZH_INVALID_ARGUMENT
        );
        let says = last_error();
        assert!(says.contains("not evenly spaced"), "{says}");
        assert!(says.contains("allow a copy (ZH_MAP_ALLOW_COPY)"), "{says}");
        speaks_c(&says);
        // And the flag it names is the way out.
        assert_eq!(
            zh_table_map(t, spec.as_ptr(), ZH_MAP_ALLOW_COPY, &mut tensors),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        assert!(zh_tensors_copied(tensors, 0));
        zh_tensors_free(tensors);
        zh_table_free(t);
        zh_schema_free(s);
    }
}

/// Four float32 values seen backwards (stride -1), as a producer may hand them over.
struct Reversed {
    values: [f32; 4],
    shape: [i64; 1],
    strides: [i64; 1],
    managed: DLManagedTensorVersioned,
}

unsafe extern "C" fn drop_reversed(m: *mut DLManagedTensorVersioned) {
    // SAFETY: `manager_ctx` is the Box made in `reversed`, released here once.
    drop(unsafe { Box::from_raw((*m).manager_ctx.cast::<Reversed>()) });
}

fn reversed() -> *mut DLManagedTensorVersioned {
    let tensor = DLTensor {
        data: null_mut(),
        device: DLDevice {
            device_type: 1,
            device_id: 0,
        },
        ndim: 1,
        dtype: DLDataType {
            code: 2,
            bits: 32,
            lanes: 1,
        },
        shape: null_mut(),
        strides: null_mut(),
        byte_offset: 0,
    };
    let r = Box::into_raw(Box::new(Reversed {
        values: [0., 1., 2., 3.],
        shape: [4],
        strides: [-1],
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 3 },
            manager_ctx: null_mut(),
            deleter: Some(drop_reversed),
            flags: 0,
            dl_tensor: tensor,
        },
    }));
    // SAFETY: `r` is the live allocation just made; every pointer into it is derived from
    // `r` itself, so none invalidates another.
    unsafe {
        (*r).managed.manager_ctx = r.cast::<c_void>();
        (*r).managed.dl_tensor.data = addr_of_mut!((*r).values[3]).cast();
        (*r).managed.dl_tensor.shape = addr_of_mut!((*r).shape).cast();
        (*r).managed.dl_tensor.strides = addr_of_mut!((*r).strides).cast();
        addr_of_mut!((*r).managed)
    }
}

#[test]
fn an_adopted_tensor_with_negative_strides_is_refused_at_export_in_c_terms() {
    let (mut t, mut m) = (null_mut(), null_mut());
    let name = c("r");
    // SAFETY: the managed tensor's ownership passes to the table; live handles.
    unsafe {
        assert_eq!(
            zh_table_from_columns(&name.as_ptr(), &reversed(), 1, &mut t),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        assert_eq!(
            zh_table_column(t, name.as_ptr(), &mut m),
            zh_status::ZH_UNSUPPORTED
        );
        let says = last_error();
        assert!(says.contains("negative"), "{says}");
        assert!(
            says.contains("non-negative strides (zh_table_from_columns)"),
            "{says}"
        );
        speaks_c(&says);
        assert!(m.is_null());
        zh_table_free(t);
    }
}
