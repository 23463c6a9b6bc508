//! A parallel numeric CSV reader that parses straight into the float32 columns of a zerohop
//! `SoaTable` (allocated from the current memory resource): one pass counts rows per chunk,
//! a second parses each chunk into its rows of the columns, on all cores.

use std::path::Path;

use rayon::prelude::*;
use zerohop::soa::{Schema, SoaTable};
use zerohop::DType;

use crate::error::{invalid, EcgError, Result};

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

#[cfg(test)]
mod tests {
    use super::parse_plain_decimal;

    #[test]
    fn the_fast_path_agrees_with_the_standard_parser() {
        for text in [
            "0", "-0", "1", "-1.5", "0.0001", "123456.7", "16777215", "+2.25", "5.", ".5",
            "-0.4321", "9999.999", "3.141592",
        ] {
            let fast = parse_plain_decimal(text.as_bytes());
            assert_eq!(fast, Some(text.parse::<f32>().unwrap()), "{text}");
        }
        for text in [
            "",
            "-",
            ".",
            "1e3",
            "nan",
            "inf",
            "1.2.3",
            "16777216",
            "1234567890",
            "0.12345678901",
            "1,5",
            "--1",
            "3.1415926",
            "99999.9999",
        ] {
            assert_eq!(parse_plain_decimal(text.as_bytes()), None, "{text}");
        }
        // Every 4-decimal value in a range, against the standard parser.
        for i in -200_000i32..200_000 {
            let text = format!("{:.4}", i as f64 / 10_000.0);
            assert_eq!(
                parse_plain_decimal(text.as_bytes()),
                Some(text.parse::<f32>().unwrap())
            );
        }
    }
}

#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// `None`: detect (a first line with a non-numeric field is a header).
    pub has_header: Option<bool>,
    pub delimiter: u8,
    pub empty: EmptyField,
    pub nan: NanPolicy,
    /// Read only these columns (by name, or "c0", "c1", … without a header); all if empty.
    pub columns: Vec<String>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            has_header: None,
            delimiter: b',',
            empty: EmptyField::Error,
            nan: NanPolicy::Reject,
            columns: Vec::new(),
        }
    }
}

/// Splits `data` into about `parts` pieces that end at line ends.
fn chunk_bounds(data: &[u8], start: usize, parts: usize) -> Vec<(usize, usize)> {
    let len = data.len();
    let step = ((len - start) / parts.max(1)).max(1 << 16);
    let mut bounds = Vec::new();
    let mut begin = start;
    while begin < len {
        let mut end = (begin + step).min(len);
        while end < len && data[end - 1] != b'\n' {
            end += 1;
        }
        bounds.push((begin, end));
        begin = end;
    }
    bounds
}

/// Powers of ten that f32 represents exactly (5^10 < 2^24).
const POW10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// Parses plain decimals (`-12.345`) exactly and fast: with a mantissa below 2^24 and at most
/// ten fraction digits, both operands are exact f32 values and IEEE division rounds the
/// quotient correctly (Clinger's fast path). Anything else (exponents, long mantissas,
/// nan/inf, junk) returns None and goes to the standard parser.
#[inline]
fn parse_plain_decimal(bytes: &[u8]) -> Option<f32> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let mut mantissa: u32 = 0;
    let mut count = 0usize;
    let mut fraction = 0usize;
    let mut seen_dot = false;
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                if count == 9 {
                    return None;
                }
                mantissa = mantissa * 10 + u32::from(b - b'0');
                count += 1;
                fraction += usize::from(seen_dot);
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => return None,
        }
    }
    if count == 0 || mantissa >= 1 << 24 || fraction >= POW10.len() {
        return None;
    }
    let value = mantissa as f32 / POW10[fraction];
    Some(if negative { -value } else { value })
}

fn lines(chunk: &[u8]) -> impl Iterator<Item = &[u8]> {
    chunk
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Reads a numeric CSV file into a table of float32 columns. The file is memory-mapped, so
/// pages are read by the parsing threads themselves; it must not change during the call.
pub fn read_csv(path: &Path, options: &CsvOptions) -> Result<SoaTable> {
    let io = |source| EcgError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() == 0 {
        return parse_csv(&[], path, options);
    }
    // SAFETY: the map is read-only and lives until parsing ends; the documented contract is
    // that nobody truncates or rewrites the file meanwhile (the same contract as every
    // mmap-based reader). On platforms without mmap support this fails with an I/O error.
    // Populated up front: one kernel call maps every page, instead of a page fault per 4 KiB
    // that parsing threads would contend for.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?;
    parse_csv(&map, path, options)
}

/// Parses CSV bytes (`path` only names the input in errors).
pub fn parse_csv(data: &[u8], path: &Path, options: &CsvOptions) -> Result<SoaTable> {
    let delimiter = options.delimiter;
    let first_end = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let first = lines(&data[..first_end]).next().unwrap_or(&[]);
    if is_blank(first) {
        return Err(invalid(
            "CSV",
            format!("{}: the first line is empty", path.display()),
        ));
    }
    let first_fields: Vec<&str> = std::str::from_utf8(first)
        .map_err(|_| invalid("CSV", format!("{}: line 1 is not UTF-8", path.display())))?
        .split(delimiter as char)
        .map(str::trim)
        .collect();
    let has_header = options
        .has_header
        .unwrap_or_else(|| first_fields.iter().any(|f| f.parse::<f32>().is_err()));
    let names: Vec<String> = if has_header {
        first_fields.iter().map(|s| s.to_string()).collect()
    } else {
        (0..first_fields.len()).map(|i| format!("c{i}")).collect()
    };
    let width = names.len();
    let selected: Vec<usize> = if options.columns.is_empty() {
        (0..width).collect()
    } else {
        options
            .columns
            .iter()
            .map(|c| {
                names.iter().position(|n| n == c).ok_or_else(|| {
                    invalid(
                        "column",
                        format!(
                            "{}: no column {c:?} (columns: {})",
                            path.display(),
                            names.join(", ")
                        ),
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let body_start = if has_header {
        (first_end + 1).min(data.len())
    } else {
        0
    };
    let header_lines = usize::from(has_header);
    let threads = rayon::current_num_threads();
    let bounds = chunk_bounds(data, body_start, threads * 4);

    // Pass 1: data rows and physical lines per chunk. Newlines are counted with a tight
    // (vectorised) loop; only chunks that may hold blank lines are walked line by line.
    let counts: Vec<(usize, usize)> = bounds
        .par_iter()
        .map(|&(b, e)| {
            let chunk = &data[b..e];
            let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
            let physical = body.iter().filter(|&&c| c == b'\n').count() + 1;
            let may_have_blank = body.first().is_none_or(u8::is_ascii_whitespace)
                || body.last().is_some_and(u8::is_ascii_whitespace)
                || body
                    .windows(2)
                    .any(|w| w[0] == b'\n' && w[1].is_ascii_whitespace());
            let rows = if may_have_blank {
                lines(body).filter(|l| !is_blank(l)).count()
            } else {
                physical
            };
            (rows, physical)
        })
        .collect();
    let total_rows: usize = counts.iter().map(|c| c.0).sum();

    let mut schema = Schema::builder();
    let mut seen = std::collections::HashSet::new();
    for &i in &selected {
        if !seen.insert(names[i].as_str()) {
            return Err(invalid(
                "CSV header",
                format!("{}: column {:?} appears twice", path.display(), names[i]),
            ));
        }
        schema = schema.column(&names[i], DType::F32);
    }
    // Field index → the output column it fills, if selected (the selection may be in any
    // order, so a field's slot is looked up rather than assumed to follow the file's order).
    let mut slots: Vec<Option<usize>> = vec![None; width];
    for (slot, &field) in selected.iter().enumerate() {
        slots[field] = Some(slot);
    }
    // SAFETY: the parse below writes every row of every column: each chunk fills exactly its
    // counted rows, a row is accepted only with all `width` fields present, and every
    // selected field has its own slot (duplicates were refused above); on an error the table
    // is dropped unread.
    let mut table = unsafe { SoaTable::new_uninit(schema.build()?, total_rows)? };
    let mut columns: Vec<&mut [f32]> = table.columns_mut::<f32>()?;

    // Split every column into the disjoint row ranges of the chunks.
    let mut per_chunk: Vec<Vec<&mut [f32]>> = (0..bounds.len()).map(|_| Vec::new()).collect();
    for column in columns.drain(..) {
        let mut rest = column;
        for (slot, &(rows, _)) in per_chunk.iter_mut().zip(&counts) {
            let (head, tail) = rest.split_at_mut(rows);
            slot.push(head);
            rest = tail;
        }
    }
    let mut first_line = header_lines + 1;
    let starts: Vec<usize> = counts
        .iter()
        .map(|&(_, physical)| {
            let s = first_line;
            first_line += physical;
            s
        })
        .collect();

    let context = LineContext {
        path,
        names: &names,
        slots: &slots,
        width,
        delimiter,
        options,
    };
    bounds
        .par_iter()
        .zip(per_chunk.par_iter_mut())
        .zip(starts.par_iter())
        .try_for_each(|((&(b, e), outputs), &line_no)| {
            let chunk = &data[b..e];
            let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
            if width == 1 {
                return parse_single_column(body, line_no, outputs[0], &context);
            }
            let mut row = 0;
            for (offset, line) in lines(body).enumerate() {
                context.parse_line(line, line_no + offset, &mut row, outputs)?;
            }
            Ok(())
        })?;
    drop(per_chunk);
    Ok(table)
}

/// What parsing one line needs to know.
struct LineContext<'a> {
    path: &'a Path,
    names: &'a [String],
    /// For each field of a line, the output column it fills (None: not selected).
    slots: &'a [Option<usize>],
    width: usize,
    delimiter: u8,
    options: &'a CsvOptions,
}

impl LineContext<'_> {
    /// Parses one physical line into row `*row` of `outputs` (advancing it), skipping blank
    /// lines.
    fn parse_line(
        &self,
        line: &[u8],
        line_number: usize,
        row: &mut usize,
        outputs: &mut [&mut [f32]],
    ) -> Result<()> {
        if is_blank(line) {
            return Ok(());
        }
        let error = |column: usize, reason: String| EcgError::Parse {
            path: self.path.to_owned(),
            line: line_number,
            column: column + 1,
            name: self.names.get(column).cloned().unwrap_or_default(),
            reason,
        };
        let mut count = 0;
        for (field_index, field) in line.split(|&c| c == self.delimiter).enumerate() {
            count += 1;
            if let Some(&Some(slot)) = self.slots.get(field_index) {
                let raw = field.trim_ascii();
                let value = if raw.is_empty() {
                    match self.options.empty {
                        EmptyField::Error => return Err(error(field_index, "empty field".into())),
                        EmptyField::Nan => f32::NAN,
                        EmptyField::Value(v) => v,
                    }
                } else if let Some(v) = parse_plain_decimal(raw) {
                    v
                } else {
                    let text = std::str::from_utf8(raw)
                        .map_err(|_| error(field_index, "not UTF-8".into()))?;
                    let v: f32 = text
                        .parse()
                        .map_err(|_| error(field_index, format!("{text:?} is not a number")))?;
                    if !v.is_finite() && self.options.nan == NanPolicy::Reject {
                        return Err(error(field_index, format!("{text:?} is not finite")));
                    }
                    v
                };
                outputs[slot][*row] = value;
            }
        }
        if count != self.width {
            return Err(error(
                count.min(self.width.saturating_sub(1)),
                format!("expected {} fields, found {count}", self.width),
            ));
        }
        *row += 1;
        Ok(())
    }
}

/// One pass over a single-column chunk: plain decimals (`-12.345`, the common case) are
/// parsed as the newline is found, in the same exact way as `parse_plain_decimal`; any other
/// line (blank, spaces, exponents, errors) goes through the general line parser.
fn parse_single_column(
    body: &[u8],
    first_line: usize,
    column: &mut [f32],
    context: &LineContext<'_>,
) -> Result<()> {
    let len = body.len();
    let (mut i, mut row, mut line_number) = (0usize, 0usize, first_line);
    while i <= len {
        let start = i;
        let negative = i < len && body[i] == b'-';
        if i < len && (body[i] == b'-' || body[i] == b'+') {
            i += 1;
        }
        let (mut mantissa, mut digits, mut fraction, mut dot) = (0u32, 0usize, 0usize, false);
        while i < len && digits < 9 {
            match body[i] {
                b @ b'0'..=b'9' => {
                    mantissa = mantissa * 10 + u32::from(b - b'0');
                    digits += 1;
                    fraction += usize::from(dot);
                }
                b'.' if !dot => dot = true,
                _ => break,
            }
            i += 1;
        }
        let at_end = i == len || body[i] == b'\n';
        if at_end && digits > 0 && mantissa < 1 << 24 && fraction < POW10.len() {
            let value = mantissa as f32 / POW10[fraction];
            column[row] = if negative { -value } else { value };
            row += 1;
        } else {
            let end = body[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(len, |p| start + p);
            let line = &body[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            context.parse_line(
                line,
                line_number,
                &mut row,
                std::slice::from_mut(&mut &mut *column),
            )?;
            i = end;
        }
        i += 1;
        line_number += 1;
    }
    Ok(())
}
