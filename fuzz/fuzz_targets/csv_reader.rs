//! The numeric CSV reader, two ways.
//!
//! * Any bytes with any options: no panic, and a refusal names the input.
//! * Well-formed tables of decimal, exponent and special values written in many styles
//!   (delimiters, CRLF, padding, header or not, selected columns): every value must equal
//!   the standard library's `f32` parse of its text, bit for bit (the reader has its own
//!   fast decimal path; this is its differential check).
#![no_main]

use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop_ecg::csv::{parse_csv, CsvOptions, EmptyField, NanPolicy};

#[derive(Arbitrary, Debug)]
enum Value {
    Decimal {
        mantissa: i32,
        decimals: u8,
        plus: bool,
    },
    Float(f32),
    Exponent(f32),
    Special(u8),
}

impl Value {
    fn text(&self) -> String {
        match *self {
            Value::Decimal {
                mantissa,
                decimals,
                plus,
            } => {
                let decimals = (decimals % 12) as usize;
                let digits = mantissa.unsigned_abs().to_string();
                let padded = format!("{digits:0>width$}", width = decimals + 1);
                let (int, frac) = padded.split_at(padded.len() - decimals);
                let sign = if mantissa < 0 {
                    "-"
                } else if plus {
                    "+"
                } else {
                    ""
                };
                if decimals == 0 {
                    format!("{sign}{int}")
                } else {
                    format!("{sign}{int}.{frac}")
                }
            }
            Value::Float(x) if x.is_finite() => format!("{x}"),
            Value::Exponent(x) if x.is_finite() => format!("{x:e}"),
            Value::Float(_) | Value::Exponent(_) => "1.5".into(),
            Value::Special(k) => {
                ["nan", "NaN", "inf", "-inf", "0", "-0", ".5", "5."][k as usize % 8].into()
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Table {
    columns: u8,
    values: Vec<Value>,
    header: bool,
    delimiter: u8,
    crlf: bool,
    pad: bool,
    trailing_newline: bool,
    select: Option<Vec<u8>>,
}

#[derive(Arbitrary, Debug)]
enum Input {
    Bytes {
        data: Vec<u8>,
        header: Option<bool>,
        delimiter: u8,
        empty: Option<Option<f32>>,
        allow_nan: bool,
        columns: Vec<String>,
    },
    Table(Table),
}

fn check_table(t: &Table) {
    let ncols = (t.columns % 6) as usize + 1;
    let rows = t.values.len() / ncols;
    if rows == 0 {
        return;
    }
    let delimiter = [b',', b';', b'\t', b'|'][t.delimiter as usize % 4];
    let names: Vec<String> = (0..ncols)
        .map(|c| {
            if t.header {
                format!("col{c}")
            } else {
                format!("c{c}")
            }
        })
        .collect();
    let newline = if t.crlf { "\r\n" } else { "\n" };
    let mut text = String::new();
    if t.header {
        text.push_str(&names.join(&(delimiter as char).to_string()));
        text.push_str(newline);
    }
    let cells: Vec<String> = t.values[..rows * ncols].iter().map(Value::text).collect();
    for (r, row) in cells.chunks(ncols).enumerate() {
        let fields: Vec<String> = row
            .iter()
            .map(|v| if t.pad { format!(" {v} ") } else { v.clone() })
            .collect();
        text.push_str(&fields.join(&(delimiter as char).to_string()));
        if r + 1 < rows || t.trailing_newline {
            text.push_str(newline);
        }
    }
    let selected: Vec<usize> = match &t.select {
        Some(sel) if !sel.is_empty() => {
            let mut s: Vec<usize> = sel
                .iter()
                .take(ncols)
                .map(|&i| i as usize % ncols)
                .collect();
            s.dedup();
            s
        }
        _ => (0..ncols).collect(),
    };
    let options = CsvOptions {
        has_header: Some(t.header),
        delimiter,
        empty: EmptyField::Error,
        nan: NanPolicy::Allow,
        columns: if t.select.as_ref().is_some_and(|s| !s.is_empty()) {
            selected.iter().map(|&c| names[c].clone()).collect()
        } else {
            Vec::new()
        },
    };
    let table = match parse_csv(text.as_bytes(), Path::new("fuzz.csv"), &options) {
        Ok(table) => table,
        Err(err) => {
            // Duplicate selections may be refused; anything else is a reader bug.
            let mut unique = selected.clone();
            unique.sort_unstable();
            unique.dedup();
            assert!(
                unique.len() < selected.len(),
                "refused a valid CSV: {err}\n{text}"
            );
            return;
        }
    };
    assert_eq!(table.len(), rows, "{text}");
    for &c in &selected {
        let got = table.column::<f32>(&names[c]).expect("selected column");
        for (r, value) in got.iter().enumerate() {
            let cell = cells[r * ncols + c].as_str();
            let want: f32 = cell.parse().expect("the standard parser reads every cell");
            assert!(
                value.to_bits() == want.to_bits() || (value.is_nan() && want.is_nan()),
                "row {r} column {c}: {cell:?} read as {value:?}, the standard parser says \
                 {want:?}\nselected {:?}\n{text}",
                options.columns
            );
        }
    }
}

fuzz_target!(|input: Input| match input {
    Input::Bytes {
        data,
        header,
        delimiter,
        empty,
        allow_nan,
        columns,
    } => {
        let options = CsvOptions {
            has_header: header,
            delimiter,
            empty: match empty {
                None => EmptyField::Error,
                Some(None) => EmptyField::Nan,
                Some(Some(v)) => EmptyField::Value(v),
            },
            nan: if allow_nan {
                NanPolicy::Allow
            } else {
                NanPolicy::Reject
            },
            columns,
        };
        if let Err(err) = parse_csv(&data, Path::new("fuzz.csv"), &options) {
            let text = err.to_string();
            assert!(
                text.contains("fuzz.csv") || text.contains("delimiter") || text.contains("column"),
                "{text}"
            );
        }
    }
    Input::Table(t) => check_table(&t),
});
