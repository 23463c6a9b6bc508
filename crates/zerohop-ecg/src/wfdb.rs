//! PhysioNet WFDB records: the header (`.hea`), the signal files (formats 16, 24, 32, 61,
//! 80, 160, 212, 310, 311) decoded straight into the float32 columns of a zerohop
//! `SoaTable`, and MIT-format annotation files (`.atr`).
//!
//! ```no_run
//! # use std::path::Path;
//! let record = zerohop_ecg::wfdb::read_record(Path::new("mitdb/100"), &[])?;
//! let mlii = record.table.column::<f32>("MLII")?; // millivolts, 360 Hz
//! let beats = zerohop_ecg::wfdb::read_annotations(Path::new("mitdb/100.atr"))?;
//! # Ok::<(), zerohop_ecg::EcgError>(())
//! ```

mod annotation;
mod format;
mod header;

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use zerohop::soa::{Schema, SoaTable};
use zerohop::DType;

pub use annotation::{
    is_beat, parse_annotations, read_annotation_file, read_annotations, symbol, Annotation,
    AnnotationFile,
};
pub use header::{
    parse_header, read_header, Header, Signal, DEFAULT_GAIN, DEFAULT_RATE, DEFAULT_UNITS,
};

use crate::error::{invalid, Result};
use format::Format;

/// A record's chosen signals in physical units.
#[derive(Debug)]
pub struct Record {
    pub header: Header,
    /// One float32 column per chosen signal, in physical units ((ADC − baseline) / gain);
    /// WFDB's invalid-sample value reads as NaN.
    pub table: SoaTable,
    /// The header index of each column's signal (`header.signals[signals[i]]` holds its
    /// gain, baseline and units).
    pub signals: Vec<usize>,
    /// The column names (the leads), in column order.
    pub names: Vec<String>,
    /// Per column: whether the header's 16-bit checksum matched, when the whole signal was
    /// read and the header gives one (`None` otherwise).
    pub checksums: Vec<Option<bool>>,
}

impl Record {
    /// The header's signal line of each column.
    pub fn leads(&self) -> impl Iterator<Item = &Signal> {
        self.signals.iter().map(|&i| &self.header.signals[i])
    }
}

/// Frames decoded per parallel task; a multiple of 6 so every task starts on a group
/// boundary of every packed format (2 samples for 212, 3 for 310/311).
const CHUNK_FRAMES: usize = 6 << 13;

/// The header file of a record path: `dir/100` (as PhysioNet tools take it) and
/// `dir/100.hea` both give `dir/100.hea`.
pub fn header_path(record: &Path) -> PathBuf {
    if record.extension().is_some_and(|e| e == "hea") {
        return record.to_owned();
    }
    let mut name = OsString::from(record.as_os_str());
    name.push(".hea");
    PathBuf::from(name)
}

/// Reads a record's signals (`leads`: names as [`Header::lead_names`] gives them, or
/// indices as decimal strings; empty: every signal). Signal files are looked up next to
/// the header.
pub fn read_record(record: &Path, leads: &[String]) -> Result<Record> {
    let header_file = header_path(record);
    let header = read_header(&header_file)?;
    let dir = header_file.parent().unwrap_or(Path::new("")).to_owned();
    decode_bounded(header, leads, &dir, |name, needed| {
        let relative = Path::new(name);
        // Signal files live beside the header; a header must not reach elsewhere.
        if relative.is_absolute()
            || name == "-"
            || relative
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(invalid(
                "WFDB header",
                format!(
                    "{}: signal file {name:?} is not a file name beside the header",
                    header_file.display()
                ),
            ));
        }
        let path = dir.join(relative);
        crate::file::read_prefix(&path, "WFDB signal file", needed).map(Cow::Owned)
    })
}

/// The signals of one signal file: consecutive signal lines naming the same file.
struct Group {
    signals: std::ops::Range<usize>,
    format: Format,
}

/// Decodes the chosen signals of a parsed header from its signal files' contents, which
/// `file(name)` gives for each file name of the header (`dir` only names files in errors).
/// This is [`read_record`] without the file system: for tests, fuzzing and data already in
/// memory.
///
/// The record has the header's number of samples when every chosen file holds them (longer
/// files are read that far); when the header gives none, or a file is shorter, the files'
/// whole frames are read (the shortest file decides), and a file that ends inside a frame
/// is an error.
pub fn decode_signals<'a>(
    header: Header,
    leads: &[String],
    dir: &Path,
    mut file: impl FnMut(&str) -> Result<Cow<'a, [u8]>>,
) -> Result<Record> {
    decode_bounded(header, leads, dir, |name, _| file(name))
}

/// [`decode_signals`] whose `file(name, needed)` is also told how many bytes of the file
/// the header's sample count makes it read at most (u64::MAX when the header gives none),
/// so that a reader need not load what follows.
fn decode_bounded<'a>(
    header: Header,
    leads: &[String],
    dir: &Path,
    mut file: impl FnMut(&str, u64) -> Result<Cow<'a, [u8]>>,
) -> Result<Record> {
    let record = header.record.clone();
    let fail = |reason: String| invalid("WFDB record", format!("{record}: {reason}"));
    if header.signals.is_empty() {
        return Err(fail("the record has no signals".into()));
    }
    let names = header.lead_names();
    let chosen = choose(&header, &names, leads)?;

    // Group the signal lines by file.
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of = vec![0usize; header.signals.len()];
    let mut start = 0;
    for i in 1..=header.signals.len() {
        if i < header.signals.len() && header.signals[i].file == header.signals[start].file {
            continue;
        }
        let name = &header.signals[start].file;
        if header.signals[..start].iter().any(|s| &s.file == name) {
            return Err(fail(format!(
                "signal file {name:?} is named by signal lines that are not adjacent"
            )));
        }
        let format = header.signals[start].format;
        group_of[start..i].fill(groups.len());
        groups.push(Group {
            signals: start..i,
            format: Format::of(format).unwrap_or(Format {
                code: format,
                group_samples: 1,
                group_bytes: 1,
                invalid: 0,
            }),
        });
        start = i;
    }

    // Check and load the chosen groups' files, and count their frames.
    let mut used: Vec<usize> = chosen.iter().map(|&s| group_of[s]).collect();
    used.sort_unstable();
    used.dedup();
    let mut data: Vec<(usize, Cow<'a, [u8]>, u64)> = Vec::new();
    for &g in &used {
        let group = &groups[g];
        let first = &header.signals[group.signals.start];
        let file_label = dir.join(&first.file);
        let file_label = file_label.display();
        for (i, s) in header.signals[group.signals.clone()].iter().enumerate() {
            let index = group.signals.start + i;
            if s.format == 0 {
                return Err(fail(format!(
                    "signal {index} ({}) is a null signal (format 0) with no samples",
                    names[index]
                )));
            }
            if Format::of(s.format).is_none() {
                return Err(fail(format!(
                    "signal {index} ({}) has format {}, which this reader does not decode \
                     (it reads {})",
                    names[index],
                    s.format,
                    format::SUPPORTED
                )));
            }
            if s.format != first.format {
                return Err(fail(format!(
                    "signals of {file_label} have formats {} and {}; one file has one format",
                    first.format, s.format
                )));
            }
            if s.samples_per_frame != 1 || s.skew != 0 {
                return Err(fail(format!(
                    "signal {index} ({}) has {} samples per frame and skew {}; this reader \
                     reads one sample per frame and no skew",
                    names[index], s.samples_per_frame, s.skew
                )));
            }
        }
        let width = group.signals.len() as u64;
        let bytes = file(&first.file, needed_bytes(&header, group, width))?;
        let offset = usize::try_from(first.byte_offset)
            .ok()
            .filter(|&o| o <= bytes.len())
            .ok_or_else(|| {
                fail(format!(
                    "{file_label} has {} bytes, fewer than its byte offset {}",
                    bytes.len(),
                    first.byte_offset
                ))
            })?;
        let len = (bytes.len() - offset) as u64;
        let whole = group.format.samples_in(len) / width;
        let frames = match header.samples {
            Some(n) if n <= whole => n,
            _ => {
                let used_bytes = group.format.bytes_for(whole * width);
                if used_bytes < len {
                    return Err(fail(format!(
                        "{file_label} ends inside frame {whole} (counting from 0): {} byte(s) \
                         after the last whole frame, which is {} sample(s) of format {}",
                        len - used_bytes,
                        width,
                        group.format.code
                    )));
                }
                whole
            }
        };
        data.push((g, bytes, frames));
    }
    let rows = data.iter().map(|d| d.2).min().unwrap_or(0);
    let rows = usize::try_from(rows).map_err(|_| fail(format!("{rows} samples is too many")))?;

    let mut schema = Schema::builder();
    for &s in &chosen {
        schema = schema.column(&names[s], DType::F32);
        let signal = &header.signals[s];
        let format = groups[group_of[s]].format;
        // The largest |ADC value|, over the gain, must fit in float32 (the gain is finite and
        // non-zero, so `reach` is never NaN).
        let reach = (f64::from(format.invalid).abs() + signal.baseline.unsigned_abs() as f64)
            / signal.gain.abs();
        if reach >= f64::from(f32::MAX) {
            return Err(fail(format!(
                "signal {s} ({}): gain {} with baseline {} puts samples beyond float32's range",
                names[s], signal.gain, signal.baseline
            )));
        }
    }
    // SAFETY: every row of every column is written below: each chosen signal belongs to one
    // loaded group, whose chunks together cover rows 0..rows, and `Format::decode` calls
    // its sink exactly `count` times (count = chunk rows × group width), the sink writing
    // one row of each chosen signal per frame. On an error the table is dropped unread.
    let mut table = unsafe { SoaTable::new_uninit(schema.build()?, rows)? };
    let mut slots: Vec<Option<&mut [f32]>> = (0..header.signals.len()).map(|_| None).collect();
    for (column, &s) in table.columns_mut::<f32>()?.into_iter().zip(&chosen) {
        slots[s] = Some(column);
    }

    let mut sums = vec![0i64; header.signals.len()];
    for (g, bytes, _) in &data {
        let group = &groups[*g];
        let offset = header.signals[group.signals.start].byte_offset as usize;
        let bytes = &bytes[offset..];
        let signals = &header.signals[group.signals.clone()];
        let scale: Vec<(f64, f64)> = signals
            .iter()
            .map(|s| (s.baseline as f64, s.gain))
            .collect();
        // Split each chosen column of the group into the chunks' row ranges.
        let n_chunks = rows.div_ceil(CHUNK_FRAMES);
        let mut chunks: Vec<Vec<Option<&mut [f32]>>> = (0..n_chunks)
            .map(|_| (0..signals.len()).map(|_| None).collect())
            .collect();
        for (k, slot) in slots[group.signals.clone()].iter_mut().enumerate() {
            let Some(mut rest) = slot.take() else {
                continue;
            };
            for chunk in chunks.iter_mut() {
                let (head, tail) = rest.split_at_mut(CHUNK_FRAMES.min(rest.len()));
                chunk[k] = Some(head);
                rest = tail;
            }
        }
        let format = group.format;
        let width = signals.len();
        let partial: Vec<Vec<i64>> = chunks
            .into_par_iter()
            .enumerate()
            .map(|(c, mut columns)| {
                let first_row = c * CHUNK_FRAMES;
                let count = CHUNK_FRAMES.min(rows - first_row);
                let mut sum = vec![0i64; width];
                let (mut k, mut row) = (0usize, 0usize);
                format.decode(bytes, (first_row * width) as u64, count * width, |v| {
                    sum[k] = sum[k].wrapping_add(v.into());
                    if let Some(column) = &mut columns[k] {
                        column[row] = if v == format.invalid {
                            f32::NAN
                        } else {
                            ((f64::from(v) - scale[k].0) / scale[k].1) as f32
                        };
                    }
                    k += 1;
                    if k == width {
                        k = 0;
                        row += 1;
                    }
                });
                sum
            })
            .collect();
        for chunk in partial {
            for (k, v) in chunk.into_iter().enumerate() {
                let total = &mut sums[group.signals.start + k];
                *total = total.wrapping_add(v);
            }
        }
    }
    drop(slots);

    let whole_signals = header.samples == Some(rows as u64);
    let checksums = chosen
        .iter()
        .map(|&s| {
            let expected = header.signals[s].checksum?;
            // WFDB's checksum is the sum of the samples modulo 2^16 (written signed).
            whole_signals.then_some(sums[s] & 0xffff == expected & 0xffff)
        })
        .collect();
    Ok(Record {
        names: chosen.iter().map(|&s| names[s].clone()).collect(),
        signals: chosen,
        table,
        header,
        checksums,
    })
}

/// The bytes of a group's file that its byte offset and the header's samples span; u64::MAX
/// (the whole file) when the header gives no sample count or the sum does not fit.
fn needed_bytes(header: &Header, group: &Group, width: u64) -> u64 {
    let offset = header.signals[group.signals.start].byte_offset;
    let format = group.format;
    let bytes = |samples: u64| {
        let groups = samples / format.group_samples as u64;
        // The partial last group is at most one more group.
        groups
            .checked_add(1)?
            .checked_mul(format.group_bytes as u64)?
            .checked_add(offset)
    };
    header
        .samples
        .and_then(|n| n.checked_mul(width))
        .and_then(bytes)
        .unwrap_or(u64::MAX)
}

/// Header indices of the chosen leads, in the order asked.
fn choose(header: &Header, names: &[String], leads: &[String]) -> Result<Vec<usize>> {
    if leads.is_empty() {
        return Ok((0..names.len()).collect());
    }
    let mut chosen = Vec::with_capacity(leads.len());
    for lead in leads {
        let found = names
            .iter()
            .position(|n| n == lead)
            .or_else(|| header.signals.iter().position(|s| &s.description == lead))
            .or_else(|| lead.parse::<usize>().ok().filter(|&i| i < names.len()));
        let Some(index) = found else {
            return Err(invalid(
                "lead",
                format!(
                    "record {} has no lead {lead:?} (its leads: {}; or an index from 0 to {})",
                    header.record,
                    names.join(", "),
                    names.len() - 1
                ),
            ));
        };
        if chosen.contains(&index) {
            return Err(invalid(
                "lead",
                format!(
                    "{lead:?} chooses lead {} of record {} a second time",
                    names[index], header.record
                ),
            ));
        }
        chosen.push(index);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests;
