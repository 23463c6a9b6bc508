//! A table's Arrow faces: what each kind exports, what an import becomes, and the copies
//! reported on the way (host memory only; Miri runs these).

use std::sync::Arc;

use arrow_array::{Array, Float64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};

use super::*;
use crate::arrow::Imported;
use crate::memory::Stream;
use crate::{DType, TensorView};

fn batch(values: &[f64]) -> RecordBatch {
    let schema = Arc::new(ArrowSchema::new(vec![Field::new(
        "x",
        DataType::Float64,
        false,
    )]));
    RecordBatch::try_new(schema, vec![Arc::new(Float64Array::from(values.to_vec()))]).unwrap()
}

fn host(batches: Vec<RecordBatch>) -> Imported {
    Imported::Host {
        schema: batches[0].schema(),
        batches,
        realigned: vec![],
    }
}

#[test]
fn host_tensors_become_arrow_columns_over_the_same_memory() {
    let x = TensorView::zeros(DType::F64, &[4]).unwrap();
    let p = TensorView::zeros(DType::F32, &[4, 3]).unwrap();
    let table = Table::from_views(vec![("x".into(), x.clone()), ("p".into(), p)], Stream::HOST);
    let table = table.unwrap();
    assert_eq!(table.kind(), "arrow");
    let (batch, copied) = table.record_batch(false).unwrap();
    assert!(copied.is_empty());
    let column = batch.column(0).to_data();
    assert_eq!(column.buffers()[0].as_ptr(), x.data_ptr().cast_const());
    let schema = table.arrow_schema().unwrap();
    assert!(matches!(
        schema.field(1).data_type(),
        DataType::FixedSizeList(_, 3)
    ));
    let items = table.schema_value().unwrap();
    let expected = crate::value::Value::List(vec![
        crate::value::Value::List(vec!["x".into(), "float64".into()]),
        crate::value::Value::List(vec![
            "p".into(),
            "float32".into(),
            crate::value::Value::int(3),
        ]),
    ]);
    assert_eq!(
        items, expected,
        "read from the Arrow types, as an SoA schema's items"
    );
    let short = TensorView::zeros(DType::F64, &[3]).unwrap();
    let err = Table::from_views(vec![("x".into(), x), ("y".into(), short)], Stream::HOST);
    assert!(err.err().unwrap().to_string().contains("unequal length"));
}

#[test]
fn host_tables_go_on_the_device_interface_as_cpu_arrays() {
    let table = Table::from_import(host(vec![batch(&[1.0, 2.0])]), false)
        .unwrap()
        .table;
    let (array, _schema, note) = table.device_array(None).unwrap();
    assert_eq!((array.device_type, array.device_id, note), (1, -1, None));
    assert!(array.sync_event.is_null());
    let (stream, _) = table.device_stream(None).unwrap();
    drop(stream);
    let t = TensorView::zeros(DType::F32, &[5, 2]).unwrap();
    let (array, _, _) = tensor_device_array(&t, Stream::HOST, None).unwrap();
    assert_eq!(array.array.len(), 5);
    assert!(matches!(
        tensor_field("t", &t).unwrap().data_type(),
        DataType::FixedSizeList(_, 2)
    ));
}

#[test]
fn a_host_stream_is_read_chunk_by_chunk_and_its_producer_errors_named() {
    use arrow_array::ffi_stream::FFI_ArrowArrayStream;
    use arrow_array::RecordBatchIterator;

    let chunks = vec![batch(&[1.0, 2.0]), batch(&[3.0])];
    let schema = chunks[0].schema();
    let reader = RecordBatchIterator::new(chunks.into_iter().map(Ok), schema.clone());
    let mut stream = FFI_ArrowArrayStream::new(Box::new(reader));
    let Imported::Host { batches, .. } = crate::arrow::read_host_stream(&mut stream).unwrap()
    else {
        panic!("host batches");
    };
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        [2, 1]
    );
    let failing = RecordBatchIterator::new(
        vec![Err(arrow_schema::ArrowError::ComputeError(
            "disk gone".into(),
        ))],
        schema,
    );
    let mut stream = FFI_ArrowArrayStream::new(Box::new(failing));
    let err = crate::arrow::read_host_stream(&mut stream).err().unwrap();
    assert!(err.to_string().contains("disk gone"), "{err}");
}

/// Casts and the joining of chunks (feature `arrow-compute`).
#[cfg(feature = "arrow-compute")]
mod compute {
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array};
    use arrow_schema::DataType;

    use super::{batch, host};
    use crate::error::Error;
    use crate::soa::{cast_to_requested, Table};

    #[test]
    fn chunks_are_refused_unless_a_copy_may_join_them_and_then_they_are_kept() {
        let chunks = vec![batch(&[1.0, 2.0]), batch(&[3.0])];
        let err = Table::from_import(host(chunks.clone()), false)
            .err()
            .unwrap();
        assert!(matches!(err, Error::NotContiguous(_)), "{err:?}");
        assert!(err.to_string().contains("2 chunks"), "{err}");
        let joined = Table::from_import(host(chunks), true).unwrap();
        assert_eq!((joined.table.len(), joined.chunks.len()), (3, 2));
        assert!(joined.copied.iter().any(|c| c.contains("concatenated")));
        let one = Table::from_import(host(vec![batch(&[1.0])]), false).unwrap();
        assert!(one.copied.is_empty() && one.chunks.is_empty());
        let (again, note) = one.table.stream_batches(&[], None).unwrap();
        assert_eq!((again.len(), note), (1, None));
    }

    #[test]
    fn a_requested_type_is_a_reported_copy_only_where_it_loses_nothing() {
        let wide = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let (cast, note) = cast_to_requested(wide.clone(), Some(&DataType::Int32));
        assert_eq!(cast.data_type(), &DataType::Int32);
        assert!(note
            .unwrap()
            .contains("cast from Int64 to the requested Int32"));
        let big = Arc::new(Int64Array::from(vec![1 << 40]));
        let (kept, note) = cast_to_requested(big, Some(&DataType::Int32));
        assert_eq!((kept.data_type(), note), (&DataType::Int64, None));
        let (same, note) = cast_to_requested(wide, None);
        assert_eq!((same.data_type(), note), (&DataType::Int64, None));
    }
}
