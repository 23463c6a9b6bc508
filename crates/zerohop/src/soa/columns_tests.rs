//! Adopted columns: validation, lookups, slices and maps, with pointer identity.

use super::*;
use crate::error::Error;
use crate::memory::Stream;
use crate::{DType, TensorView};

fn columns() -> Vec<(String, TensorView)> {
    vec![
        ("score".into(), TensorView::zeros(DType::F32, &[6]).unwrap()),
        (
            "box".into(),
            TensorView::zeros(DType::F32, &[6, 4]).unwrap(),
        ),
    ]
}

#[test]
fn adopted_columns_are_the_producers_memory() {
    let given = columns();
    let addresses: Vec<_> = given.iter().map(|(_, v)| v.data_ptr()).collect();
    let table = ColumnTable::new(given, Stream::cuda(7).unwrap()).unwrap();
    assert_eq!(
        (table.len(), table.names(), table.stream()),
        (6, vec!["score", "box"], Stream::cuda(7).unwrap())
    );
    assert_eq!(table.column("box").unwrap().data_ptr(), addresses[1]);
    let map = TensorMap::parse("out: box; score").unwrap();
    let tensors = table
        .map(
            &map,
            MapOptions {
                readonly: true,
                allow_copy: false,
            },
        )
        .unwrap();
    assert_eq!(tensors.len(), 2);
    assert_eq!(tensors[0].view.data_ptr(), addresses[1]);
    assert_eq!(tensors[1].view.data_ptr(), addresses[0]);
    // The plain column gets the k axis an SoA table's one-column group has; the vector not.
    assert_eq!(tensors[0].view.shape(), [6, 4]);
    assert_eq!(
        (tensors[1].view.shape(), tensors[1].view.strides()),
        (&[6, 1][..], &[1, 1][..])
    );
    assert!(tensors.iter().all(|t| t.view.is_readonly() && !t.copied()));
}

#[test]
fn rows_are_sliced_over_the_same_memory() {
    let table = ColumnTable::new(columns(), Stream::HOST).unwrap();
    let part = table.slice_rows(2, 5).unwrap();
    let (whole, rows) = (table.column("box").unwrap(), part.column("box").unwrap());
    assert_eq!(rows.shape(), &[3, 4]);
    assert_eq!(
        rows.data_ptr() as usize - whole.data_ptr() as usize,
        2 * 4 * 4
    );
    assert!(table.slice_rows(4, 7).is_err() && table.slice_rows(5, 4).is_err());
    assert!(table.slice_rows(6, 6).unwrap().is_empty());
}

#[test]
fn columns_that_do_not_make_a_table_are_refused_by_name() {
    let zeros = |shape: &[i64]| TensorView::zeros(DType::F64, shape).unwrap();
    for (given, says) in [
        (vec![], "at least one column"),
        (vec![("a".into(), zeros(&[]))], "0-d"),
        (vec![("".into(), zeros(&[2]))], "empty name"),
        (
            vec![("a".into(), zeros(&[2])), ("a".into(), zeros(&[2]))],
            "given twice",
        ),
        (
            vec![("a".into(), zeros(&[2])), ("b".into(), zeros(&[3, 2]))],
            "column \"a\" has 2 rows",
        ),
    ] {
        let err = ColumnTable::new(given, Stream::HOST)
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn a_missing_column_and_a_group_of_several_are_clear_errors() {
    let table = ColumnTable::new(columns(), Stream::HOST).unwrap();
    assert!(matches!(
        table.column("nope"),
        Err(Error::NoSuchColumn { .. })
    ));
    let map = TensorMap::parse("both: score, box").unwrap();
    let err = table
        .map(&map, MapOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("separate allocations"), "{err}");
    assert!(table.describe().contains("score"));
}

#[test]
fn the_spec_grammar_reads_groups_bare_columns_and_whitespace() {
    let map = TensorMap::parse(" pos : x, y ,z ; e;; id ").unwrap();
    assert_eq!(map.names(), vec!["pos", "e", "id"]);
    assert_eq!(map.columns_of("pos").unwrap(), vec!["x", "y", "z"]);
    assert_eq!(map.columns_of("e").unwrap(), vec!["e"]);
    for (spec, says) in [
        ("", "names no tensors"),
        (" ; ", "names no tensors"),
        (": x", "group 1"),
        ("a: x,", "group 1"),
        ("a: x; b: , y", "group 2"),
        ("a: x; a: y", "defined twice"),
    ] {
        let err = TensorMap::parse(spec).unwrap_err().to_string();
        assert!(err.contains(says), "{spec:?}: {err}");
    }
}

#[test]
fn a_spec_of_many_names_is_accepted_and_a_late_duplicate_is_named() {
    // Fewer under Miri, which interprets every hash: the logic is the same.
    let count = if cfg!(miri) { 60 } else { 20_000 };
    let names: Vec<String> = (0..count).map(|i| format!("t{i}")).collect();
    let spec = names.join(";");
    let map = TensorMap::parse(&spec).unwrap();
    assert_eq!(map.names().len(), count);
    let reversed: Vec<&String> = names.iter().rev().collect();
    let ordered = names
        .iter()
        .fold(TensorMap::builder(), |b, n| b.tensor(n, &[n]))
        .order(&reversed)
        .build()
        .unwrap();
    assert_eq!(
        ordered.names()[0],
        format!("t{}", count - 1),
        "the order given is the order kept"
    );
    let late = format!("t{}", count / 2);
    let err = TensorMap::parse(&format!("{spec}; {late}: x"))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{late:?} is defined twice")), "{err}");
}
