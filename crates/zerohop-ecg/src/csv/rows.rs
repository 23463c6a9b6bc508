//! The data rows: one pass counts rows per chunk, a second parses each chunk into its rows of
//! the columns, on all cores.

use std::path::Path;

use rayon::prelude::*;
use zerohop::soa::{Schema, SoaTable};
use zerohop::DType;

use super::decimal::{parse_decimal_comma, parse_plain_decimal, POW10};
use super::header::{show, CsvHeader};
use super::time::{is_clock_unit, parse_clock};
use super::{CsvOptions, EmptyField, NanPolicy};
use crate::error::{invalid, EcgError, ParseProblem, Result};

/// Splits `data[start..]` into about `parts` pieces that end at line ends.
fn chunk_bounds(data: &[u8], start: usize, parts: usize) -> Vec<(usize, usize)> {
    let len = data.len();
    let step = (len.saturating_sub(start) / parts.max(1)).max(1 << 16);
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

fn lines(chunk: &[u8]) -> impl Iterator<Item = &[u8]> {
    chunk
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Whether a newline is followed by whitespace anywhere in `bytes`. Written without an early
/// exit inside each block so the compiler vectorises it: this pass reads every byte of the
/// file, and `windows(2).any(..)` ran at a fraction of memory speed.
fn newline_then_space(bytes: &[u8]) -> bool {
    const BLOCK: usize = 4096;
    let mut start = 0;
    while start + 1 < bytes.len() {
        let end = (start + BLOCK + 1).min(bytes.len());
        let block = &bytes[start..end];
        let mut found = false;
        for (&a, &b) in block.iter().zip(&block[1..]) {
            found |=
                (a == b'\n') & (b == b' ' || b == b'\t' || b == b'\n' || b == b'\r' || b == 0x0c);
        }
        if found {
            return true;
        }
        start += BLOCK;
    }
    false
}

/// Data rows and physical lines in one chunk. Newlines are counted with a tight (vectorised)
/// loop; only chunks that may hold blank lines are walked line by line. A blank line starts
/// the chunk, follows a newline with whitespace (or another newline), or is an empty last
/// line — a CRLF line end alone does not make a chunk suspect.
fn count_rows(body: &[u8]) -> (usize, usize) {
    let physical = body.iter().filter(|&&c| c == b'\n').count() + 1;
    let last_line = &body[body.iter().rposition(|&c| c == b'\n').map_or(0, |p| p + 1)..];
    let may_have_blank = body.first().is_none_or(u8::is_ascii_whitespace)
        || is_blank(last_line)
        || newline_then_space(body);
    let rows = if may_have_blank {
        lines(body).filter(|l| !is_blank(l)).count()
    } else {
        physical
    };
    (rows, physical)
}

/// Parses the rows after `header` into a table of the `selected` fields (in that order).
pub(super) fn parse_rows(
    data: &[u8],
    path: &Path,
    header: &CsvHeader,
    selected: &[usize],
    options: &CsvOptions,
) -> Result<SoaTable> {
    let names = &header.names;
    let width = names.len();
    let threads = rayon::current_num_threads();
    let bounds = chunk_bounds(data, header.data_offset, threads * 4);

    // Pass 1: data rows and physical lines per chunk.
    let counts: Vec<(usize, usize)> = bounds
        .par_iter()
        .map(|&(b, e)| {
            let chunk = &data[b..e];
            count_rows(chunk.strip_suffix(b"\n").unwrap_or(chunk))
        })
        .collect();
    let total_rows: usize = counts.iter().map(|c| c.0).sum();

    let fields = Fields::new(header, selected, path)?;
    // SAFETY: the parse below writes every row of every column: each chunk fills exactly its
    // counted rows, a row is accepted only with all `width` fields present, and every
    // selected field has its own slot (duplicates were refused above); on an error the table
    // is dropped unread.
    let mut table = unsafe { SoaTable::new_uninit(fields.schema.clone(), total_rows)? };
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
    let mut first_line = header.first_data_line;
    let starts: Vec<usize> = counts
        .iter()
        .map(|&(_, physical)| {
            let s = first_line;
            first_line += physical;
            s
        })
        .collect();

    let context = fields.context(path, header, options);
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

/// The output columns of a CSV read and how each field of a line maps to them.
pub(crate) struct Fields {
    /// One float32 column per selected field, in the selection's order.
    pub schema: Schema,
    /// For each field of a line, the output column it fills (None: not selected).
    pub slots: Vec<Option<usize>>,
    /// For each field, whether it holds clock times (its unit says so).
    clock: Vec<bool>,
}

impl Fields {
    /// The columns for the `selected` fields of `header` (refusing a field chosen twice).
    pub(crate) fn new(header: &CsvHeader, selected: &[usize], path: &Path) -> Result<Fields> {
        let names = &header.names;
        let mut schema = Schema::builder();
        let mut seen = std::collections::HashSet::new();
        for &i in selected {
            if !seen.insert(names[i].as_str()) {
                return Err(invalid(
                    "CSV header",
                    format!("{}: column {:?} appears twice", path.display(), names[i]),
                ));
            }
            schema = schema.column(&names[i], DType::F32);
        }
        // The selection may be in any order, so a field's slot is looked up rather than
        // assumed to follow the file's order.
        let mut slots: Vec<Option<usize>> = vec![None; names.len()];
        for (slot, &field) in selected.iter().enumerate() {
            slots[field] = Some(slot);
        }
        // Columns whose unit names a clock format hold times such as `0:00.003`.
        let clock = match &header.units {
            Some(units) => units.iter().map(|u| is_clock_unit(u)).collect(),
            None => vec![false; names.len()],
        };
        Ok(Fields {
            schema: schema.build()?,
            slots,
            clock,
        })
    }

    /// The line parser for these columns.
    pub(crate) fn context<'a>(
        &'a self,
        path: &'a Path,
        header: &'a CsvHeader,
        options: &'a CsvOptions,
    ) -> LineContext<'a> {
        LineContext {
            path,
            names: &header.names,
            slots: &self.slots,
            clock: &self.clock,
            width: header.names.len(),
            delimiter: header.delimiter,
            sniffed: header.delimiter_sniffed,
            options,
        }
    }
}

/// What parsing one line needs to know.
pub(crate) struct LineContext<'a> {
    path: &'a Path,
    names: &'a [String],
    /// For each field of a line, the output column it fills (None: not selected).
    slots: &'a [Option<usize>],
    /// For each field, whether it holds clock times (its unit says so).
    clock: &'a [bool],
    width: usize,
    delimiter: u8,
    /// Whether the delimiter was sniffed (a wrong field count then says how to choose it).
    sniffed: bool,
    options: &'a CsvOptions,
}

impl LineContext<'_> {
    /// Parses one physical line into row `*row` of `outputs` (advancing it), skipping blank
    /// lines.
    pub(crate) fn parse_line(
        &self,
        line: &[u8],
        line_number: usize,
        row: &mut usize,
        outputs: &mut [&mut [f32]],
    ) -> Result<()> {
        if is_blank(line) {
            return Ok(());
        }
        let error = |column: usize, (problem, reason): (ParseProblem, String)| EcgError::Parse {
            path: self.path.to_owned(),
            line: line_number,
            column: column + 1,
            name: self.names.get(column).cloned().unwrap_or_default(),
            problem,
            reason,
        };
        let mut count = 0;
        for (field_index, field) in line.split(|&c| c == self.delimiter).enumerate() {
            count += 1;
            if let Some(&Some(slot)) = self.slots.get(field_index) {
                let raw = field.trim_ascii();
                let value = match parse_plain_decimal(raw) {
                    Some(v) => v,
                    None => self
                        .other_value(raw, field_index)
                        .map_err(|reason| error(field_index, reason))?,
                };
                outputs[slot][*row] = value;
            }
        }
        if count != self.width {
            let mut reason = format!("expected {} fields, found {count}", self.width);
            if self.sniffed {
                reason.push_str(&format!(
                    " (the delimiter {} was detected from the first lines; pass the \
                     delimiter if it is another)",
                    show(self.delimiter)
                ));
            }
            let column = count.min(self.width.saturating_sub(1));
            return Err(error(column, (ParseProblem::Malformed, reason)));
        }
        *row += 1;
        Ok(())
    }

    /// A field that is not a plain decimal: empty, quoted, an exponent or special value, a
    /// decimal comma, a clock time, or an error (the reason, for the caller to place).
    #[cold]
    fn other_value(
        &self,
        raw: &[u8],
        field: usize,
    ) -> std::result::Result<f32, (ParseProblem, String)> {
        let malformed = |reason: String| (ParseProblem::Malformed, reason);
        // Some exports quote every field: `"1.5"` and `'1.5'` are numbers.
        let raw = match raw {
            [q @ (b'"' | b'\''), inner @ .., last] if q == last && *q != self.delimiter => {
                inner.trim_ascii()
            }
            _ => raw,
        };
        if raw.is_empty() {
            return match self.options.empty {
                EmptyField::Error => Err((ParseProblem::MissingCell, "empty field".into())),
                EmptyField::Nan => Ok(f32::NAN),
                EmptyField::Value(v) => Ok(v),
            };
        }
        if let Some(v) = parse_plain_decimal(raw) {
            return Ok(v);
        }
        let text = std::str::from_utf8(raw).map_err(|_| malformed("not UTF-8".to_string()))?;
        let value = match text.parse::<f32>() {
            Ok(v) => v,
            Err(_) => {
                let comma = (self.delimiter != b',')
                    .then(|| parse_decimal_comma(raw))
                    .flatten();
                let clock = self.clock.get(field).is_some_and(|&c| c);
                let time = clock
                    .then(|| parse_clock(text))
                    .flatten()
                    .map(|seconds| seconds as f32);
                comma.or(time).ok_or_else(|| {
                    malformed(if clock {
                        format!("{text:?} is not a number or a clock time (h:mm:ss.mmm)")
                    } else {
                        format!("{text:?} is not a number")
                    })
                })?
            }
        };
        if !value.is_finite() && self.options.nan == NanPolicy::Reject {
            return Err((ParseProblem::MissingCell, format!("{text:?} is not finite")));
        }
        Ok(value)
    }
}

/// One pass over a single-column chunk: plain decimals (`-12.345`, the common case) are
/// parsed as the line end (`\n`, or `\r\n`) is found, in the same exact way as
/// `parse_plain_decimal`; any other line (blank, spaces, exponents, errors) goes through the
/// general line parser.
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
        let mut at_end = i == len || body[i] == b'\n';
        if !at_end && body[i] == b'\r' && (i + 1 == len || body[i + 1] == b'\n') {
            // The CR of a CRLF line end (a chunk's last line keeps its CR): step onto the
            // newline, so CRLF files stay on this path.
            i += 1;
            at_end = true;
        }
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

#[cfg(test)]
mod tests {
    use super::newline_then_space;
    use proptest::prelude::*;

    fn reference(bytes: &[u8]) -> bool {
        bytes
            .windows(2)
            .any(|w| w[0] == b'\n' && w[1].is_ascii_whitespace())
    }

    #[test]
    fn block_edges_and_the_ends() {
        assert!(!newline_then_space(b""));
        assert!(!newline_then_space(b"\n"));
        assert!(newline_then_space(b"\n\n"));
        assert!(!newline_then_space(b"1\n2\r\n3"));
        for at in [0, 4094, 4095, 4096, 8191, 9000] {
            let mut text = vec![b'7'; 10_000];
            text[at] = b'\n';
            assert!(!newline_then_space(&text), "{at}");
            text[at + 1] = b'\t';
            assert!(newline_then_space(&text), "{at}");
        }
    }

    proptest! {
        // Inputs long enough to cross a block edge; few cases keep the debug build quick.
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn agrees_with_the_pairwise_definition(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b' '), Just(b'\t'), Just(b'\r'), Just(0x0cu8),
                             Just(0x0bu8), Just(b'1'), Just(b',')],
                0..6_000,
            )
        ) {
            prop_assert_eq!(newline_then_space(&bytes), reference(&bytes));
        }
    }
}
