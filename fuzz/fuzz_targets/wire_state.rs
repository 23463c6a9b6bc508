//! Pickled tensor and table states (`zerohop::wire`) against arbitrary input: dtype names,
//! shapes, strides, offsets and byte counts for tensors; column tuples, row counts,
//! alignments, first rows and lengths for tables; and a received buffer of any length and
//! start address.
//!
//! Properties: no panic; a state is refused (an `Error::Wire` or another error) unless every
//! element its view reaches lies inside the received bytes (each element is read once, so
//! AddressSanitizer sees any escape); a table rebuilt over the bytes reads every column inside
//! them. A third input is a whole state as a face hands it over (a tree of values under the
//! real field names), read by `TensorWire::parse` / `TableWire::parse` and rebuilt over the
//! received bytes: the same properties, and no recursion deeper than the face converts.
#![no_main]

use std::ptr::NonNull;
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop::wire::{
    schema_from_wire, Incoming, TableState, TableWire, TensorState, TensorWire, Value, WireColumn,
    MAX_DEPTH,
};
use zerohop::{Buffer, Device};

const DTYPES: [&str; 8] = [
    "float32",
    "float64",
    "int8",
    "uint16",
    "int64",
    "bool",
    "float32x4",
    "bfloat16",
];

#[derive(Arbitrary, Debug)]
struct Tensor {
    dtype: u8,
    shape: Vec<i64>,
    strides: Vec<i64>,
    offset: u16,
    nbytes: u16,
    readonly: bool,
}

#[derive(Arbitrary, Debug)]
struct Column {
    name: u8,
    dtype: u8,
    kind: u8,
    a: u16,
    b: u64,
    col_major: bool,
}

#[derive(Arbitrary, Debug)]
struct Table {
    columns: Vec<Column>,
    rows: u16,
    alignment: u16,
    first_row: u16,
    len: u16,
    nbytes: u32,
    in_band: bool,
}

/// A state value; strings and keys come from the names a real state uses, so that the
/// fuzzer reaches past the first lookup.
#[derive(Arbitrary, Debug)]
enum Tree {
    None,
    Bool(bool),
    Int(i64),
    Huge(i8),
    Str(u8),
    Bytes(u8),
    List(Vec<Tree>),
    Dict(Vec<(u8, Tree)>),
}

const KEYS: [&str; 16] = [
    "dtype",
    "shape",
    "strides",
    "offset",
    "nbytes",
    "readonly",
    "is_copied",
    "storage",
    "schema",
    "rows",
    "alignment",
    "first_row",
    "len",
    "staged_from",
    "cuda_ipc",
    "shared",
];
const WORDS: [&str; 12] = [
    "float32",
    "float64",
    "int8",
    "float32x4",
    "soa",
    "arrow",
    "scalar",
    "column",
    "vector",
    "matrix",
    "row",
    "col",
];

impl Tree {
    fn value(self, depth: usize) -> Value {
        match self {
            Tree::None => Value::None,
            Tree::Bool(b) => Value::Bool(b),
            Tree::Int(n) => Value::Int(i128::from(n % 4096)),
            Tree::Huge(n) => Value::Int(i128::from(n) << 64),
            Tree::Str(i) => Value::str(WORDS[usize::from(i) % WORDS.len()]),
            Tree::Bytes(n) => Value::Bytes(vec![0; usize::from(n % 80)]),
            _ if depth >= MAX_DEPTH => Value::Other("too deep".into()),
            Tree::List(items) => {
                Value::List(items.into_iter().map(|t| t.value(depth + 1)).collect())
            }
            Tree::Dict(items) => Value::Dict(
                items
                    .into_iter()
                    .map(|(k, t)| {
                        (
                            KEYS[usize::from(k) % KEYS.len()].to_owned(),
                            t.value(depth + 1),
                        )
                    })
                    .collect(),
            ),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input {
    Tensor(Tensor, u16, u8),
    Table(Table, u8),
    State(bool, Tree, u16, u8),
}

/// `len` received bytes starting `shift` bytes into a fresh allocation (transports deliver
/// frames at any offset).
fn received(len: usize, shift: u8) -> Buffer {
    let shift = usize::from(shift % 16);
    let backing = Buffer::zeroed_host(len + shift, 64).expect("a small host buffer");
    let start = NonNull::new(backing.as_ptr().wrapping_add(shift)).expect("not null");
    // SAFETY: `len` bytes from `shift` into a live allocation of `len + shift` bytes, kept
    // alive by the owner.
    unsafe { Buffer::from_foreign(start, len, Device::CPU, Arc::new(backing)) }
}

fn tensor(t: Tensor, len: u16, shift: u8) {
    let Ok(dtype) = zerohop::wire::parse_dtype(DTYPES[usize::from(t.dtype) % DTYPES.len()]) else {
        return;
    };
    let state = TensorState {
        dtype,
        shape: t.shape.into_iter().take(6).collect(),
        strides: t.strides.into_iter().take(6).collect(),
        offset: usize::from(t.offset),
        nbytes: usize::from(t.nbytes),
        readonly: t.readonly,
        is_copied: false,
    };
    let Ok((view, _)) = state.view_over(received(usize::from(len), shift), true) else {
        return;
    };
    // Accepted: every element lies in the received bytes. Reading each proves it (ASan).
    if view.numel() <= 1 << 16 {
        let _ = view.contiguous_copy();
    }
}

fn table(t: Table, shift: u8) {
    let columns = t
        .columns
        .into_iter()
        .take(6)
        .map(|c| WireColumn {
            name: format!("c{}", c.name % 8),
            dtype: DTYPES[usize::from(c.dtype) % DTYPES.len()].into(),
            kind: ["scalar", "column", "vector", "matrix", "tensor"][usize::from(c.kind % 5)]
                .into(),
            a: usize::from(c.a % 64),
            b: c.b as usize,
            order: if c.col_major { "col" } else { "row" }.into(),
        })
        .collect();
    let Ok(schema) = schema_from_wire(columns) else {
        return;
    };
    let nbytes = t.nbytes as usize % (1 << 20);
    let state = TableState {
        schema,
        rows: usize::from(t.rows),
        alignment: usize::from(t.alignment),
        first_row: usize::from(t.first_row),
        len: usize::from(t.len),
        readonly: false,
        nbytes,
    };
    let names: Vec<String> = state
        .schema
        .columns()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let Ok((table, _)) = state.table_over(received(nbytes, shift), true, t.in_band) else {
        return;
    };
    for name in names {
        if let Ok(view) = table.column_view(&name) {
            let _ = view.contiguous_copy();
        }
    }
}

fn arrived(len: u16, shift: u8) -> Option<Incoming> {
    Some(Incoming::Bytes {
        buffer: received(usize::from(len), shift),
        writable: true,
        in_band: shift % 2 == 0,
    })
}

fn state(is_table: bool, tree: Tree, len: u16, shift: u8) {
    let format = Value::Int(1);
    let state = tree.value(0);
    if !is_table {
        let Ok(wire) = TensorWire::parse(&format, &state) else {
            return;
        };
        if let Ok(back) = wire.rebuild(arrived(len, shift)) {
            if back.value.numel() <= 1 << 16 {
                let _ = back.value.contiguous_copy();
            }
        }
        return;
    }
    let Ok(TableWire::Soa(wire)) = TableWire::parse(&format, &state) else {
        return;
    };
    if let Ok(back) = wire.rebuild(arrived(len, shift)) {
        let names: Vec<String> = back
            .value
            .schema()
            .columns()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        for name in names {
            if let Ok(view) = back.value.column_view(&name) {
                let _ = view.contiguous_copy();
            }
        }
    }
}

fuzz_target!(|input: Input| match input {
    Input::Tensor(t, len, shift) => tensor(t, len, shift),
    Input::Table(t, shift) => table(t, shift),
    Input::State(is_table, tree, len, shift) => state(is_table, tree, len, shift),
});
