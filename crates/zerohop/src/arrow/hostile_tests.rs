//! Arrow producers that lie: device buffers the host must not read, children shorter than
//! their parents, lengths no memory can hold, negative fixed sizes, CUDA claims on a machine
//! without CUDA. Each is refused by name, released once, and never read through.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::Array;
use arrow_schema::{DataType, Field, Fields};

use super::device::import_device_where;
use super::ffi_check::RawArrowArray;
use super::*;
use crate::device::DeviceKind;
use crate::error::Error;

/// What a hand-built array owns (its tables and children), freed by [`release`].
struct Private {
    buffers: Vec<*const c_void>,
    children: Vec<*const RawArrowArray>,
    released: &'static AtomicUsize,
}

unsafe extern "C" fn release(array: *mut RawArrowArray) {
    // SAFETY: `array` was built by `node` and is released once (release is cleared below).
    unsafe {
        let private = Box::from_raw((*array).private_data.cast::<Private>());
        for &child in &private.children {
            let child = child as *mut RawArrowArray;
            if let Some(release) = (*child).release {
                release(child);
            }
            drop(Box::from_raw(child));
        }
        private.released.fetch_add(1, Ordering::SeqCst);
        (*array).release = None;
    }
}

/// An array node as a producer hands it over: any length and offset, the given buffers and
/// children, no nulls.
fn node(
    length: i64,
    offset: i64,
    buffers: Vec<*const c_void>,
    children: Vec<RawArrowArray>,
    released: &'static AtomicUsize,
) -> RawArrowArray {
    let private = Box::new(Private {
        buffers,
        children: children
            .into_iter()
            .map(|c| Box::into_raw(Box::new(c)) as *const RawArrowArray)
            .collect(),
        released,
    });
    RawArrowArray {
        length,
        null_count: 0,
        offset,
        n_buffers: private.buffers.len() as i64,
        n_children: private.children.len() as i64,
        buffers: private.buffers.as_ptr(),
        children: private.children.as_ptr(),
        dictionary: std::ptr::null(),
        release: Some(release),
        private_data: Box::into_raw(private).cast(),
    }
}

fn ffi(raw: RawArrowArray) -> FFI_ArrowArray {
    // SAFETY: identical `#[repr(C)]` layouts of `struct ArrowArray` (asserted in ffi_check).
    unsafe { std::mem::transmute::<RawArrowArray, FFI_ArrowArray>(raw) }
}

fn on(device_type: DeviceKind, raw: RawArrowArray) -> FFI_ArrowDeviceArray {
    FFI_ArrowDeviceArray {
        array: ffi(raw),
        device_id: 0,
        device_type: device_type as i32,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    }
}

/// Memory the host must not read: a page with no access rights (any read is a SIGSEGV), or,
/// under Miri, an address with no provenance (any read is reported as undefined behaviour).
struct Unreadable(*mut c_void);

impl Unreadable {
    const BYTES: usize = 4096;

    fn new() -> Self {
        #[cfg(miri)]
        return Unreadable(std::ptr::without_provenance_mut(0x7f00_0000));
        #[cfg(not(miri))]
        {
            // SAFETY: an anonymous private mapping with no access, unmapped in Drop.
            let page = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    Self::BYTES,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(page, libc::MAP_FAILED);
            Unreadable(page)
        }
    }

    fn at(&self, byte: usize) -> *const c_void {
        (self.0 as *const u8).wrapping_add(byte).cast()
    }
}

impl Drop for Unreadable {
    fn drop(&mut self) {
        #[cfg(not(miri))]
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe {
            libc::munmap(self.0, Self::BYTES);
        }
    }
}

fn schema_of(data_type: &DataType) -> FFI_ArrowSchema {
    FFI_ArrowSchema::try_from(data_type).unwrap()
}

#[test]
fn a_device_string_column_is_refused_by_name_before_its_offsets_are_read() {
    // The shape cuDF exports: int32 offsets and UTF-8 bytes, both in device memory.
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let device = Unreadable::new();
    let strings = || {
        node(
            3,
            0,
            vec![std::ptr::null(), device.at(0), device.at(64)],
            vec![],
            &RELEASED,
        )
    };
    let err = import_device(on(DeviceKind::Cuda, strings()), &schema_of(&DataType::Utf8))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no tensor form") && err.contains("Utf8"),
        "{err}"
    );
    let batch = DataType::Struct(Fields::from(vec![
        Field::new("x", DataType::Float32, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let floats = node(
        3,
        0,
        vec![std::ptr::null(), device.at(128)],
        vec![],
        &RELEASED,
    );
    let table = node(
        3,
        0,
        vec![std::ptr::null()],
        vec![floats, strings()],
        &RELEASED,
    );
    let err = import_device(on(DeviceKind::Cuda, table), &schema_of(&batch))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"name\"") && err.contains("no tensor form"),
        "{err}"
    );
    assert_eq!(
        RELEASED.load(Ordering::SeqCst),
        4,
        "every struct released once"
    );
}

#[test]
fn the_structural_walk_of_unreadable_memory_refuses_types_it_would_have_to_read() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let device = Unreadable::new();
    let list = DataType::List(std::sync::Arc::new(Field::new(
        "item",
        DataType::Int32,
        false,
    )));
    let items = node(
        4,
        0,
        vec![std::ptr::null(), device.at(0)],
        vec![],
        &RELEASED,
    );
    let array = ffi(node(
        2,
        0,
        vec![std::ptr::null(), device.at(64)],
        vec![items],
        &RELEASED,
    ));
    let err = ffi_check::check_unreadable_array(&array, &list, "l").unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[test]
fn struct_children_shorter_than_their_parent_are_refused() {
    // A host-readable device array (pinned, managed or ROCm host memory) gets the same
    // checks as a host array: 10,000,000 rows over a one-element child used to be accepted.
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let one = [1.0f64];
    let batch = DataType::Struct(Fields::from(vec![Field::new(
        "x",
        DataType::Float64,
        false,
    )]));
    for kind in [
        DeviceKind::CudaHost,
        DeviceKind::CudaManaged,
        DeviceKind::RocmHost,
    ] {
        let child = node(
            1,
            0,
            vec![std::ptr::null(), one.as_ptr().cast()],
            vec![],
            &RELEASED,
        );
        let table = node(
            10_000_000,
            0,
            vec![std::ptr::null()],
            vec![child],
            &RELEASED,
        );
        let err = import_device_where(on(kind, table), &schema_of(&batch), |_, _| Ok(()))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains(".x: has 1 entries"), "{kind:?}: {err}");
    }
    // The same lie through the host import.
    let child = node(
        1,
        0,
        vec![std::ptr::null(), one.as_ptr().cast()],
        vec![],
        &RELEASED,
    );
    let table = node(3, 2, vec![std::ptr::null()], vec![child], &RELEASED);
    // SAFETY: the child's buffer holds what the child's own length says; the lie is the
    // parent's, and must be caught before anything reads through it.
    let err = unsafe { import_host_batch(ffi(table), &batch, None, "t") }.unwrap_err();
    assert!(err.to_string().contains("parent addresses 5"), "{err}");
    assert_eq!(
        RELEASED.load(Ordering::SeqCst),
        8,
        "each struct released once"
    );
}

#[test]
fn fixed_size_list_items_must_cover_every_row() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let values = [0f32; 4];
    let rows3 = DataType::FixedSizeList(
        std::sync::Arc::new(Field::new("item", DataType::Float32, false)),
        3,
    );
    let items = node(
        4,
        0,
        vec![std::ptr::null(), values.as_ptr().cast()],
        vec![],
        &RELEASED,
    );
    let lists = node(2, 0, vec![std::ptr::null()], vec![items], &RELEASED);
    let err = import_device_where(on(DeviceKind::Cuda, lists), &schema_of(&rows3), |_, _| {
        Ok(())
    })
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("has 4 entries, its parent addresses 6"),
        "{err}"
    );
    assert_eq!(
        RELEASED.load(Ordering::SeqCst),
        2,
        "each struct released once"
    );
}

#[test]
fn list_offsets_past_the_items_are_refused() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let offsets = [0i32, 2, 9];
    let values = [0i32; 4];
    let list = DataType::List(std::sync::Arc::new(Field::new(
        "item",
        DataType::Int32,
        false,
    )));
    let items = node(
        4,
        0,
        vec![std::ptr::null(), values.as_ptr().cast()],
        vec![],
        &RELEASED,
    );
    let array = node(
        2,
        0,
        vec![std::ptr::null(), offsets.as_ptr().cast()],
        vec![items],
        &RELEASED,
    );
    let err = ffi_check::check_array(&ffi(array), &list, "l").unwrap_err();
    assert!(err.to_string().contains("ends at offset 9"), "{err}");
}

#[test]
fn a_boolean_length_no_memory_can_hold_is_refused_at_import() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let bits = [0xffu8; 16];
    let array = node(
        i64::MAX,
        0,
        vec![std::ptr::null(), bits.as_ptr().cast()],
        vec![],
        &RELEASED,
    );
    // SAFETY: the lie (a 16-byte buffer for 2^63 - 1 rows) is what is under test; the
    // importer must refuse it before reading the buffer.
    let err = unsafe { import_host_batch(ffi(array), &DataType::Boolean, None, "b") }.unwrap_err();
    assert!(
        err.to_string()
            .contains("past the end of any address space"),
        "{err}"
    );
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
}

#[test]
#[cfg_attr(miri, ignore = "asks the allocator for 2^59 bytes")]
fn unpacking_more_booleans_than_memory_holds_is_an_error_not_an_abort() {
    // 2^59 rows pass the address-space check (their bits fit below it); the byte per row
    // they unpack to cannot be allocated anywhere, and used to abort the process.
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let bits = [0xffu8; 16];
    let array = node(
        1 << 59,
        0,
        vec![std::ptr::null(), bits.as_ptr().cast()],
        vec![],
        &RELEASED,
    );
    // SAFETY: nothing reads the bits before the allocation fails (it is the first step).
    let import = unsafe { import_host_batch(ffi(array), &DataType::Boolean, None, "b") }.unwrap();
    let options = ImportOptions {
        allow_copy: true,
        fill: None,
    };
    let column = import.batch.column(0).to_data();
    let err = array_to_tensor(&column, "column \"b\"", options)
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { .. } | Error::InvalidTensor(_)),
        "{err}"
    );
}

#[test]
fn negative_fixed_sizes_are_errors_not_panics() {
    for format in ["w:-1", "+w:-1"] {
        let children = if format.starts_with('+') {
            vec![FFI_ArrowSchema::try_new("i", vec![], None).unwrap()]
        } else {
            vec![]
        };
        let schema = FFI_ArrowSchema::try_new(format, children, None).unwrap();
        let err = schema_data_type(&schema)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("negative fixed size (-1)"), "{format}: {err}");
    }
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let array = ffi(node(
        0,
        0,
        vec![std::ptr::null(), std::ptr::null()],
        vec![],
        &RELEASED,
    ));
    let err = check_array(&array, &DataType::FixedSizeBinary(-1), "w").unwrap_err();
    assert!(err.to_string().contains("negative fixed size"), "{err}");
}

#[test]
fn cuda_memory_is_refused_where_cuda_is_not() {
    #[cfg(feature = "cuda")]
    if crate::cuda::is_available() {
        return;
    }
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let device = Unreadable::new();
    let floats = node(
        3,
        0,
        vec![std::ptr::null(), device.at(0)],
        vec![],
        &RELEASED,
    );
    let err = import_device(on(DeviceKind::Cuda, floats), &schema_of(&DataType::Float32))
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::CudaUnavailable { .. }), "{err}");
    assert!(err.to_string().contains("Arrow device array"), "{err}");
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1, "released on refusal");
}
