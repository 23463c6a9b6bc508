use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{
    Array, BooleanArray, FixedSizeListArray, Float32Array, Float64Array, Int32Array, Int64Array,
    UInt8Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field};

use super::ffi_check::RawArrowArray;
use super::*;
use crate::buffer::{Buffer, Owner};
use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::TensorView;

/// A device import that takes the device as present: these tests present host memory as a
/// CUDA device's on machines without one.
fn import_anywhere(
    array: FFI_ArrowDeviceArray,
    schema: &arrow_schema::ffi::FFI_ArrowSchema,
) -> crate::error::Result<DeviceImport> {
    device::import_device_where(array, schema, |_, _| Ok(()))
}

fn values_ptr(array: &dyn Array) -> *const u8 {
    let data = array.to_data();
    let mut node = data;
    while let DataType::FixedSizeList(..) = node.data_type() {
        node = node.child_data()[0].clone();
    }
    node.buffers()[0].as_ptr()
}

#[test]
fn every_numeric_dtype_crosses_both_ways_without_copying() {
    for dtype in [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::F32,
        DType::F64,
    ] {
        let view = TensorView::zeros(dtype, &[7]).unwrap();
        let exported = tensor_to_array(&view, "t", false).unwrap();
        assert!(!exported.copied);
        assert_eq!(exported.array.data_type(), &arrow_type_of(dtype).unwrap());
        assert_eq!(values_ptr(&exported.array), view.data_ptr() as *const u8);
        let back =
            array_to_tensor(&exported.array.to_data(), "a", ImportOptions::default()).unwrap();
        assert!(!back.copied());
        assert_eq!(back.view.data_ptr(), view.data_ptr(), "{dtype}");
        assert_eq!(back.view.dtype(), dtype);
        assert!(
            back.view.is_readonly(),
            "Arrow data is immutable once shared"
        );
    }
}

#[test]
fn a_sliced_array_becomes_a_view_at_its_offset() {
    let array = Int64Array::from_iter_values(0..100);
    let sliced = array.slice(10, 5);
    let t = array_to_tensor(&sliced.to_data(), "a", ImportOptions::default()).unwrap();
    assert_eq!(t.view.shape(), &[5]);
    assert_eq!(t.view.data_ptr() as *const u8, unsafe {
        array.values().inner().as_ptr().add(10 * 8)
    });
    assert_eq!(t.view.to_vec::<i64>().unwrap(), vec![10, 11, 12, 13, 14]);
}

#[test]
fn nulls_are_an_error_unless_a_fill_value_is_chosen() {
    let array = Float32Array::from(vec![Some(1.0), None, Some(3.0), None]);
    let err = array_to_tensor(&array.to_data(), "column \"x\"", ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("column \"x\"") && err.contains("2 nulls"),
        "{err}"
    );
    let filled = array_to_tensor(
        &array.to_data(),
        "x",
        ImportOptions {
            fill: Some(-1.0),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(filled.copied());
    assert_eq!(
        filled.view.to_vec::<f32>().unwrap(),
        vec![1.0, -1.0, 3.0, -1.0]
    );
    // The source is untouched.
    assert!(array.is_null(1));
}

#[test]
fn nulls_in_a_sliced_array_follow_the_slice() {
    let array = Int32Array::from(vec![Some(1), None, Some(3), Some(4), None]);
    let sliced = array.slice(1, 3); // [None, 3, 4]
    let filled = array_to_tensor(
        &sliced.to_data(),
        "x",
        ImportOptions {
            fill: Some(0.0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(filled.view.to_vec::<i32>().unwrap(), vec![0, 3, 4]);
    let no_nulls = array.slice(2, 2);
    let view = array_to_tensor(&no_nulls.to_data(), "x", ImportOptions::default()).unwrap();
    assert!(!view.copied(), "a slice without nulls needs no fill");
}

#[test]
fn a_fill_value_the_type_cannot_hold_is_refused() {
    let array = UInt8Array::from(vec![Some(1), None]);
    for fill in [-1.0, 256.0, 0.5] {
        let err = array_to_tensor(
            &array.to_data(),
            "x",
            ImportOptions {
                fill: Some(fill),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("fill value"), "{fill}: {err}");
    }
}

#[test]
fn fixed_size_lists_are_row_major_tensors_both_ways() {
    let values = TensorView::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    let exported = tensor_to_array(&values, "v", false).unwrap();
    assert!(matches!(
        exported.array.data_type(),
        DataType::FixedSizeList(_, 2)
    ));
    assert_eq!(values_ptr(&exported.array), values.data_ptr() as *const u8);
    let back = array_to_tensor(&exported.array.to_data(), "v", ImportOptions::default()).unwrap();
    assert_eq!(back.view.shape(), &[3, 2]);
    assert_eq!(back.view.data_ptr(), values.data_ptr());

    let matrices = TensorView::zeros(DType::F32, &[4, 2, 3]).unwrap();
    let exported = tensor_to_array(&matrices, "m", false).unwrap();
    let back = array_to_tensor(&exported.array.to_data(), "m", ImportOptions::default()).unwrap();
    assert_eq!(back.view.shape(), &[4, 2, 3]);
    assert_eq!(back.view.data_ptr(), matrices.data_ptr());
}

#[test]
fn a_sliced_fixed_size_list_starts_at_its_row() {
    let child = Float32Array::from_iter_values((0..12).map(|v| v as f32));
    let field = Arc::new(Field::new("item", DataType::Float32, false));
    let list = FixedSizeListArray::new(field, 3, Arc::new(child), None);
    let sliced = list.slice(2, 2);
    let t = array_to_tensor(&sliced.to_data(), "v", ImportOptions::default()).unwrap();
    assert_eq!(t.view.shape(), &[2, 3]);
    assert_eq!(
        t.view.to_vec::<f32>().unwrap(),
        vec![6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    );
}

#[test]
fn booleans_are_copied_only_when_allowed() {
    let array = BooleanArray::from(vec![true, false, true]);
    let err = array_to_tensor(&array.to_data(), "flags", ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("copy"), "{err}");
    let t = array_to_tensor(
        &array.to_data(),
        "flags",
        ImportOptions {
            allow_copy: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(t.copied());
    assert_eq!(t.view.dtype(), DType::BOOL);
    let back = tensor_to_array(&t.view, "flags", true).unwrap();
    assert!(back.copied);
    let bools = back.array.as_any().downcast_ref::<BooleanArray>().unwrap();
    assert_eq!(
        bools.iter().collect::<Vec<_>>(),
        vec![Some(true), Some(false), Some(true)]
    );
}

#[test]
fn strided_tensors_are_transposed_only_when_allowed() {
    let soa_like = TensorView::from_slice(&[1i32, 2, 3, 10, 20, 30], &[2, 3])
        .unwrap()
        .transpose(0, 1)
        .unwrap(); // (3, 2) with strides (1, 3): components stored apart
    let err = tensor_to_array(&soa_like, "pos", false).unwrap_err();
    assert!(err.to_string().contains("pos"), "{err}");
    let exported = tensor_to_array(&soa_like, "pos", true).unwrap();
    assert!(exported.copied);
    let back = array_to_tensor(&exported.array.to_data(), "pos", ImportOptions::default()).unwrap();
    assert_eq!(
        back.view.to_vec::<i32>().unwrap(),
        vec![1, 10, 2, 20, 3, 30]
    );
}

#[test]
fn device_tensors_and_scalars_have_no_host_array() {
    let owner: Owner = Arc::new(());
    // SAFETY: the pointer is never dereferenced.
    let device = unsafe {
        TensorView::from_raw_parts(
            std::ptr::NonNull::<f32>::dangling().as_ptr() as *mut u8,
            DType::F32,
            vec![4],
            vec![1],
            Device::cuda(0),
            owner,
            false,
        )
    }
    .unwrap();
    assert!(tensor_to_array(&device, "d", true)
        .unwrap_err()
        .to_string()
        .contains("device interface"));
    let scalar = TensorView::zeros(DType::F32, &[]).unwrap();
    assert!(tensor_to_array(&scalar, "s", true).is_err());
}

#[test]
fn the_arrow_array_keeps_zerohop_memory_alive() {
    let view = TensorView::from_slice(&[5.0f64, 6.0], &[2]).unwrap();
    let array = tensor_to_array(&view, "v", false).unwrap().array;
    drop(view);
    let floats = array.as_any().downcast_ref::<Float64Array>().unwrap();
    assert_eq!(floats.values(), &[5.0, 6.0]);
}

#[test]
fn the_c_data_interface_round_trip_shares_memory() {
    let view = TensorView::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let array = tensor_to_array(&view, "v", false).unwrap().array;
    let (ffi_array, ffi_schema) = to_ffi(&array.to_data()).unwrap();
    check_array(&ffi_array, array.data_type(), "v").unwrap();
    // SAFETY: a struct arrow-rs just exported.
    let data = unsafe { from_ffi(ffi_array, &ffi_schema) }.unwrap();
    let back = array_to_tensor(&data, "v", ImportOptions::default()).unwrap();
    assert_eq!(back.view.data_ptr(), view.data_ptr());
}

/// Corrupts one field of an exported struct, checks it, and restores it before release.
fn check_corrupted(corrupt: impl FnOnce(&mut RawArrowArray), expect: &str) {
    let array = Float32Array::from(vec![1.0, 2.0]);
    let (mut ffi_array, _schema) = to_ffi(&array.to_data()).unwrap();
    // SAFETY: same C layout (asserted in ffi_check); the struct is restored before drop.
    let raw = unsafe { &mut *(&mut ffi_array as *mut _ as *mut RawArrowArray) };
    let saved = (
        raw.length,
        raw.offset,
        raw.n_buffers,
        raw.buffers,
        raw.null_count,
    );
    corrupt(raw);
    let err = check_array(&ffi_array, &DataType::Float32, "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains(expect), "{err}");
    // SAFETY: as above.
    let raw = unsafe { &mut *(&mut ffi_array as *mut _ as *mut RawArrowArray) };
    (
        raw.length,
        raw.offset,
        raw.n_buffers,
        raw.buffers,
        raw.null_count,
    ) = saved;
}

#[test]
fn malformed_c_structs_are_errors_not_panics() {
    check_corrupted(|a| a.length = -1, "length -1");
    check_corrupted(|a| a.offset = i64::MAX, "overflows");
    check_corrupted(|a| a.null_count = -5, "null_count -5");
    check_corrupted(|a| a.n_buffers = 1, "has 1 buffers");
    check_corrupted(|a| a.buffers = std::ptr::null(), "NULL buffer table");
    let array = Float32Array::from(vec![1.0]);
    let (ffi_array, _schema) = to_ffi(&array.to_data()).unwrap();
    let wrong_type =
        DataType::FixedSizeList(Arc::new(Field::new("i", DataType::Float32, false)), 1);
    assert!(check_array(&ffi_array, &wrong_type, "x")
        .unwrap_err()
        .to_string()
        .contains("has 2 buffers, the type has 1"));
    let released = arrow_array::ffi::FFI_ArrowArray::empty();
    assert!(check_array(&released, &DataType::Float32, "x")
        .unwrap_err()
        .to_string()
        .contains("released"));
}

/// A fake device allocation: never dereferenced, counts its release.
fn fake_device_tensor(shape: &[i64], released: &Arc<AtomicUsize>) -> TensorView {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let owner: Owner = Arc::new(Counted(released.clone()));
    let numel: i64 = shape.iter().product();
    // SAFETY: the memory is never touched; the buffer only carries an address.
    let buffer = unsafe {
        Buffer::from_foreign(
            std::ptr::NonNull::new(0x7f00_0000_0000usize as *mut u8).unwrap(),
            numel as usize * 4,
            Device::cuda(1),
            owner,
        )
    };
    TensorView::from_buffer(buffer, DType::F32, shape).unwrap()
}

#[test]
fn device_arrays_round_trip_without_touching_device_memory() {
    let released = Arc::new(AtomicUsize::new(0));
    let event_freed = Arc::new(AtomicUsize::new(0));
    let x = fake_device_tensor(&[8], &released);
    let v = fake_device_tensor(&[8, 3], &released);
    let (xp, vp) = (x.data_ptr(), v.data_ptr());
    let mut event_slot = Box::new(0usize);
    struct Freed(Arc<AtomicUsize>);
    impl Drop for Freed {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let sync = SyncEvent {
        pointer: &mut *event_slot as *mut usize as *mut std::ffi::c_void,
        owner: Arc::new(Freed(event_freed.clone())),
    };
    let (array, schema) = export_device(
        &[("x".to_string(), x), ("v".to_string(), v)],
        true,
        Some(sync),
    )
    .unwrap();
    assert_eq!((array.device_type, array.device_id), (2, 1));
    assert_eq!(array.reserved, [0; 3]);
    let event = array.sync_event;
    assert_eq!(
        released.load(Ordering::SeqCst),
        0,
        "the export holds the tensors"
    );
    let imported = import_anywhere(array, &schema).unwrap();
    assert_eq!(imported.device, Device::cuda(1));
    assert_eq!(imported.sync_event, event);
    let names: Vec<&str> = imported.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x", "v"]);
    assert_eq!(imported.columns[0].1.data_ptr(), xp);
    assert_eq!(imported.columns[1].1.data_ptr(), vp);
    assert_eq!(imported.columns[1].1.shape(), &[8, 3]);
    drop(imported);
    assert_eq!(
        released.load(Ordering::SeqCst),
        2,
        "release frees both tensors"
    );
    assert_eq!(event_freed.load(Ordering::SeqCst), 1, "and the event, once");
}

#[test]
fn device_export_refuses_what_would_need_a_copy() {
    let released = Arc::new(AtomicUsize::new(0));
    let v = fake_device_tensor(&[4, 2], &released);
    let strided = v.transpose(0, 1).unwrap();
    let err = export_device(&[("v".into(), strided)], false, None).unwrap_err();
    assert!(err.to_string().contains("compact"), "{err}");
    let other_rows = fake_device_tensor(&[3], &released);
    let err = export_device(&[("a".into(), v), ("b".into(), other_rows)], true, None).unwrap_err();
    assert!(err.to_string().contains("row count"), "{err}");
}

/// A host array presented as a CUDA device array: the importer never reads buffers, but it
/// must judge the validity pointer and the type.
fn import_as_cuda(array: &dyn Array) -> crate::error::Result<DeviceImport> {
    let (ffi, schema) = to_ffi(&array.to_data()).unwrap();
    let device_array = FFI_ArrowDeviceArray {
        array: ffi,
        device_id: 0,
        device_type: 2,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    };
    import_anywhere(device_array, &schema)
}

#[test]
fn an_unnamed_plain_device_array_is_one_column_named_values() {
    let plain = Float32Array::from(vec![1.0, 2.0, 3.0]);
    let imported = import_as_cuda(&plain).unwrap();
    let names: Vec<&str> = imported.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["values"], "named as the host import names it");
}

#[test]
fn device_arrays_with_nulls_or_strings_are_refused() {
    let with_nulls = Float32Array::new(
        vec![1.0, 2.0].into(),
        Some(NullBuffer::from(vec![true, false])),
    );
    let err = import_as_cuda(&with_nulls).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("nulls on the device"), "{err}");
    let strings = arrow_array::StringArray::from(vec!["a"]);
    let err = import_as_cuda(&strings).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("no tensor form"), "{err}");
}

#[test]
fn a_device_stream_yields_its_batch_once_then_ends() {
    let released = Arc::new(AtomicUsize::new(0));
    let x = fake_device_tensor(&[5], &released);
    let xp = x.data_ptr();
    let (array, schema) = export_device(&[("x".to_string(), x)], true, None).unwrap();
    let data_type = DataType::try_from(&schema).unwrap();
    let stream = FFI_ArrowDeviceArrayStream::single(data_type.clone(), array);
    assert_eq!(stream.device_type, 2);
    let (schema, mut arrays) = read_device_stream(stream).unwrap();
    assert_eq!(DataType::try_from(&schema).unwrap(), data_type);
    assert_eq!(arrays.len(), 1);
    let imported = import_anywhere(arrays.remove(0), &schema).unwrap();
    assert_eq!(imported.columns[0].1.data_ptr(), xp);
    drop(imported);
    assert_eq!(released.load(Ordering::SeqCst), 1);
}

#[test]
fn an_unread_device_stream_releases_its_batch() {
    let released = Arc::new(AtomicUsize::new(0));
    let x = fake_device_tensor(&[5], &released);
    let (array, _schema) = export_device(&[("x".to_string(), x)], false, None).unwrap();
    drop(FFI_ArrowDeviceArrayStream::single(DataType::Float32, array));
    assert_eq!(released.load(Ordering::SeqCst), 1);
    assert!(read_device_stream(FFI_ArrowDeviceArrayStream::empty()).is_err());
}

/// A string array with the given (possibly invalid) offsets over `values`, in the C interface.
fn utf8_ffi(offsets: &[i32], values: &[u8]) -> arrow_array::ffi::FFI_ArrowArray {
    let data = arrow_data::ArrayDataBuilder::new(DataType::Utf8)
        .len(offsets.len() - 1)
        .add_buffer(arrow_buffer::Buffer::from_slice_ref(offsets))
        .add_buffer(arrow_buffer::Buffer::from_slice_ref(values));
    // SAFETY: deliberately unchecked: these are a bad producer's offsets, and only the
    // importer (which must refuse them before reading through them) sees the struct.
    let data = unsafe { data.build_unchecked() };
    to_ffi(&data).unwrap().0
}

#[test]
fn string_offsets_that_decrease_or_start_negative_are_refused_before_any_read() {
    // Found by the arrow_import fuzz target: arrow-rs sizes the values buffer by the last
    // offset and its validation then read past a short buffer.
    for (offsets, expect) in [
        (&[0, 5, 3][..], "decreasing offsets (5 then 3 at row 1)"),
        (&[-1, 0, 1][..], "negative offset (-1)"),
    ] {
        let array = utf8_ffi(offsets, b"hello");
        // SAFETY: the buffers are as long as the declared length requires.
        let err = unsafe { import_host_batch(array, &DataType::Utf8, None, "s") }
            .unwrap_err()
            .to_string();
        assert!(err.contains(expect), "{err}");
    }
    let good = utf8_ffi(&[0, 2, 5], b"hello");
    // SAFETY: as above.
    let import = unsafe { import_host_batch(good, &DataType::Utf8, None, "s") }.unwrap();
    assert_eq!(import.batch.num_rows(), 2);
}

#[test]
fn a_host_import_shares_the_producers_buffer() {
    let array = Int32Array::from(vec![1, 2, 3]);
    let values = values_ptr(&array);
    let (ffi_array, _schema) = to_ffi(&array.to_data()).unwrap();
    // SAFETY: an array arrow-rs exported itself.
    let import = unsafe { import_host_batch(ffi_array, &DataType::Int32, None, "n") }.unwrap();
    assert!(import.realigned.is_empty());
    assert_eq!(import.batch.schema().field(0).name(), "n");
    assert_eq!(values_ptr(import.batch.column(0).as_ref()), values);
}

#[test]
fn schemas_missing_the_children_their_format_needs_are_errors_not_panics() {
    // Found by the arrow_import fuzz target: arrow-rs asserts on a list schema without its
    // child, which a Python producer could trigger.
    use arrow_schema::ffi::FFI_ArrowSchema;
    for (format, expect) in [("+l", "needs 1"), ("+r", "needs 2"), ("+w:3", "needs 1")] {
        let schema = FFI_ArrowSchema::try_new(format, vec![], None).unwrap();
        let err = schema_data_type(&schema).unwrap_err().to_string();
        assert!(err.contains(expect), "{format}: {err}");
    }
    let released = FFI_ArrowSchema::empty();
    assert!(schema_data_type(&released)
        .unwrap_err()
        .to_string()
        .contains("released"));
    let item = FFI_ArrowSchema::try_new("f", vec![], None).unwrap();
    let list = FFI_ArrowSchema::try_new("+l", vec![item], None).unwrap();
    let (data_type, full) = schema_data_type(&list).unwrap();
    assert!(matches!(data_type, DataType::List(_)));
    assert!(full.is_none());
}
