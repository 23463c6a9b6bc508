//! Schemas, layouts and tensor-map specs against arbitrary input: column kinds and sizes,
//! row counts, alignments, groups naming real or unknown columns, duplicate names, output
//! orders, materialised scalars, read-only and copy options.
//!
//! Properties: no panic; layout arithmetic refuses overflow instead of wrapping; every
//! zero-copy tensor a map hands out lies inside the table's buffer (each element is read
//! once, so AddressSanitizer sees any escape), and a copy is reported as one.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop::soa::{
    ColumnKind, ColumnSpec, ComponentOrder, Layout, MapOptions, Schema, SoaTable, TensorMap,
};
use zerohop::{DType, SystemResource};

/// Tables larger than this are only laid out, never allocated.
const MAX_TABLE_BYTES: usize = 1 << 20;

#[derive(Arbitrary, Debug)]
enum Kind {
    TableScalar,
    Column,
    Vector(usize),
    Matrix(usize, usize, bool),
}

#[derive(Arbitrary, Debug)]
struct Column {
    name: String,
    dtype: u8,
    kind: Kind,
}

#[derive(Arbitrary, Debug)]
enum ColumnRef {
    Index(u8),
    Name(String),
}

#[derive(Arbitrary, Debug)]
struct Group {
    name: String,
    columns: Vec<ColumnRef>,
    materialize: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    columns: Vec<Column>,
    rows: u16,
    huge_rows: Option<usize>,
    alignment: u16,
    groups: Vec<Group>,
    order: Option<Vec<u8>>,
    readonly: bool,
    allow_copy: bool,
}

fn kind_of(kind: &Kind) -> ColumnKind {
    match *kind {
        Kind::TableScalar => ColumnKind::TableScalar,
        Kind::Column => ColumnKind::Column,
        Kind::Vector(k) => ColumnKind::Vector(k),
        Kind::Matrix(rows, cols, row_major) => ColumnKind::Matrix {
            rows,
            cols,
            order: if row_major {
                ComponentOrder::RowMajor
            } else {
                ComponentOrder::ColumnMajor
            },
        },
    }
}

/// The lowest and highest element offsets a view reaches (shape entries are positive).
fn reach(shape: &[i64], strides: &[i64]) -> (i64, i64) {
    shape
        .iter()
        .zip(strides)
        .fold((0, 0), |(lo, hi), (&n, &s)| {
            let far = (n - 1) * s;
            (lo + far.min(0), hi + far.max(0))
        })
}

fuzz_target!(|input: Input| {
    let dtypes: Vec<DType> = DType::all().collect();
    let specs: Vec<ColumnSpec> = input
        .columns
        .iter()
        .take(12)
        .map(|c| ColumnSpec {
            name: c.name.clone(),
            dtype: dtypes[c.dtype as usize % dtypes.len()],
            kind: kind_of(&c.kind),
        })
        .collect();
    let Ok(schema) = Schema::new(specs) else {
        return;
    };
    let rows = input.huge_rows.unwrap_or(input.rows as usize);
    let alignment = input.alignment as usize;
    let Ok(layout) = Layout::new(&schema, rows, alignment) else {
        return;
    };
    for c in &layout.columns {
        assert!(
            c.offset + c.size <= layout.total_bytes,
            "column {} escapes",
            c.name
        );
    }
    if layout.total_bytes > MAX_TABLE_BYTES {
        return;
    }
    let resource = Arc::new(SystemResource);
    let table = match SoaTable::with_options(schema.clone(), rows, alignment, resource) {
        Ok(t) => t,
        Err(_) => return,
    };
    let names: Vec<String> = schema.columns().iter().map(|c| c.name.clone()).collect();
    let mut builder = TensorMap::builder();
    for g in input.groups.iter().take(8) {
        let columns: Vec<String> = g
            .columns
            .iter()
            .take(8)
            .map(|r| match r {
                ColumnRef::Index(i) if !names.is_empty() => {
                    names[*i as usize % names.len()].clone()
                }
                ColumnRef::Index(_) => String::new(),
                ColumnRef::Name(n) => n.clone(),
            })
            .collect();
        builder = builder.tensor(&g.name, &columns);
        if g.materialize && rows <= 1 << 16 {
            builder = builder.materialize(&g.name);
        }
    }
    if let Some(order) = &input.order {
        let groups: Vec<&str> = input
            .groups
            .iter()
            .take(8)
            .map(|g| g.name.as_str())
            .collect();
        if !groups.is_empty() {
            let order: Vec<&str> = order
                .iter()
                .map(|&i| groups[i as usize % groups.len()])
                .collect();
            builder = builder.order(&order);
        }
    }
    let Ok(map) = builder.build() else { return };
    // Copies of a huge table would only measure RAM: with many rows, views only.
    let small = rows <= 1 << 16;
    let options = MapOptions {
        readonly: input.readonly,
        allow_copy: input.allow_copy && small,
    };
    let Ok(tensors) = map.apply(&table, options) else {
        return;
    };
    let start = table.buffer().as_ptr() as usize;
    let end = start + table.layout().total_bytes;
    for t in &tensors {
        let view = &t.view;
        assert_eq!(view.shape()[0], rows as i64, "tensor {} rows", t.name);
        if input.readonly {
            assert!(view.is_readonly());
        }
        if view.numel() == 0 {
            continue;
        }
        if !t.copied() {
            let item = view.dtype().itemsize() as i64;
            let (lo, hi) = reach(view.shape(), view.strides());
            let first = view.data_ptr() as i64 + lo * item;
            let last = view.data_ptr() as i64 + (hi + 1) * item;
            assert!(
                first >= start as i64 && last <= end as i64,
                "tensor {} reaches [{first:#x}, {last:#x}) outside the table [{start:#x}, {end:#x})",
                t.name
            );
        }
        if view.nbytes() > MAX_TABLE_BYTES * 16 {
            continue; // a broadcast (stride-0) view of very many rows; copying it only tests RAM
        }
        // Reads every element once.
        let copy = view.contiguous_copy().expect("a host view copies");
        assert_eq!(copy.numel(), view.numel());
    }
});
