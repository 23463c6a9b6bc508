//! The numeric CSV reader, two ways.
//!
//! * Any bytes with any options: no panic, and a refusal names the input.
//! * Well-formed tables of decimal, exponent and special values written in many styles
//!   (delimiters given or sniffed, CRLF, a byte-order mark, padding, header or not, detected or
//!   given, quoted names, a units row, columns selected by name or index): every value must
//!   equal the standard library's `f32` parse of its text, bit for bit (the reader has its
//!   own fast decimal path; this is its differential check), and the header read alone must
//!   give the names and units written.
#![no_main]

use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop_ecg::csv::{
    is_time_axis, parse_csv, parse_header, time_axis_rate, CsvOptions, EmptyField, NanPolicy,
    SNIFF_DELIMITER,
};

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
    /// Leave the delimiter to sniffing (then `,`, `;` or tab).
    sniff: bool,
    /// Leave the header to detection.
    detect_header: bool,
    /// Quote the names and units: 0 no, 1 `"`, 2 `'`.
    quote: u8,
    units: bool,
    bom: bool,
    /// Select each column by index rather than by name.
    by_index: bool,
}

#[derive(Arbitrary, Debug)]
enum Input {
    Bytes {
        data: Vec<u8>,
        header: Option<bool>,
        /// None: sniff.
        delimiter: Option<u8>,
        empty: Option<Option<f32>>,
        allow_nan: bool,
        columns: Vec<String>,
    },
    Table(Table),
}

/// Every column's time-axis checks, which must not panic whatever the values.
fn probe_time_axes(table: &zerohop::soa::SoaTable, units: Option<&[String]>) {
    for (i, column) in table.schema().columns().iter().enumerate() {
        if let Ok(values) = table.column::<f32>(&column.name) {
            is_time_axis(values);
            time_axis_rate(values, units.and_then(|u| u.get(i)).map(String::as_str));
        }
    }
}

fn check_table(t: &Table) {
    let ncols = (t.columns % 6) as usize + 1;
    let rows = t.values.len() / ncols;
    if rows == 0 {
        return;
    }
    // Sniffing chooses among `,`, `;` and tab; a given delimiter may be anything.
    let delimiter = if t.sniff {
        [b',', b';', b'\t'][t.delimiter as usize % 3]
    } else {
        [b',', b';', b'\t', b'|'][t.delimiter as usize % 4]
    };
    let quote = ["", "\"", "'"][t.quote as usize % 3];
    // Quoted names carry every candidate delimiter, which must not split them.
    let names: Vec<String> = (0..ncols)
        .map(|c| match (t.header, quote.is_empty()) {
            (true, true) => format!("col{c}"),
            (true, false) => format!("col {c}, ;\tmV"),
            (false, _) => format!("c{c}"),
        })
        .collect();
    let units: Vec<String> = (0..ncols)
        .map(|c| ["mV", "seconds", "uV", "hh:mm:ss.mmm"][c % 4].to_string())
        .collect();
    let with_units = t.header && t.units;
    let newline = if t.crlf { "\r\n" } else { "\n" };
    let sep = (delimiter as char).to_string();
    let quoted = |words: &[String]| {
        words
            .iter()
            .map(|w| format!("{quote}{w}{quote}"))
            .collect::<Vec<_>>()
            .join(&sep)
    };
    let mut text = String::new();
    if t.bom {
        text.push('\u{feff}');
    }
    if t.header {
        text.push_str(&quoted(&names));
        text.push_str(newline);
    }
    if with_units {
        text.push_str(&quoted(&units));
        text.push_str(newline);
    }
    let cells: Vec<String> = t.values[..rows * ncols].iter().map(Value::text).collect();
    for (r, row) in cells.chunks(ncols).enumerate() {
        let fields: Vec<String> = row
            .iter()
            .map(|v| if t.pad { format!(" {v} ") } else { v.clone() })
            .collect();
        text.push_str(&fields.join(&sep));
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
        has_header: if t.detect_header {
            None
        } else {
            Some(t.header)
        },
        delimiter: if t.sniff { SNIFF_DELIMITER } else { delimiter },
        empty: EmptyField::Error,
        nan: NanPolicy::Allow,
        columns: if t.select.as_ref().is_some_and(|s| !s.is_empty()) {
            selected
                .iter()
                .map(|&c| {
                    if t.by_index {
                        c.to_string()
                    } else {
                        names[c].clone()
                    }
                })
                .collect()
        } else {
            Vec::new()
        },
    };
    let path = Path::new("fuzz.csv");
    let header = parse_header(text.as_bytes(), path, (!t.sniff).then_some(delimiter))
        .unwrap_or_else(|err| panic!("refused a valid header: {err}\n{text:?}"));
    assert_eq!(
        header.delimiter,
        if ncols > 1 || !t.sniff {
            delimiter
        } else {
            b','
        }
    );
    assert_eq!(header.has_header, t.header, "{text:?}");
    assert_eq!(header.names, names, "{text:?}");
    assert_eq!(header.units, with_units.then(|| units.clone()), "{text:?}");
    let table = match parse_csv(text.as_bytes(), path, &options) {
        Ok(table) => table,
        Err(err) => {
            // Duplicate selections may be refused; anything else is a reader bug.
            let mut unique = selected.clone();
            unique.sort_unstable();
            unique.dedup();
            assert!(
                unique.len() < selected.len(),
                "refused a valid CSV: {err}\n{text:?}"
            );
            return;
        }
    };
    assert_eq!(table.len(), rows, "{text:?}");
    for &c in &selected {
        let got = table.column::<f32>(&names[c]).expect("selected column");
        for (r, value) in got.iter().enumerate() {
            let cell = cells[r * ncols + c].as_str();
            let want: f32 = cell.parse().expect("the standard parser reads every cell");
            assert!(
                value.to_bits() == want.to_bits() || (value.is_nan() && want.is_nan()),
                "row {r} column {c}: {cell:?} read as {value:?}, the standard parser says \
                 {want:?}\nselected {:?}\n{text:?}",
                options.columns
            );
        }
    }
    probe_time_axes(&table, header.units.as_deref());
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
            delimiter: delimiter.unwrap_or(SNIFF_DELIMITER),
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
        let named = |err: zerohop_ecg::EcgError| {
            let text = err.to_string();
            assert!(
                text.contains("fuzz.csv") || text.contains("delimiter") || text.contains("column"),
                "{text}"
            );
        };
        let path = Path::new("fuzz.csv");
        let units = parse_header(&data, path, delimiter).map(|h| h.units);
        match parse_csv(&data, path, &options) {
            Ok(table) => probe_time_axes(&table, units.ok().flatten().as_deref()),
            Err(err) => named(err),
        }
    }
    Input::Table(t) => check_table(&t),
});
