//! The WFDB signal decoder, through its in-memory API (`decode_signals`), two ways (the
//! first input byte picks: even, the rest is `header text NUL leads NUL file bytes`, leads
//! one per line, so seeds are readable; odd, the rest builds a record).
//!
//! * Any header text with any file bytes and lead choices: no panic; a decoded record has
//!   one column per chosen lead, values finite or NaN, and no more samples than the bytes
//!   can hold; a refusal names the record or the header.
//! * Headers built from arbitrary signals of every format, with arbitrary file bytes: the
//!   record's length follows the header's sample count or the file's whole frames exactly,
//!   a file ending inside a frame is refused, and formats 16 and 80 match a plain decoder.
#![no_main]

use std::borrow::Cow;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use zerohop_ecg::wfdb::{decode_signals, parse_header, Record};

#[derive(Arbitrary, Debug)]
struct SignalSpec {
    gain: i16,
    baseline: i16,
    invalid_gain: bool,
}

#[derive(Arbitrary, Debug)]
struct Built {
    format: u8,
    samples: Option<u16>,
    offset: u8,
    signals: Vec<SignalSpec>,
    leads: Vec<u8>,
    data: Vec<u8>,
}

fn check_values(r: &Record) {
    assert_eq!(r.names.len(), r.signals.len());
    assert_eq!(r.table.schema().columns().len(), r.names.len());
    for name in &r.names {
        let column = r.table.column::<f32>(name).expect("a column per lead");
        assert_eq!(column.len(), r.table.len());
        assert!(column.iter().all(|v| v.is_finite() || v.is_nan()), "{name}");
    }
}

/// Bytes per sample of the whole-byte formats (None: packed).
fn width(format: u16) -> Option<usize> {
    match format {
        80 => Some(1),
        16 | 61 | 160 => Some(2),
        24 => Some(3),
        32 => Some(4),
        _ => None,
    }
}

fn check_built(b: &Built) {
    const FORMATS: [u16; 9] = [16, 24, 32, 61, 80, 160, 212, 310, 311];
    let format = FORMATS[usize::from(b.format) % FORMATS.len()];
    let signals = &b.signals[..b.signals.len().min(6)];
    if signals.is_empty() {
        return;
    }
    let n = signals.len();
    let mut text = format!("rec {n} 360");
    if let Some(s) = b.samples {
        text += &format!(" {s}");
    }
    text += "\n";
    for (i, s) in signals.iter().enumerate() {
        let gain = if s.invalid_gain { 0 } else { s.gain };
        text += &format!(
            "f.dat {format}+{} {gain}({}) 16 0 0 0 0 s{i}\n",
            b.offset, s.baseline
        );
    }
    let leads: Vec<String> = b
        .leads
        .iter()
        .take(n)
        .map(|&l| format!("s{}", l as usize % n))
        .collect();
    let mut unique = leads.clone();
    unique.sort();
    unique.dedup();
    let header = parse_header(&text, Path::new("fuzz.hea")).expect("a valid header");
    let result = decode_signals(header, &leads, Path::new("fuzz"), |name| {
        assert_eq!(name, "f.dat");
        Ok(Cow::Borrowed(&b.data[..]))
    });
    let offset = usize::from(b.offset);
    let record = match result {
        Ok(r) => r,
        Err(e) => {
            let message = e.to_string();
            let duplicate = unique.len() < leads.len();
            let short = b.data.len() < offset;
            let ragged = message.contains("ends inside frame");
            assert!(duplicate || short || ragged, "{message}\n{text}");
            if ragged {
                // Only when the header's count is missing or more than the file holds.
                if let (Some(s), Some(w)) = (b.samples.filter(|&s| s > 0), width(format)) {
                    assert!(
                        (b.data.len() - offset) / (w * n) < usize::from(s),
                        "{message}"
                    );
                }
            }
            return;
        }
    };
    check_values(&record);
    let bytes = &b.data[offset..];
    let rows = record.table.len();
    match width(format) {
        Some(w) => {
            let whole = bytes.len() / (w * n);
            let want = match b.samples.filter(|&s| s > 0) {
                Some(s) if usize::from(s) <= whole => usize::from(s),
                _ => {
                    assert_eq!(bytes.len() % (w * n), 0, "a ragged file was accepted");
                    whole
                }
            };
            assert_eq!(rows, want, "{text}");
        }
        // Packed: 212 holds 2 samples in 3 bytes, 310 and 311 hold 3 in 4 (a final partial
        // group takes a little more).
        None if format == 212 => assert!(rows * n * 3 <= bytes.len() * 2 + 1),
        None => assert!(rows * n * 4 <= bytes.len() * 3 + 2),
    }
    // Formats 16 and 80 against a plain decoder.
    if format == 16 || format == 80 {
        for (column, &signal) in record.names.iter().zip(&record.signals) {
            let got = record.table.column::<f32>(column).unwrap();
            let s = &record.header.signals[signal];
            for (row, &value) in got.iter().enumerate() {
                let at = (row * n + signal) * width(format).unwrap();
                let (raw, invalid) = if format == 16 {
                    let v = i16::from_le_bytes([bytes[at], bytes[at + 1]]);
                    (f64::from(v), v == i16::MIN)
                } else {
                    let v = i32::from(bytes[at]) - 128;
                    (f64::from(v), v == -128)
                };
                if invalid {
                    assert!(value.is_nan());
                } else {
                    let want = ((raw - s.baseline as f64) / s.gain) as f32;
                    assert_eq!(value.to_bits(), want.to_bits(), "row {row} of {column}");
                }
            }
        }
    }
}

fn check_raw(header: &str, leads: &[String], data: &[u8]) {
    let Ok(header) = parse_header(header, Path::new("fuzz.hea")) else {
        return;
    };
    let record_name = header.record.clone();
    match decode_signals(header, leads, Path::new("fuzz"), |_| {
        Ok(Cow::Borrowed(data))
    }) {
        Ok(r) => {
            check_values(&r);
            // Every format takes at least one byte per frame.
            assert!(r.table.len() <= data.len());
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains(&record_name) || message.contains("lead"),
                "{message}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let mut parts = rest.splitn(3, |&b| b == 0);
        let header = String::from_utf8_lossy(parts.next().unwrap_or_default());
        let leads: Vec<String> = String::from_utf8_lossy(parts.next().unwrap_or_default())
            .lines()
            .map(str::to_string)
            .collect();
        check_raw(&header, &leads, parts.next().unwrap_or_default());
    } else if let Ok(b) = Built::arbitrary_take_rest(Unstructured::new(rest)) {
        check_built(&b);
    }
});
