//! What comes before the numbers: a byte-order mark, the delimiter (given or sniffed), the
//! header line with its (possibly quoted) names, and an optional units row.

use std::borrow::Cow;
use std::path::Path;

use super::decimal::is_number;
use super::rows::is_blank;
use crate::error::{invalid, Result};

/// The UTF-8 byte-order mark some editors (and Excel's "CSV UTF-8") write first.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The delimiters sniffing chooses among.
const CANDIDATES: [u8; 3] = [b',', b';', b'\t'];

/// How much of the file sniffing looks at: the first line whole, then further lines up to
/// this many non-blank lines or this many bytes, whichever comes first.
const SNIFF_LINES: usize = 16;
const SNIFF_BYTES: usize = 64 << 10;

/// The layout of a CSV file, as read from its first lines.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvHeader {
    /// The column names without their quotes ("c0", "c1", … without a header; an empty
    /// header name, as pandas writes for an index, is named the same way).
    pub names: Vec<String>,
    /// The units row after the header (a row of words, such as PhysioNet's
    /// `'seconds','mV','mV'`), one entry per column; None when there is none.
    pub units: Option<Vec<String>>,
    pub delimiter: u8,
    /// Whether the delimiter was sniffed rather than given.
    pub delimiter_sniffed: bool,
    pub has_header: bool,
    /// The 1-based line number of the first line after the header and units row.
    pub first_data_line: usize,
    /// The byte offset where that line starts.
    pub data_offset: usize,
}

/// One physical line starting at `start`: its text without the line end (`\n` or `\r\n`),
/// and where the next line starts.
pub(super) fn line_at(data: &[u8], start: usize) -> (&[u8], usize) {
    let rest = &data[start.min(data.len())..];
    let (line, next) = match rest.iter().position(|&b| b == b'\n') {
        Some(p) => (&rest[..p], start + p + 1),
        None => (rest, data.len()),
    };
    (line.strip_suffix(b"\r").unwrap_or(line), next)
}

/// Why a line could not be split into fields, and at which (0-based) field.
#[derive(Debug, PartialEq)]
pub(super) struct QuoteError {
    pub field: usize,
    pub reason: &'static str,
}

/// Splits a header or units line into fields, each trimmed and without its quotes. A field
/// is quoted when it starts (after spaces) with `"` or `'`; inside, the delimiter is text and
/// a doubled quote is one quote character. A quote character that is the delimiter is only a
/// delimiter.
pub(super) fn split_fields(line: &[u8], delimiter: u8) -> Result<Vec<Cow<'_, [u8]>>, QuoteError> {
    let len = line.len();
    let space = |b: u8| b != delimiter && b.is_ascii_whitespace();
    let mut fields = Vec::new();
    let mut i = 0;
    loop {
        while i < len && space(line[i]) {
            i += 1;
        }
        let quote = line
            .get(i)
            .copied()
            .filter(|&b| (b == b'"' || b == b'\'') && b != delimiter);
        if let Some(q) = quote {
            let error = |reason| QuoteError {
                field: fields.len(),
                reason,
            };
            i += 1;
            let start = i;
            // Borrowed unless a doubled quote has to be collapsed.
            let mut owned: Option<Vec<u8>> = None;
            let text = loop {
                let Some(p) = line[i..].iter().position(|&b| b == q) else {
                    return Err(error("a quote is not closed"));
                };
                let close = i + p;
                if line.get(close + 1) == Some(&q) {
                    let buffer = owned.get_or_insert_with(Vec::new);
                    buffer.extend_from_slice(&line[i..=close]);
                    i = close + 2;
                } else {
                    let text = match owned.take() {
                        Some(mut buffer) => {
                            buffer.extend_from_slice(&line[i..close]);
                            Cow::Owned(buffer)
                        }
                        None => Cow::Borrowed(&line[start..close]),
                    };
                    i = close + 1;
                    break text;
                }
            };
            while i < len && space(line[i]) {
                i += 1;
            }
            if i < len && line[i] != delimiter {
                return Err(error("text follows the closing quote"));
            }
            fields.push(text);
        } else {
            let start = i;
            while i < len && line[i] != delimiter {
                i += 1;
            }
            fields.push(Cow::Borrowed(line[start..i].trim_ascii_end()));
        }
        if i >= len {
            return Ok(fields);
        }
        i += 1;
    }
}

/// A delimiter for messages: tab is invisible, the others are shown quoted.
pub(super) fn show(delimiter: u8) -> String {
    match delimiter {
        b'\t' => "tab".into(),
        d => format!("{:?}", d as char),
    }
}

fn check_delimiter(delimiter: u8, path: &Path) -> Result<u8> {
    if !delimiter.is_ascii() || matches!(delimiter, b'\n' | b'\r' | b'"' | b'\'') {
        return Err(invalid(
            "CSV delimiter",
            format!(
                "{}: {:?} cannot separate fields (a line end, a quote or not ASCII)",
                path.display(),
                delimiter as char
            ),
        ));
    }
    Ok(delimiter)
}

/// Picks the delimiter from the first lines: the candidate that splits every sampled line into
/// the same number (> 1) of fields. When `,` ties with another candidate under which the
/// fields hold decimal commas (`0,5;1,25` splits evenly both ways), the other one wins. When
/// none splits every line evenly, the one that splits the first line is taken and the rows
/// that disagree are reported by the parser with their line numbers; a file whose lines are
/// one field under every candidate is a one-column file, which any delimiter reads.
fn sniff(data: &[u8], start: usize, path: &Path) -> Result<u8> {
    let mut lines = Vec::new();
    let mut pos = start;
    while pos < data.len()
        && lines.len() < SNIFF_LINES
        && (lines.is_empty() || pos - start < SNIFF_BYTES)
    {
        let (line, next) = line_at(data, pos);
        if !is_blank(line) {
            lines.push(line);
        }
        pos = next;
    }
    let counts: Vec<Vec<usize>> = CANDIDATES
        .iter()
        .map(|&d| {
            lines
                .iter()
                .map(|l| split_fields(l, d).map_or(0, |f| f.len()))
                .collect()
        })
        .collect();
    let even: Vec<usize> = (0..CANDIDATES.len())
        .filter(|&c| counts[c].iter().all(|&n| n > 1 && n == counts[c][0]))
        .collect();
    let ambiguous = |which: &[usize], how: &str| {
        let list: Vec<String> = which
            .iter()
            .map(|&c| format!("{} ({} fields)", show(CANDIDATES[c]), counts[c][0]))
            .collect();
        invalid(
            "CSV delimiter",
            format!(
                "{}: cannot tell the delimiter: {} {how}; pass the delimiter",
                path.display(),
                list.join(" and "),
            ),
        )
    };
    match even.as_slice() {
        [c] => Ok(CANDIDATES[*c]),
        [] => {
            let first: Vec<usize> = (0..CANDIDATES.len())
                .filter(|&c| counts[c][0] > 1)
                .collect();
            match first.as_slice() {
                [] => Ok(b','),
                [c] => Ok(CANDIDATES[*c]),
                several => Err(ambiguous(several, "each split the first line")),
            }
        }
        several => {
            let others: Vec<usize> = several
                .iter()
                .copied()
                .filter(|&c| CANDIDATES[c] != b',')
                .collect();
            let comma_is_decimal = |c: usize| {
                lines.iter().any(|l| {
                    split_fields(l, CANDIDATES[c]).is_ok_and(|fields| {
                        fields
                            .iter()
                            .any(|f| super::decimal::parse_decimal_comma(f).is_some())
                    })
                })
            };
            match others.as_slice() {
                [c] if several.len() == 2 && comma_is_decimal(*c) => Ok(CANDIDATES[*c]),
                _ => Err(ambiguous(
                    several,
                    "each split every one of the first lines evenly",
                )),
            }
        }
    }
}

/// The whole lines at the start of `prefix` (a file's first bytes) when they are all that
/// [`analyze`] reads of the file: the first line, the sniffing window after it and the next
/// non-blank line (a units row or not). None when more of the file is needed.
pub(super) fn layout_lines(prefix: &[u8]) -> Option<&[u8]> {
    let bom = if prefix.starts_with(BOM) {
        BOM.len()
    } else {
        0
    };
    let (start, _) = past_comments(prefix, bom);
    let end = prefix.iter().rposition(|&b| b == b'\n')? + 1;
    let lines = &prefix[..end];
    if end - start < SNIFF_BYTES {
        return None;
    }
    let (_, mut pos) = line_at(lines, start);
    while pos < end {
        let (line, next) = line_at(lines, pos);
        if !is_blank(line) {
            return Some(lines);
        }
        pos = next;
    }
    None
}

/// Where the text starts after a preamble of comment lines (each starting with `#`, as
/// recorders' exports write the device, the patient or the settings; blank lines between them
/// belong to the preamble), and how many lines it took.
pub(super) fn past_comments(data: &[u8], mut pos: usize) -> (usize, usize) {
    let mut skipped = 0;
    loop {
        let (line, next) = line_at(data, pos);
        let comment = line.trim_ascii_start().starts_with(b"#");
        if next == pos || !(comment || (skipped > 0 && is_blank(line))) {
            return (pos, skipped);
        }
        pos = next;
        skipped += 1;
    }
}

/// Reads the layout from the start of `data` (after a preamble of `#` lines). `delimiter`: None sniffs; `has_header`: None
/// detects (a first line with a field that is not a number is a header).
pub(super) fn analyze(
    data: &[u8],
    path: &Path,
    delimiter: Option<u8>,
    has_header: Option<bool>,
) -> Result<CsvHeader> {
    let bom = if data.starts_with(BOM) { BOM.len() } else { 0 };
    let (start, skipped) = past_comments(data, bom);
    let (first, after_first) = line_at(data, start);
    if is_blank(first) {
        return Err(invalid(
            "CSV",
            format!("{}: the first line is empty", path.display()),
        ));
    }
    let (delimiter, delimiter_sniffed) = match delimiter {
        Some(d) => (check_delimiter(d, path)?, false),
        None => (sniff(data, start, path)?, true),
    };
    let text = |line: &[u8], number: usize| {
        std::str::from_utf8(line).map(str::to_owned).map_err(|_| {
            invalid(
                "CSV",
                format!("{}: line {number} is not UTF-8", path.display()),
            )
        })
    };
    let quote_error = |e: QuoteError, number: usize| {
        invalid(
            "CSV header",
            format!(
                "{}, line {number}, column {}: {}",
                path.display(),
                e.field + 1,
                e.reason
            ),
        )
    };
    let first_number = skipped + 1;
    text(first, first_number)?;
    let fields: Vec<String> = split_fields(first, delimiter)
        .map_err(|e| quote_error(e, first_number))?
        .iter()
        // Lossless: the line is UTF-8 and only ASCII bytes (quotes, spaces) were removed.
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let has_header = has_header.unwrap_or_else(|| {
        fields
            .iter()
            .any(|f| !f.is_empty() && !is_number(f, delimiter))
    });
    let unnamed = |i: usize| format!("c{i}");
    let names: Vec<String> = if has_header {
        fields
            .iter()
            .enumerate()
            .map(|(i, f)| if f.is_empty() { unnamed(i) } else { f.clone() })
            .collect()
    } else {
        (0..fields.len()).map(unnamed).collect()
    };
    let mut header = CsvHeader {
        units: None,
        delimiter,
        delimiter_sniffed,
        has_header,
        first_data_line: first_number,
        data_offset: start,
        names,
    };
    if !has_header {
        return Ok(header);
    }
    header.first_data_line = first_number + 1;
    header.data_offset = after_first;
    // The units row, if any, is the next non-blank line.
    let (mut pos, mut number) = (after_first, first_number + 1);
    while pos < data.len() {
        let (line, next) = line_at(data, pos);
        if !is_blank(line) {
            if let Some(units) = units_row(line, delimiter, header.names.len()) {
                header.units = Some(units);
                header.first_data_line = number + 1;
                header.data_offset = next;
            }
            break;
        }
        pos = next;
        number += 1;
    }
    Ok(header)
}

/// The fields of a units row: as many as there are columns, none a number, at least one not
/// empty (a row of empty fields is data under `EmptyField::Nan`).
fn units_row(line: &[u8], delimiter: u8, width: usize) -> Option<Vec<String>> {
    std::str::from_utf8(line).ok()?;
    let fields = split_fields(line, delimiter).ok()?;
    let units: Vec<String> = fields
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let words = units
        .iter()
        .all(|u| u.is_empty() || !is_number(u, delimiter))
        && units.iter().any(|u| !u.is_empty());
    (units.len() == width && words).then_some(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str, d: u8) -> Vec<String> {
        split_fields(line.as_bytes(), d)
            .unwrap()
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    fn header(text: &str) -> Result<CsvHeader> {
        analyze(text.as_bytes(), Path::new("h.csv"), None, None)
    }

    #[test]
    fn a_preamble_of_comment_lines_is_skipped_and_lines_keep_their_numbers() {
        let text = "# Holter XYZ, serial 12\n  # 250 Hz, lead II\n\ntime,II\n0,1.0\n";
        let h = header(text).unwrap();
        assert_eq!(h.names, ["time", "II"]);
        assert_eq!(h.first_data_line, 5);
        assert_eq!(&text.as_bytes()[h.data_offset..], b"0,1.0\n");
        let bare = header("# only a comment\n1.0\n2.0\n").unwrap();
        assert!(!bare.has_header);
        assert_eq!((bare.first_data_line, bare.names.len()), (2, 1));
        let err = analyze(b"# a comment\n\xff,1\n", Path::new("h.csv"), None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2 is not UTF-8"), "{err}");
        assert!(
            header("\ntime,II\n").is_err(),
            "a blank first line is still refused"
        );
    }

    #[test]
    fn quoted_fields_lose_their_quotes() {
        assert_eq!(
            split("'Elapsed time','MLII','V1'", b','),
            ["Elapsed time", "MLII", "V1"]
        );
        assert_eq!(
            split(r#" "a, b" ; c ;"it""s""#, b';'),
            ["a, b", "c", "it\"s"]
        );
        assert_eq!(split("'it''s',x", b','), ["it's", "x"]);
        assert_eq!(split("a,,b,", b','), ["a", "", "b", ""]);
        assert_eq!(split("a\t b \t", b'\t'), ["a", "b", ""]);
        assert_eq!(
            split("don't,x", b','),
            ["don't", "x"],
            "an inner quote is text"
        );
        assert_eq!(split("''", b','), [""]);
        let err = split_fields(b"a,'b", b',').unwrap_err();
        assert_eq!((err.field, err.reason), (1, "a quote is not closed"));
        let err = split_fields(b"\"a\"b,c", b',').unwrap_err();
        assert_eq!(
            (err.field, err.reason),
            (0, "text follows the closing quote")
        );
        // A quote that is the delimiter only delimits.
        assert_eq!(split("a'b", b'\''), ["a", "b"]);
    }

    #[test]
    fn sniffing_picks_the_delimiter_that_splits_every_line_evenly() {
        assert_eq!(header("a;b\n1;2\n").unwrap().delimiter, b';');
        assert_eq!(header("a\tb\n1\t2\n").unwrap().delimiter, b'\t');
        assert_eq!(header("a,b\n1,2\n").unwrap().delimiter, b',');
        assert_eq!(header("mv\n1\n2\n").unwrap().delimiter, b',');
        // Decimal commas split evenly too, but the other delimiter wins the tie.
        assert_eq!(header("0,5;1,25\n2,5;3,5\n").unwrap().delimiter, b';');
        assert_eq!(header("t\tv\n0,5\t1,25\n").unwrap().delimiter, b'\t');
        // A quoted comma does not split.
        assert_eq!(header("\"t, s\";mV\n1;2\n").unwrap().delimiter, b';');
        // Uneven rows: the first line decides, the parser reports the row.
        assert_eq!(header("a,b\n1,2\n\n3\n").unwrap().delimiter, b',');
        let err = header("a;b\tc\n1;2\t3\n").unwrap_err().to_string();
        assert!(
            err.contains("cannot tell the delimiter") && err.contains("h.csv"),
            "{err}"
        );
        assert!(err.contains("';' (2 fields) and tab (2 fields)"), "{err}");
        let err = header("a;b\tc\n1\n").unwrap_err().to_string();
        assert!(err.contains("each split the first line"), "{err}");
        for bad in [b'\n', b'"', 0xE9] {
            let err = analyze(b"a\n1\n", Path::new("h.csv"), Some(bad), None).unwrap_err();
            assert!(err.to_string().contains("delimiter"), "{err}");
        }
    }

    #[test]
    fn units_rows_bom_and_line_numbers() {
        let h = header("\u{feff}'Elapsed time','MLII','V1'\r\n'seconds','mV','mV'\r\n0,1,2\r\n")
            .unwrap();
        assert_eq!(h.names, ["Elapsed time", "MLII", "V1"]);
        assert_eq!(
            h.units.as_deref(),
            Some(&["seconds".to_string(), "mV".into(), "mV".into()][..])
        );
        assert_eq!(
            (h.first_data_line, h.has_header, h.delimiter),
            (3, true, b',')
        );
        let h = header("a,b\n1,x\n").unwrap();
        assert_eq!(
            (h.units, h.first_data_line),
            (None, 2),
            "a row with a number is data"
        );
        let h = header("a,b\n,\n").unwrap();
        assert_eq!(h.units, None, "empty fields are data");
        let h = header("a,b\n\ns,\n1,2\n").unwrap();
        assert_eq!(h.units, Some(vec!["s".into(), String::new()]));
        assert_eq!(h.first_data_line, 4);
        let h = header("1,2\nx,y\n").unwrap();
        assert_eq!(
            (h.has_header, h.units, h.names),
            (false, None, vec!["c0".into(), "c1".into()])
        );
        let h = header(",mv\n0,1\n").unwrap();
        assert_eq!(h.names, ["c0", "mv"], "an unnamed index column");
        let h = header("t;v\n0,5;1\n").unwrap();
        assert_eq!(
            (h.delimiter, h.units),
            (b';', None),
            "decimal commas are numbers"
        );
        assert!(!header("0,5;1\n").unwrap().has_header);
        let err = header("'a,b\n1\n").unwrap_err().to_string();
        assert!(
            err.contains("h.csv, line 1, column 1: a quote is not closed"),
            "{err}"
        );
    }
}
