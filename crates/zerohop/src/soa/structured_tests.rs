//! Schemas and tensor specs in their structured forms, and tables built from tensors.

use super::*;
use crate::error::Error;
use crate::value::Value;
use crate::{DType, TensorView};

fn item(parts: Vec<Value>) -> Value {
    Value::List(parts)
}

#[test]
fn every_schema_item_form_reads_as_the_builder_would_make_it() {
    let items = Value::List(vec![
        item(vec![Value::str("x"), Value::str("float64")]),
        item(vec![
            Value::str("n"),
            Value::str("int32"),
            Value::str("scalar"),
        ]),
        item(vec![Value::str("p"), Value::str("float32"), Value::int(3)]),
        item(vec![
            Value::str("m"),
            Value::str("float32"),
            Value::ints(&[2, 3]),
            Value::str("F"),
        ]),
        Value::Dict(vec![
            ("name".into(), Value::str("e")),
            ("dtype".into(), Value::str("int8")),
            ("kind".into(), Value::str("column")),
        ]),
    ]);
    let schema = Schema::from_value(&items).unwrap();
    let built = Schema::builder()
        .column("x", DType::F64)
        .scalar("n", DType::I32)
        .vector("p", DType::F32, 3)
        .matrix("m", DType::F32, 2, 3, ComponentOrder::ColumnMajor)
        .column("e", DType::I8)
        .build()
        .unwrap();
    assert_eq!(schema, built);
    assert_eq!(Schema::from_value(&schema.to_value()).unwrap(), built);
}

#[test]
fn bad_schema_items_say_what_is_wrong_and_with_the_same_kind_of_error() {
    let one = |parts: Vec<Value>| Value::List(vec![item(parts)]);
    let cases: [(Value, bool, &str); 6] = [
        (
            one(vec![
                Value::str("m"),
                Value::str("float32"),
                Value::ints(&[2, 2]),
                Value::str("diagonal"),
            ]),
            false,
            "must be 'row' or 'col'",
        ),
        (
            one(vec![
                Value::str("x"),
                Value::str("float32"),
                Value::str("tensor"),
            ]),
            false,
            "column kind",
        ),
        (
            one(vec![
                Value::str("x"),
                Value::str("float32"),
                Value::ints(&[1, 2, 3]),
            ]),
            true,
            "column shape",
        ),
        (one(vec![Value::str("x")]), false, "has 1 parts"),
        (
            Value::List(vec![Value::Dict(vec![("name".into(), Value::str("x"))])]),
            false,
            "needs \"dtype\"",
        ),
        (Value::str("x: float32"), true, "must be a list"),
    ];
    for (items, wrong_type, says) in cases {
        let err = Schema::from_value(&items).unwrap_err();
        assert_eq!(
            matches!(err, Error::WrongType(_)),
            wrong_type,
            "{says}: {err:?}"
        );
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
}

#[test]
fn every_spec_form_gives_the_groups_of_the_spec_string() {
    let from_text = TensorMap::parse("pos: x, y; e").unwrap();
    let forms = [
        Value::Dict(vec![
            (
                "pos".into(),
                Value::List(vec![Value::str("x"), Value::str("y")]),
            ),
            ("e".into(), Value::str("e")),
        ]),
        Value::List(vec![
            Value::List(vec![
                Value::str("pos"),
                Value::List(vec![Value::str("x"), Value::str("y")]),
            ]),
            Value::str("e"),
        ]),
        Value::str("pos: x, y; e"),
    ];
    for form in forms {
        let map = TensorMap::from_value(&form).unwrap();
        assert_eq!(map.names(), from_text.names());
        assert_eq!(map.columns_of("pos"), from_text.columns_of("pos"));
    }
    let err = TensorMap::from_value(&Value::List(vec![Value::int(3)]))
        .err()
        .unwrap();
    assert!(matches!(err, Error::WrongType(_)) && err.to_string().contains("column name"));
}

#[test]
fn tensors_become_an_soa_copy_with_the_schema_their_shapes_give() {
    let x = TensorView::zeros(DType::F64, &[4]).unwrap();
    let p = TensorView::zeros(DType::F32, &[4, 3]).unwrap();
    let m = TensorView::zeros(DType::F32, &[4, 2, 2]).unwrap();
    let columns = vec![("x".into(), x.clone()), ("p".into(), p), ("m".into(), m)];
    let table = SoaTable::from_views(&columns, 64).unwrap();
    assert_eq!(table.len(), 4);
    assert!(matches!(
        table.schema().columns()[2].kind,
        ColumnKind::Matrix {
            rows: 2,
            cols: 2,
            ..
        }
    ));
    assert_ne!(table.column_view("x").unwrap().data_ptr(), x.data_ptr());
    let short = TensorView::zeros(DType::F64, &[3]).unwrap();
    let err = SoaTable::from_views(&[("x".into(), x), ("y".into(), short)], 64).unwrap_err();
    assert!(
        err.to_string()
            .contains("has 3 rows, earlier columns have 4"),
        "{err}"
    );
}
