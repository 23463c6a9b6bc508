use super::{Batches, Schema, SoaTable, Table};
use crate::dtype::DType;

#[test]
fn batches_cover_every_row_once_and_only_the_last_is_short() {
    for batch in [1, 7, 999, 1000, 1001] {
        let batches = Batches::new(1000, batch).unwrap();
        let spans: Vec<_> = batches.spans().collect();
        assert_eq!(spans.len(), batches.len(), "batch {batch}");
        assert_eq!(spans.len(), 1000usize.div_ceil(batch), "batch {batch}");
        let mut next = 0;
        for (i, span) in spans.iter().enumerate() {
            assert_eq!(
                span.start, next,
                "batch {batch}: span {i} follows the one before"
            );
            let last = i + 1 == spans.len();
            let expected = if last { 1000 - i * batch } else { batch };
            assert_eq!(span.len(), expected, "batch {batch}: span {i}");
            assert_eq!(batches.span(i).unwrap(), *span, "batch {batch}: span({i})");
            next = span.end;
        }
        assert_eq!(
            next, 1000,
            "batch {batch}: the last batch ends at the table's end"
        );
        let past = batches.span(spans.len()).unwrap_err().to_string();
        assert!(past.contains("past the last batch"), "{past}");
    }
    assert_eq!(Batches::new(1000, 7).unwrap().span(142).unwrap(), 994..1000);
}

#[test]
fn sizes_at_the_edge_of_usize_neither_overflow_nor_panic() {
    let max = usize::MAX;
    let whole = Batches::new(1000, max).unwrap();
    assert_eq!((whole.len(), whole.span(0).unwrap()), (1, 0..1000));
    // 1 × MAX does not overflow but starts past the end; 2 × MAX overflows: both refused.
    assert!(whole.span(1).is_err() && whole.span(2).is_err());
    assert!(Batches::new(1000, 7).unwrap().span(max).is_err());
    assert!(Batches::new(1000, 1).unwrap().span(max).is_err());
    // The last span of a table of MAX rows ends at MAX, where `(index + 1) * batch` wraps.
    let huge = Batches::new(max, 2).unwrap();
    assert_eq!(huge.len(), max / 2 + 1);
    assert_eq!(huge.span(max / 2).unwrap(), max - 1..max);
    let one = Batches::new(max, max).unwrap();
    assert_eq!((one.len(), one.span(0).unwrap()), (1, 0..max));
    let empty = Batches::new(0, 7).unwrap();
    assert_eq!((empty.is_empty(), empty.len()), (true, 0));
    assert!(empty.span(0).is_err());
    let zero = Batches::new(1000, 0).unwrap_err().to_string();
    assert!(
        zero.contains("batch size") && zero.contains("0 rows"),
        "{zero}"
    );
}

#[test]
fn the_last_short_batch_of_a_table_is_exactly_its_rows_at_an_unaligned_start() {
    let schema = Schema::builder()
        .column("x", DType::F32)
        .vector("v", DType::F64, 3)
        .build()
        .unwrap();
    let mut soa = SoaTable::new(schema, 1000).unwrap();
    for (i, x) in soa.column_mut::<f32>("x").unwrap().iter_mut().enumerate() {
        *x = i as f32;
    }
    let base = soa.column_view("v").unwrap();
    let table = Table::from(soa.clone());
    assert_eq!(table.batch_count(7).unwrap(), 143);
    let last = table.batch(7, 142).unwrap();
    let last = last.as_soa().unwrap();
    assert_eq!((last.first_row(), last.len()), (994, 6));
    assert_eq!(
        last.column::<f32>("x").unwrap(),
        &[994., 995., 996., 997., 998., 999.]
    );
    // Row 994 of float32 starts 3976 bytes in: 8-byte aligned, not 128.
    assert_eq!(last.alignment(), 8);
    let v = last.column_view("v").unwrap();
    assert_eq!((v.shape(), v.strides()), (&[6, 3][..], base.strides()));
    assert_eq!(v.data_ptr() as usize, base.data_ptr() as usize + 994 * 8);
    assert!(table.batch(7, 143).is_err());
    assert!(table.batch(0, 0).is_err());
    assert!(table.batch(usize::MAX, usize::MAX).is_err());
}
