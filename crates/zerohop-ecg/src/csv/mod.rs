//! A parallel numeric CSV reader that parses straight into the float32 columns of a zerohop
//! `SoaTable` (allocated from the current memory resource): one pass counts rows per chunk,
//! a second parses each chunk into its rows of the columns, on all cores.
//!
//! It takes CSV files as they come: a UTF-8 byte-order mark, CRLF line ends, quoted header
//! names (`"MLII"`, PhysioNet's `'MLII'`), a units row after the header (`'seconds','mV'`),
//! and a delimiter sniffed among `,`, `;` and tab when none is given. Columns are chosen by
//! name or by 0-based index; [`read_header`] reads just the layout, so that a caller can
//! choose, and [`is_time_axis`] / [`time_axis_rate`] tell a time column from a signal.

mod decimal;
mod header;
mod rows;
mod time;

use std::path::Path;

use zerohop::soa::SoaTable;

use crate::error::{invalid, Result};

pub use header::CsvHeader;
// For the GPU reader, which parses the lines the device leaves with this reader's code.
#[cfg(feature = "cuda")]
pub(crate) use rows::{is_blank, Fields};
pub use time::{is_time_axis, time_axis_rate};

/// What to do with an empty field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EmptyField {
    /// An empty field is an error naming its line and column (the default).
    Error,
    /// An empty field becomes NaN.
    Nan,
    /// An empty field becomes this value.
    Value(f32),
}

/// What to do with "nan"/"NaN" (and infinities) in the data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NanPolicy {
    /// Kept as they are.
    Allow,
    /// An error naming the line and column (the default: the pipeline cannot use them).
    Reject,
}

/// `CsvOptions::delimiter` meaning "sniff it from the first lines" (NUL never separates the
/// fields of a text file, so it is free to mean this).
pub const SNIFF_DELIMITER: u8 = 0;

#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// `None`: detect (a first line with a non-numeric field is a header).
    pub has_header: Option<bool>,
    /// The field separator, or [`SNIFF_DELIMITER`] (the default): `,`, `;` or tab, whichever
    /// splits every one of the first lines into the same number of fields.
    pub delimiter: u8,
    pub empty: EmptyField,
    pub nan: NanPolicy,
    /// Read only these columns, in this order; all if empty. Each is a header name ("c0",
    /// "c1", … without a header), or else a 0-based index written in decimal ("1"): a name
    /// that is also a number means the named column.
    pub columns: Vec<String>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            has_header: None,
            delimiter: SNIFF_DELIMITER,
            empty: EmptyField::Error,
            nan: NanPolicy::Reject,
            columns: Vec::new(),
        }
    }
}

/// The delimiter a caller wrote as text: one ASCII character (`","`, `";"`, `"\t"`, `"|"`),
/// or the word "tab".
pub fn delimiter_from_str(text: &str) -> Result<u8> {
    match text.as_bytes() {
        b"tab" => Ok(b'\t'),
        [d] if *d != SNIFF_DELIMITER && d.is_ascii() => Ok(*d),
        _ => Err(invalid(
            "CSV delimiter",
            format!("{text:?} must be one ASCII character (or \"tab\")"),
        )),
    }
}

/// Reads a numeric CSV file into a table of float32 columns.
///
/// The file is read into memory first (a regular file only, opened without blocking), not
/// memory-mapped: a mapped file that someone truncates meanwhile kills the process with
/// SIGBUS, where a read ends early and is reported as a file that changed while it was read.
/// The copy costs a single-threaded pass over the file and the file's size in memory until the
/// parse ends: 0.12 s for 146 MB next to a 0.25 s parse on two cores, where populating a map
/// took 0.015 s (`examples/csv_scaling.rs`).
pub fn read_csv(path: &Path, options: &CsvOptions) -> Result<SoaTable> {
    let data = crate::file::read_whole(path, "CSV")?;
    parse_csv(&data, path, options)
}

/// How much of a file [`read_header`] reads first; it reads more only for a first line or
/// a sniffing window that does not fit.
const HEADER_PREFIX: u64 = 1 << 20;

/// Reads only the layout of a CSV file (names, units, delimiter, where the data starts) from
/// its first lines. `delimiter`: None sniffs it; the header is detected as [`read_csv`]
/// detects it.
pub fn read_header(path: &Path, delimiter: Option<u8>) -> Result<CsvHeader> {
    parse_header(&layout_prefix(path)?, path, delimiter)
}

/// The first lines of a CSV file, as many as its layout (header, delimiter sniffing, the
/// first data line) needs: the whole file when it is short.
pub(crate) fn layout_prefix(path: &Path) -> Result<Vec<u8>> {
    let mut limit = HEADER_PREFIX;
    loop {
        let mut data = crate::file::read_prefix(path, "CSV", limit)?;
        if (data.len() as u64) < limit {
            return Ok(data);
        }
        if let Some(lines) = header::layout_lines(&data) {
            let end = lines.len();
            data.truncate(end);
            return Ok(data);
        }
        limit = limit.saturating_mul(2);
    }
}

/// [`read_header`] on bytes (`path` only names the input in errors).
pub fn parse_header(data: &[u8], path: &Path, delimiter: Option<u8>) -> Result<CsvHeader> {
    header::analyze(data, path, delimiter, None)
}

/// Parses CSV bytes (`path` only names the input in errors).
pub fn parse_csv(data: &[u8], path: &Path, options: &CsvOptions) -> Result<SoaTable> {
    let (header, selected) = plan(data, path, options)?;
    rows::parse_rows(data, path, &header, &selected, options)
}

/// The layout of CSV bytes and the fields `options` select, as [`parse_csv`] reads them
/// before the rows.
pub(crate) fn plan(
    data: &[u8],
    path: &Path,
    options: &CsvOptions,
) -> Result<(CsvHeader, Vec<usize>)> {
    let delimiter = (options.delimiter != SNIFF_DELIMITER).then_some(options.delimiter);
    let header = header::analyze(data, path, delimiter, options.has_header)?;
    let selected = select(&header.names, &options.columns, path)?;
    Ok((header, selected))
}

/// The field index of each requested column: by name first, then as a 0-based index.
fn select(names: &[String], columns: &[String], path: &Path) -> Result<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..names.len()).collect());
    }
    columns
        .iter()
        .map(|c| {
            let index = || {
                c.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| c.parse::<usize>().ok())
                    .flatten()
                    .filter(|&i| i < names.len())
            };
            names
                .iter()
                .position(|n| n == c)
                .or_else(index)
                .ok_or_else(|| {
                    invalid(
                        "column",
                        format!(
                            "{}: no column {c:?} (columns: {}; or a 0-based index below {})",
                            path.display(),
                            names.join(", "),
                            names.len()
                        ),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, options: &CsvOptions) -> Result<SoaTable> {
        parse_csv(text.as_bytes(), Path::new("t.csv"), options)
    }

    fn columns(names: &[&str]) -> CsvOptions {
        CsvOptions {
            columns: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn columns_by_name_or_index() {
        let text = "'Elapsed time','MLII','V1'\n'seconds','mV','mV'\n0.000,-0.145,-0.065\n0.003,-0.150,-0.070\n";
        let t = parse(text, &columns(&["1"])).unwrap();
        assert_eq!(t.column::<f32>("MLII").unwrap(), &[-0.145, -0.150]);
        let t = parse(text, &columns(&["V1", "0"])).unwrap();
        assert_eq!(t.column::<f32>("Elapsed time").unwrap(), &[0.0, 0.003]);
        // A name that is also a number means the named column.
        let named = CsvOptions {
            has_header: Some(true),
            ..columns(&["1"])
        };
        let t = parse("2,1,0\n7,8,9\n", &named).unwrap();
        assert_eq!(t.column::<f32>("1").unwrap(), &[8.0]);
        let err = parse(text, &columns(&["II"])).unwrap_err().to_string();
        assert!(
            err.contains("t.csv: no column \"II\" (columns: Elapsed time, MLII, V1; or a 0-based index below 3)"),
            "{err}"
        );
        assert!(parse(text, &columns(&["3"])).is_err());
        assert!(parse(text, &columns(&["MLII", "1"]))
            .unwrap_err()
            .to_string()
            .contains("twice"));
        // Headerless: "c1" and "1" are the same column.
        let t = parse("1;2\n3;4\n", &columns(&["1"])).unwrap();
        assert_eq!(t.column::<f32>("c1").unwrap(), &[2.0, 4.0]);
    }

    #[test]
    fn quoted_fields_decimal_commas_and_clock_times_in_the_data() {
        let t = parse("\"a\";\"b\"\n\"1,5\";'2'\n", &CsvOptions::default()).unwrap();
        assert_eq!(t.column::<f32>("a").unwrap(), &[1.5]);
        assert_eq!(t.column::<f32>("b").unwrap(), &[2.0]);
        let text = "'Elapsed time','MLII'\n'hh:mm:ss.mmm','mV'\n'0:00.000',-0.145\n'0:00.003',-0.145\n'1:00:00.250',0.5\n";
        let t = parse(text, &CsvOptions::default()).unwrap();
        assert_eq!(
            t.column::<f32>("Elapsed time").unwrap(),
            &[0.0, 0.003, 3600.25]
        );
        // Clock times only where the units row says so.
        let err = parse("t,v\n0:01,1\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2, column 1 (t): \"0:01\" is not a number"),
            "{err}"
        );
        let err = parse("t,v\nhh:mm:ss,mV\n1:xx,1\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 3, column 1 (t): \"1:xx\" is not a number or a clock time"),
            "{err}"
        );
        // Decimal commas only when the comma is not the delimiter.
        let err = parse("a\tb\n1,5,2\t1\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"1,5,2\" is not a number"), "{err}");
    }

    #[test]
    fn crlf_and_the_single_column_fast_path() {
        for text in [
            "mv\r\n1.5\r\n-2\r\n\r\n3e1\r\n",
            "mv\r\n1.5\r\n-2\r\n\r\n3e1",
            "\u{feff}mv\r\n1.5\r\n-2\r\n3e1\r",
        ] {
            let t = parse(text, &CsvOptions::default()).unwrap();
            assert_eq!(
                t.column::<f32>("mv").unwrap(),
                &[1.5, -2.0, 30.0],
                "{text:?}"
            );
        }
        let err = parse("mv\r\n1.5\r\n2\rx\r\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3, column 1 (mv)"), "{err}");
    }

    #[test]
    fn a_sniffed_delimiter_that_does_not_fit_says_so() {
        let err = parse("a;b\n1,2\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2")
                && err.contains("expected 2 fields, found 1 (the delimiter ';' was detected"),
            "{err}"
        );
        let given = CsvOptions {
            delimiter: b';',
            ..Default::default()
        };
        let err = parse("a;b\n1,2\n", &given).unwrap_err().to_string();
        assert!(err.ends_with("expected 2 fields, found 1"), "{err}");
    }

    #[test]
    fn delimiters_from_text() {
        assert_eq!(delimiter_from_str(",").unwrap(), b',');
        assert_eq!(delimiter_from_str("\t").unwrap(), b'\t');
        assert_eq!(delimiter_from_str("tab").unwrap(), b'\t');
        for bad in ["", ";;", "é", "\0"] {
            assert!(delimiter_from_str(bad).is_err(), "{bad:?}");
        }
    }
}
