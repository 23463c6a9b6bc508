//! Tables over memory the C program allocated (`zh_table_wrap`), their row batches
//! (`zh_table_rows`) and column descriptions (`zh_table_column_info`), and the schema limits a
//! C caller can reach: driven as a C program would, host memory only, so it runs under Miri.

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// pt (float32 column), position (float32 3-vector), covariance (float32 3×3, column-major).
fn schema() -> *mut zh_schema {
    let mut s = null_mut();
    // SAFETY: `s` is written by zh_schema_new; the strings are NUL-terminated.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        assert_eq!(
            zh_schema_add_column(s, c("pt").as_ptr(), c("float32").as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_vector(s, c("position").as_ptr(), c("float32").as_ptr(), 3),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_matrix(
                s,
                c("covariance").as_ptr(),
                c("float32").as_ptr(),
                3,
                3,
                zh_order::ZH_COLUMN_MAJOR as i32
            ),
            zh_status::ZH_OK
        );
    }
    s
}

/// The bytes the CMS rules give `rows` rows of `schema()` at 128-byte alignment: every column
/// and every component padded to 128 bytes.
fn soa_bytes(rows: usize) -> usize {
    (rows * 4).next_multiple_of(128) * (1 + 3 + 9)
}

/// A buffer the "program" allocated, and how often its release callback ran.
struct Program {
    words: Vec<f32>,
    releases: AtomicUsize,
}

unsafe extern "C" fn give_back(ctx: *mut c_void) {
    // SAFETY: every test passes a live Program as the context.
    unsafe { &*(ctx as *const Program) }
        .releases
        .fetch_add(1, Ordering::SeqCst);
}

impl Program {
    fn new(rows: usize) -> Box<Self> {
        Box::new(Program {
            words: (0..soa_bytes(rows) / 4).map(|i| i as f32).collect(),
            releases: AtomicUsize::new(0),
        })
    }
    fn ctx(&self) -> *mut c_void {
        self as *const Program as *mut c_void
    }
    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

/// Shape, strides and data pointer of a managed tensor; then its deleter runs.
///
/// # Safety
/// `m` must be a live managed tensor owned by the caller.
unsafe fn take(m: *mut DLManagedTensorVersioned) -> (Vec<i64>, Vec<i64>, usize) {
    // SAFETY: per the contract.
    unsafe {
        let t = &(*m).dl_tensor;
        let n = t.ndim as usize;
        let out = (
            std::slice::from_raw_parts(t.shape, n).to_vec(),
            std::slice::from_raw_parts(t.strides, n).to_vec(),
            t.data as usize,
        );
        ((*m).deleter.unwrap())(m);
        out
    }
}

#[test]
fn a_wrapped_buffer_is_mapped_in_batches_without_a_copy_and_released_once() {
    let rows = 100;
    let mut program = Program::new(rows);
    let base = program.words.as_mut_ptr();
    let s = schema();
    let (mut table, mut batch, mut tensors, mut m) =
        (null_mut(), null_mut(), null_mut(), null_mut());
    // SAFETY: live handles; the program's buffer outlives the table (its callback is counted).
    unsafe {
        assert_eq!(
            zh_table_wrap(
                s,
                rows,
                0,
                base.cast(),
                soa_bytes(rows),
                -1,
                Some(give_back),
                program.ctx(),
                &mut table
            ),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        let mut info = std::mem::MaybeUninit::uninit();
        assert_eq!(
            zh_table_get_info(table, info.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let info = info.assume_init();
        assert_eq!(info.data, base.cast::<c_void>());
        assert_eq!((info.rows, info.nbytes), (rows, soa_bytes(rows)));

        let mut col = std::mem::MaybeUninit::uninit();
        assert_eq!(
            zh_table_column_info(table, c("covariance").as_ptr(), col.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let col = col.assume_init();
        // pt takes 512 bytes (100 floats padded to 128), position 3 × 512.
        assert_eq!(
            (col.offset, col.pitch, col.kind, col.components),
            (2048, 128, 3, 9)
        );
        assert_eq!(
            (col.ndim, col.shape, col.strides),
            (3, [100, 3, 3], [1, 128, 384])
        );
        assert_eq!(
            (col.dtype_code, col.dtype_bits, col.dtype_lanes),
            (2, 32, 1)
        );

        // Batches of 25 rows, mapped one after another: each starts 25 rows further on.
        for (i, start) in (0..rows).step_by(25).enumerate() {
            assert_eq!(
                zh_table_rows(table, start, start + 25, &mut batch),
                zh_status::ZH_OK
            );
            assert_eq!(
                zh_table_map(
                    batch,
                    c("kin: position; cov: covariance").as_ptr(),
                    0,
                    &mut tensors
                ),
                zh_status::ZH_OK,
                "{}",
                last_error()
            );
            assert_eq!(zh_tensors_export(tensors, 0, &mut m), zh_status::ZH_OK);
            let (shape, strides, data) = take(m);
            assert_eq!((shape, strides), (vec![25, 3], vec![1, 128]));
            assert_eq!(data, base as usize + 512 + 4 * start, "batch {i}: no copy");
            let value = *(data as *const f32);
            assert_eq!(value, (128 + start) as f32, "the program's own numbers");
            let mut info = std::mem::MaybeUninit::uninit();
            zh_table_column_info(batch, c("pt").as_ptr(), info.as_mut_ptr());
            assert_eq!(info.assume_init().offset, 4 * start);
            zh_tensors_free(tensors);
            zh_table_free(batch);
        }
        batch = null_mut();
        assert_eq!(
            zh_table_rows(table, 90, 101, &mut batch),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("90..101"), "{}", last_error());
        assert_eq!(
            zh_table_rows(table, 50, 40, &mut batch),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(batch.is_null());

        // An exported column outlives the table; the program hears once, when it dies.
        assert_eq!(
            zh_table_column(table, c("pt").as_ptr(), &mut m),
            zh_status::ZH_OK
        );
        zh_table_free(table);
        zh_schema_free(s);
        assert_eq!(program.releases(), 0);
        let address = m as usize; // a raw pointer is not Send; its address is
        std::thread::spawn(move || take(address as *mut DLManagedTensorVersioned))
            .join()
            .unwrap();
    }
    assert_eq!(program.releases(), 1);
}

#[test]
fn a_refused_buffer_is_released_at_once_and_untouched() {
    let mut program = Program::new(40); // room for 10 rows at any of the offsets below
    let before = program.words.clone();
    let base = program.words.as_mut_ptr().cast::<u8>();
    let s = schema();
    let mut table = null_mut();
    let cases = [
        (base, soa_bytes(10) - 1, 10, -1, "bytes"),
        // SAFETY (of the add): inside the program's buffer.
        (unsafe { base.add(2) }, soa_bytes(10), 10, -1, "not aligned"),
        (null_mut(), soa_bytes(10), 10, -1, "NULL"),
        (base, soa_bytes(10), 10, 0, "CUDA"),
    ];
    for (i, (data, bytes, rows, device, says)) in cases.into_iter().enumerate() {
        // SAFETY: live schema; the pointers are inside the buffer or NULL; nothing is read.
        let status = unsafe {
            zh_table_wrap(
                s,
                rows,
                0,
                data.cast(),
                bytes,
                device,
                Some(give_back),
                program.ctx(),
                &mut table,
            )
        };
        assert_ne!(status, zh_status::ZH_OK, "{says}");
        assert!(last_error().contains(says), "{says}: {}", last_error());
        assert_eq!(
            program.releases(),
            i + 1,
            "{says}: released once, before the call returned"
        );
        assert!(table.is_null());
    }
    // SAFETY: as above; the NULL callback and the NULL out-parameter are what is tested.
    unsafe {
        assert_eq!(
            zh_table_wrap(
                s,
                10,
                0,
                base.cast(),
                soa_bytes(10),
                -1,
                None,
                program.ctx(),
                &mut table
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("release is NULL"));
        assert_eq!(
            zh_table_wrap(
                s,
                10,
                0,
                base.cast(),
                soa_bytes(10),
                -1,
                Some(give_back),
                program.ctx(),
                null_mut()
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(program.releases(), 5, "a NULL out-parameter still releases");
        assert_eq!(
            zh_table_wrap(
                null(),
                10,
                0,
                base.cast(),
                soa_bytes(10),
                -1,
                Some(give_back),
                program.ctx(),
                &mut table
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(program.releases(), 6);
        zh_schema_free(s);
    }
    assert_eq!(program.words, before, "nothing written");
}

#[test]
fn a_device_number_other_than_the_host_or_a_cuda_device_is_refused() {
    let mut program = Program::new(10);
    let base = program.words.as_mut_ptr().cast::<c_void>();
    let s = schema();
    let untouched = std::ptr::NonNull::<zh_table>::dangling().as_ptr();
    for (i, device) in [-2, -7, i32::MIN].into_iter().enumerate() {
        let mut table = untouched;
        // SAFETY: live schema and buffer; the device number is what is tested.
        let status = unsafe {
            zh_table_wrap(
                s,
                10,
                0,
                base,
                soa_bytes(10),
                device,
                Some(give_back),
                program.ctx(),
                &mut table,
            )
        };
        assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT, "device {device}");
        let says = last_error();
        assert!(
            says.contains("device") && says.contains(&device.to_string()),
            "{device}: {says}"
        );
        assert_eq!(table, untouched, "device {device}: *out untouched");
        assert_eq!(program.releases(), i + 1, "device {device}: released once");
    }
    // SAFETY: freed once.
    unsafe { zh_schema_free(s) };
}

#[test]
fn matrix_orders_and_sizes_out_of_range_are_refused() {
    let mut s = null_mut();
    let mut table = null_mut();
    // SAFETY: live handles, NUL-terminated strings.
    unsafe {
        zh_schema_new(&mut s);
        assert_eq!(
            zh_schema_add_matrix(s, c("m").as_ptr(), c("float32").as_ptr(), 3, 3, 7),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("order 7"), "{}", last_error());
        assert_eq!(zh_schema_len(s), 0);
        // (2^32+1) × 2^32 would wrap to 2^32 components: refused when the column is added.
        assert_eq!(
            zh_schema_add_matrix(
                s,
                c("m").as_ptr(),
                c("float32").as_ptr(),
                (1 << 32) + 1,
                1 << 32,
                zh_order::ZH_ROW_MAJOR as i32
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("components per row"),
            "{}",
            last_error()
        );
        assert_eq!(zh_schema_len(s), 0);
        zh_schema_free(s);

        zh_schema_new(&mut s);
        zh_schema_add_scalar(s, c("run").as_ptr(), c("int32").as_ptr());
        assert_eq!(
            zh_table_new(s, 1 << 63, 0, null(), &mut table),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("tensor dimension"),
            "{}",
            last_error()
        );
        assert!(table.is_null());
        zh_schema_free(s);
    }
}
