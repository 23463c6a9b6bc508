use arrow_array::{Array, Float32Array, Int64Array, RecordBatch};
use arrow_schema::DataType;
use std::sync::Arc;

use super::*;
use crate::arrow::ImportOptions;
use crate::dtype::DType;

fn sample() -> SoaTable {
    let schema = Schema::builder()
        .column("x", DType::F32)
        .column("y", DType::F32)
        .vector("v", DType::F64, 3)
        .matrix("m", DType::I32, 2, 2, ComponentOrder::ColumnMajor)
        .scalar("scale", DType::F32)
        .build()
        .unwrap();
    let mut t = SoaTable::new(schema, 4).unwrap();
    t.column_mut::<f32>("x")
        .unwrap()
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    t.column_mut::<f32>("y")
        .unwrap()
        .copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
    for k in 0..3 {
        let values: Vec<f64> = (0..4).map(|r| (10 * r + k) as f64).collect();
        t.component_mut::<f64>("v", k)
            .unwrap()
            .copy_from_slice(&values);
    }
    for k in 0..4 {
        let values: Vec<i32> = (0..4).map(|r| 100 * r + k as i32).collect();
        t.component_mut::<i32>("m", k)
            .unwrap()
            .copy_from_slice(&values);
    }
    t.set_scalar("scale", 2.5f32).unwrap();
    t
}

fn buffer_range(t: &SoaTable) -> std::ops::Range<usize> {
    let start = t.buffer().as_ptr() as usize;
    start..start + t.buffer().len()
}

#[test]
fn plain_columns_leave_as_views_of_the_table_buffer() {
    let t = sample().slice_rows(1, 4).unwrap();
    let export = t.to_record_batch(true).unwrap();
    let x = export.batch.column_by_name("x").unwrap();
    let x = x.as_any().downcast_ref::<Float32Array>().unwrap();
    assert_eq!(x.values(), &[2.0, 3.0, 4.0]);
    assert!(buffer_range(&t).contains(&(x.values().as_ptr() as usize)));
    assert_eq!(x.values().as_ptr(), t.column::<f32>("x").unwrap().as_ptr());
    assert_eq!(
        export.copied_columns,
        vec!["v".to_string(), "m".to_string()]
    );
}

#[test]
fn vector_columns_need_an_explicit_copy() {
    let t = sample();
    let err = t.to_record_batch(false).unwrap_err().to_string();
    assert!(err.contains("\"v\"") && err.contains("transpose"), "{err}");
}

#[test]
fn a_table_survives_the_round_trip_with_its_schema() {
    let t = sample();
    let export = t.to_record_batch(true).unwrap();
    assert!(matches!(
        export.batch.column_by_name("v").unwrap().data_type(),
        DataType::FixedSizeList(_, 3)
    ));
    let back = SoaTable::from_record_batch(&export.batch, ImportOptions::default()).unwrap();
    let names = |s: &Schema| {
        s.columns()
            .iter()
            .map(|c| (c.name.clone(), c.dtype, c.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(back.schema()), names(t.schema()));
    assert_eq!(
        back.column::<f32>("y").unwrap(),
        t.column::<f32>("y").unwrap()
    );
    for k in 0..3 {
        assert_eq!(
            back.component::<f64>("v", k).unwrap(),
            t.component::<f64>("v", k).unwrap()
        );
    }
    for k in 0..4 {
        assert_eq!(
            back.component::<i32>("m", k).unwrap(),
            t.component::<i32>("m", k).unwrap()
        );
    }
    assert_eq!(back.scalar::<f32>("scale").unwrap(), 2.5);
    assert_ne!(
        back.buffer().as_ptr(),
        t.buffer().as_ptr(),
        "Arrow → SoA is a copy"
    );
}

#[test]
fn importing_nulls_into_a_table_needs_a_fill() {
    let batch =
        RecordBatch::try_from_iter([("a", Arc::new(Int64Array::from(vec![Some(1), None])) as _)])
            .unwrap();
    assert!(SoaTable::from_record_batch(&batch, ImportOptions::default()).is_err());
    let t = SoaTable::from_record_batch(
        &batch,
        ImportOptions {
            fill: Some(-7.0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(t.column::<i64>("a").unwrap(), &[1, -7]);
}

#[test]
fn tensor_maps_over_a_batch_share_its_memory() {
    let t = sample();
    let batch = t.to_record_batch(true).unwrap().batch;
    let map = TensorMap::builder()
        .tensor("pos", &["x", "y"])
        .tensor("v", &["v"])
        .build()
        .unwrap();
    let out = map
        .apply_arrow(&batch, MapOptions::default(), ImportOptions::default())
        .unwrap();
    // x and y sit at equal distances in the table's buffer, so one strided view joins them.
    assert!(!out[0].copied());
    assert_eq!(out[0].view.shape(), &[4, 2]);
    assert_eq!(
        out[0].view.data_ptr(),
        t.column_view("x").unwrap().data_ptr()
    );
    assert_eq!(
        out[0].view.to_vec::<f32>().unwrap_or_else(|_| {
            out[0]
                .view
                .contiguous_copy()
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        }),
        vec![1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]
    );
    assert_eq!(out[1].view.shape(), &[4, 3]);
    assert!(!out[1].copied());
}

#[test]
fn columns_in_separate_buffers_are_joined_only_by_a_reported_copy() {
    let batch = RecordBatch::try_from_iter([
        ("a", Arc::new(Float32Array::from(vec![1.0, 2.0])) as _),
        ("b", Arc::new(Float32Array::from(vec![3.0, 4.0])) as _),
    ])
    .unwrap();
    let map = TensorMap::builder()
        .tensor("ab", &["a", "b"])
        .tensor("a", &["a"])
        .build()
        .unwrap();
    let err = map
        .apply_arrow(&batch, MapOptions::default(), ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("separate Arrow allocations"), "{err}");
    let out = map
        .apply_arrow(
            &batch,
            MapOptions {
                allow_copy: true,
                ..Default::default()
            },
            ImportOptions::default(),
        )
        .unwrap();
    assert!(out[0].copied());
    assert_eq!(
        out[0].view.to_vec::<f32>().unwrap(),
        vec![1.0, 3.0, 2.0, 4.0]
    );
    assert!(!out[1].copied());
    assert_eq!(out[1].view.shape(), &[2, 1]);
    let a = batch
        .column(0)
        .as_any()
        .downcast_ref::<Float32Array>()
        .unwrap();
    assert_eq!(out[1].view.data_ptr() as *const f32, a.values().as_ptr());
    let missing = TensorMap::builder().tensor("z", &["z"]).build().unwrap();
    let err = missing
        .apply_arrow(&batch, MapOptions::default(), ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"z\"") && err.contains("[\"a\", \"b\"]"),
        "{err}"
    );
}
