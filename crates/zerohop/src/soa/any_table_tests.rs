//! `Table`: every kind answers the same calls as the table it holds, by pointer.

use super::*;
use crate::error::Error;
use crate::memory::Stream;
use crate::{DType, Device, TensorView};

fn soa() -> SoaTable {
    let schema = Schema::builder()
        .column("x", DType::F32)
        .vector("p", DType::F32, 3)
        .build()
        .unwrap();
    SoaTable::new(schema, 10).unwrap()
}

fn columns() -> ColumnTable {
    let given = vec![
        (
            "x".to_string(),
            TensorView::zeros(DType::F32, &[10]).unwrap(),
        ),
        (
            "p".to_string(),
            TensorView::zeros(DType::F32, &[10, 3]).unwrap(),
        ),
    ];
    ColumnTable::new(given, Stream::HOST).unwrap()
}

fn tables() -> Vec<Table> {
    vec![Table::from(soa()), Table::from(columns())]
}

#[test]
fn every_kind_answers_as_the_table_it_holds() {
    for table in tables() {
        let kind = table.kind();
        assert_eq!((table.len(), table.is_empty()), (10, false), "{kind}");
        assert_eq!(table.column_names(), ["x", "p"], "{kind}");
        assert_eq!(table.device(), Device::CPU, "{kind}");
        assert!(!table.is_readonly(), "{kind}");
        let (p, copied) = table.column("p", ColumnOptions::default()).unwrap();
        assert!(copied.is_none(), "{kind}");
        let direct = match &table {
            Table::Soa(t) => t.column_view("p").unwrap(),
            Table::Columns(c) => c.column("p").unwrap(),
            #[cfg(feature = "arrow")]
            Table::Arrow(_) => unreachable!(),
        };
        assert_eq!(p.data_ptr(), direct.data_ptr(), "{kind}: the same memory");
        let map = TensorMap::parse("out: p; x").unwrap();
        let mapped = table.map(&map, MapOptions::default(), None).unwrap();
        assert_eq!(mapped[0].view.data_ptr(), direct.data_ptr(), "{kind}");
        assert!(table.describe().contains('p'), "{kind}");
    }
    let [s, c] = <[Table; 2]>::try_from(tables()).ok().unwrap();
    assert_eq!((s.kind(), c.kind()), ("soa", "columns"));
    assert_eq!(s.nbytes(), s.as_soa().unwrap().layout().total_bytes);
    assert_eq!(c.nbytes(), 10 * 4 + 10 * 3 * 4);
    assert!(s.as_columns().is_none() && c.as_soa().is_none());
    assert_eq!((s.stream(), c.stream()), (None, Some(Stream::HOST)));
}

#[test]
fn slices_share_memory_and_refuse_rows_outside() {
    for table in tables() {
        let kind = table.kind();
        let whole = table.column("x", ColumnOptions::default()).unwrap().0;
        let rows = table.slice_rows(2, 7).unwrap();
        assert_eq!(rows.len(), 5, "{kind}");
        let part = rows.column("x", ColumnOptions::default()).unwrap().0;
        assert_eq!(
            part.data_ptr() as usize,
            whole.data_ptr() as usize + 2 * 4,
            "{kind}"
        );
        for (start, stop) in [(3, 2), (0, 11), (11, 11)] {
            let err = table.slice_rows(start, stop).err().expect("refused");
            assert!(matches!(err, Error::Layout { .. }), "{kind}: {err}");
            let says = format!("{start}..{stop} is outside a table of 10 rows");
            assert!(err.to_string().contains(&says), "{kind}: {err}");
        }
    }
}

#[test]
fn one_spec_gives_one_rank_on_every_kind() {
    // A model sees one shape per spec, whatever storage the table has: CMS's (n, 1) for a
    // one-column group, (n, R) for one vector. Arrow batches (feature `arrow`) too.
    #[allow(unused_mut)]
    let mut all = tables();
    #[cfg(feature = "arrow")]
    all.push(
        Table::from_views(
            vec![
                ("x".into(), TensorView::zeros(DType::F32, &[10]).unwrap()),
                ("p".into(), TensorView::zeros(DType::F32, &[10, 3]).unwrap()),
            ],
            Stream::HOST,
        )
        .unwrap(),
    );
    let map = TensorMap::parse("x; out: p; named: x").unwrap();
    for table in all {
        let kind = table.kind();
        let mapped = table.map(&map, MapOptions::default(), None).unwrap();
        let shapes: Vec<&[i64]> = mapped.iter().map(|m| m.view.shape()).collect();
        assert_eq!(shapes, [&[10, 1][..], &[10, 3], &[10, 1]], "{kind}");
        let x = table.column("x", ColumnOptions::default()).unwrap().0;
        assert_eq!(mapped[0].view.data_ptr(), x.data_ptr(), "{kind}: a view");
        assert_eq!(x.shape(), [10], "{kind}: a column alone stays (n,)");
    }
}

#[test]
fn a_missing_column_is_named_with_the_columns_there_are() {
    for table in tables() {
        let err = table.column("nope", ColumnOptions::default()).unwrap_err();
        assert!(
            matches!(err, Error::NoSuchColumn { .. }),
            "{}: {err}",
            table.kind()
        );
    }
}

#[cfg(feature = "arrow")]
#[test]
fn an_arrow_batch_is_shared_and_its_nulls_filled_only_when_asked() {
    use std::sync::Arc;

    use arrow_array::{Float32Array, RecordBatch};

    let values = Float32Array::from(vec![Some(1.0), None, Some(3.0), Some(4.0)]);
    let dense = Float32Array::from(vec![5.0, 6.0, 7.0, 8.0]);
    let dense_at = dense.values().as_ptr() as usize;
    let batch = RecordBatch::try_from_iter([
        ("v", Arc::new(values) as arrow_array::ArrayRef),
        ("d", Arc::new(dense) as arrow_array::ArrayRef),
    ])
    .unwrap();
    let table = Table::Arrow(batch);
    assert_eq!(
        (table.kind(), table.len(), table.is_readonly()),
        ("arrow", 4, true)
    );
    let (d, copied) = table.column("d", ColumnOptions::default()).unwrap();
    assert_eq!((d.data_ptr() as usize, copied), (dense_at, None));
    assert!(
        table.column("v", ColumnOptions::default()).is_err(),
        "nulls need a fill"
    );
    let (v, copied) = table
        .column(
            "v",
            ColumnOptions {
                fill: Some(0.0),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        copied,
        Some(crate::handoff::CopyReason::NullsFilled { nulls: 1 })
    );
    assert_eq!(v.to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 4.0]);
    let rows = table.slice_rows(1, 3).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(table.describe().starts_with("Arrow record batch, 4 rows"));
}
