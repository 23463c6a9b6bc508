//! Pickling through the core's plan: what a tensor or table sends, and what a received state
//! and its bytes rebuild, on host memory (Miri runs these).

use std::sync::Arc;

use super::*;
use crate::soa::{ColumnTable, SoaTable, Table};
use crate::tensor::TensorView;
use crate::Stream;

/// The bytes of `data` as a receiver gets them: a fresh buffer `shift` bytes into an
/// allocation (transports deliver frames at any offset).
fn arrive(data: Outgoing, shift: usize) -> Incoming {
    let Outgoing::Bytes {
        start,
        len,
        readonly,
        ..
    } = data
    else {
        panic!("host data travels as bytes here");
    };
    let backing = Buffer::zeroed_host(len + shift, 64).unwrap();
    // SAFETY: `len` bytes of the sender's live span into a fresh allocation of `len + shift`.
    unsafe { std::ptr::copy_nonoverlapping(start, backing.as_ptr().add(shift), len) };
    let at = std::ptr::NonNull::new(backing.as_ptr().wrapping_add(shift)).unwrap();
    // SAFETY: `len` bytes from `shift` into `backing`, which the new buffer owns.
    let buffer = unsafe { Buffer::from_foreign(at, len, crate::Device::CPU, Arc::new(backing)) };
    Incoming::Bytes {
        buffer,
        writable: !readonly,
        in_band: false,
    }
}

fn counting(shape: &[i64]) -> TensorView {
    let t = TensorView::zeros(DType::F64, shape).unwrap();
    // SAFETY: the fresh tensor's own elements, no other view of them alive.
    let values = unsafe { t.as_mut_slice::<f64>() }.unwrap();
    values
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as f64);
    t
}

fn format() -> Value {
    Value::count(FORMAT as usize)
}

fn tensor_back(state: &Value, data: Incoming) -> Result<Rebuilt<TensorView>> {
    TensorWire::parse(&format(), state)?.rebuild(Some(data))
}

#[test]
fn protocol_5_sends_the_whole_span_and_the_receiver_views_it_with_its_strides() {
    let t = counting(&[3, 4]).transpose(0, 1).unwrap();
    let sent = reduce_tensor(&t, false, Stream::HOST, 5).unwrap();
    assert!(matches!(
        sent.data,
        Outgoing::Bytes {
            out_of_band: true,
            ..
        }
    ));
    let back = tensor_back(&sent.state, arrive(sent.data, 0)).unwrap();
    assert_eq!(back.value.strides(), &[1, 4]);
    assert_eq!(
        back.value.to_vec::<f64>().unwrap(),
        t.to_vec::<f64>().unwrap()
    );
    assert!(back.copy_note.is_none() && !back.is_copied && back.stream.is_none());
}

#[test]
fn older_protocols_send_only_the_elements_compacted_in_band() {
    let t = counting(&[4, 6]).slice_axis(1, 0, 6, 2).unwrap();
    let sent = reduce_tensor(&t.clone().into_readonly(), true, Stream::HOST, 2).unwrap();
    let Outgoing::Bytes {
        len, out_of_band, ..
    } = &sent.data
    else {
        panic!("bytes in band");
    };
    assert_eq!((*len, *out_of_band), (4 * 3 * 8, false));
    let back = tensor_back(&sent.state, arrive(sent.data, 0)).unwrap();
    assert_eq!(back.value.strides(), &[3, 1]);
    assert!(back.value.is_readonly() && back.is_copied);
    assert_eq!(
        back.value.to_vec::<f64>().unwrap(),
        t.to_vec::<f64>().unwrap()
    );
}

#[test]
fn misaligned_bytes_are_copied_and_the_note_says_so() {
    let t = counting(&[5]);
    let sent = reduce_tensor(&t, false, Stream::HOST, 5).unwrap();
    let back = tensor_back(&sent.state, arrive(sent.data, 3)).unwrap();
    let note = back.copy_note.expect("a copy to report");
    assert!(note.contains("not aligned to the 8 bytes"), "{note}");
    assert!(back.is_copied);
    assert_eq!(
        back.value.to_vec::<f64>().unwrap(),
        t.to_vec::<f64>().unwrap()
    );
}

/// `state` with `key` set to `value` (or removed when `None`).
fn with(state: &Value, key: &str, value: Option<Value>) -> Value {
    let Value::Dict(items) = state else {
        panic!("a dict state")
    };
    let mut items: Vec<_> = items.iter().filter(|(k, _)| k != key).cloned().collect();
    if let Some(v) = value {
        items.push((key.to_owned(), v));
    }
    Value::Dict(items)
}

/// A state changed at `key` was refused, as a wrong type (TypeError) or not, saying `says`.
fn assert_refused(err: Option<Error>, key: &str, wrong_type: bool, says: &str) {
    let err = err.unwrap_or_else(|| panic!("{key}: accepted"));
    assert_eq!(
        matches!(err, Error::WrongType(_)),
        wrong_type,
        "{key}: {err:?}"
    );
    assert!(err.to_string().contains(says), "{key}: {err}");
}

#[test]
fn every_tampered_tensor_field_is_refused_by_name_and_kind() {
    let sent = reduce_tensor(&counting(&[100]), false, Stream::HOST, 5).unwrap();
    let state = sent.state;
    let cases: [(&str, Option<Value>, bool, &str); 9] = [
        ("shape", Some(Value::str("100")), true, "\"shape\" must be"),
        ("dtype", Some(Value::int(7)), true, "\"dtype\" must be"),
        (
            "readonly",
            Some(Value::str("no")),
            true,
            "\"readonly\" must be",
        ),
        ("offset", Some(Value::int(-8)), true, "\"offset\" must be"),
        (
            "shape",
            Some(Value::List(vec![Value::Int(1 << 70)])),
            true,
            "\"shape\" must be",
        ),
        ("nbytes", None, false, "lacks \"nbytes\""),
        ("dtype", Some(Value::str("float33")), false, "not a dtype"),
        ("offset", Some(Value::int(8)), false, "reach outside"),
        (
            "strides",
            Some(Value::ints(&[1, 1])),
            false,
            "do not describe",
        ),
    ];
    for (key, value, wrong_type, says) in cases {
        let parsed = TensorWire::parse(&format(), &with(&state, key, value));
        assert_refused(parsed.err(), key, wrong_type, says);
    }
    let err = TensorWire::parse(&format(), &Value::List(vec![state.clone()]))
        .err()
        .unwrap();
    assert!(matches!(err, Error::WrongType(_)) && err.to_string().contains("must be a dict"));
    let err = TensorWire::parse(&Value::int(2), &state).err().unwrap();
    assert!(err.to_string().contains("format is 2"), "{err}");
    let err = TensorWire::parse(&format(), &state)
        .unwrap()
        .rebuild(None)
        .err()
        .unwrap();
    assert!(err.to_string().contains("got None"), "{err}");
}

#[test]
fn a_table_travels_as_its_buffer_and_comes_back_laid_out_alike() {
    let schema = crate::soa::Schema::builder()
        .column("x", DType::F64)
        .vector("v", DType::F32, 3)
        .scalar("n", DType::I64)
        .build()
        .unwrap();
    let mut table = SoaTable::new(schema, 10).unwrap();
    table.column_mut::<f64>("x").unwrap()[9] = 2.5;
    let table = Table::Soa(table.slice_rows(2, 10).unwrap());
    for protocol in [2, 5] {
        let sent = reduce_table(&table, Stream::HOST, protocol).unwrap();
        let TableWire::Soa(soa) = TableWire::parse(&format(), &sent.state).unwrap() else {
            panic!("an SoA state");
        };
        assert!(soa.needs_data());
        let back = soa.rebuild(Some(arrive(sent.data, 0))).unwrap().value;
        assert_eq!((back.first_row(), back.len()), (2, 8));
        assert_eq!(back.column::<f64>("x").unwrap()[7], 2.5);
    }
}

#[test]
fn tampered_table_states_are_refused_by_name() {
    let table = Table::Soa(SoaTable::new(super::tests::schema(), 4).unwrap());
    let state = reduce_table(&table, Stream::HOST, 5).unwrap().state;
    let bad_item = Value::List(vec![Value::List(vec![
        Value::str("x"),
        Value::str("float32"),
    ])]);
    let cases: [(&str, Value, bool, &str); 5] = [
        ("schema", Value::str("x"), true, "schema must be a list"),
        ("schema", bad_item, true, "schema item"),
        ("storage", Value::str("gpu"), false, "storage \"gpu\""),
        ("rows", Value::int(1000), false, "take"),
        ("alignment", Value::int(3), false, "power of two"),
    ];
    for (key, value, wrong_type, says) in cases {
        let parsed = TableWire::parse(&format(), &with(&state, key, Some(value)));
        assert_refused(parsed.err(), key, wrong_type, says);
    }
}

#[test]
fn adopted_columns_do_not_pickle_and_say_what_to_do_instead() {
    let columns = ColumnTable::new(vec![("x".into(), counting(&[3]))], Stream::HOST).unwrap();
    let err = reduce_table(&Table::Columns(columns), Stream::HOST, 5)
        .err()
        .unwrap();
    assert!(matches!(err, Error::WrongType(_)), "{err:?}");
    assert!(err.to_string().contains("Table.from_tensors"), "{err}");
}

#[test]
fn values_read_as_python_spells_them_in_messages() {
    assert_eq!(Value::Bool(true).to_string(), "True");
    assert_eq!(Value::str("a").to_string(), "\"a\"");
    assert_eq!(Value::ints(&[1, 2]).to_string(), "<a sequence of 2>");
    let f = Value::Dict(vec![("k".into(), Value::None)]);
    let err = Fields::of(&f, "state")
        .unwrap()
        .int::<u8>("k", "a small int")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "state: \"k\" must be a small int, got None"
    );
}
