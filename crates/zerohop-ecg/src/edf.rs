//! EDF, EDF+ and BDF(+) recordings — what Holter recorders and sleep labs export — decoded
//! into the float32 columns of a zerohop `SoaTable`, in physical units, with the EDF+
//! annotations and, for EDF+D, the gaps between data records.
//!
//! ```no_run
//! # use std::path::Path;
//! let r = zerohop_ecg::edf::read_edf(Path::new("holter.edf"), &["ECG II".into()])?;
//! let lead = r.table.column::<f32>("ECG II")?; // physical units, r.rate Hz
//! # Ok::<(), zerohop_ecg::EcgError>(())
//! ```

mod annotations;
mod header;

use std::fs::File;
use std::path::Path;

use rayon::prelude::*;
use zerohop::soa::{Schema, SoaTable};
use zerohop::DType;

pub use annotations::{beat_symbol, parse_record, Annotation};
pub use header::{parse_header, Continuity, Format, Header, SignalHeader};

use crate::error::{invalid, EcgError, Result};

/// Bytes read per parallel task (whole data records, at least one).
const CHUNK_BYTES: usize = 4 << 20;

/// How many times longer than its data an EDF+D file's gaps may be: each gap becomes NaN
/// samples in memory, so a file of two short records days apart is refused, not laid out.
pub const MAX_GAP_RATIO: usize = 100;

/// A span of an EDF+D recording with no data record: its samples read as NaN.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    /// The first missing sample, in the table's timeline.
    pub sample: usize,
    pub samples: usize,
    /// Seconds after the file's start time where the gap begins.
    pub onset: f64,
}

/// A recording's chosen signals.
#[derive(Debug)]
pub struct Recording {
    pub header: Header,
    /// One float32 column per chosen signal, in physical units; gaps (EDF+D) are NaN.
    pub table: SoaTable,
    /// The header index of each column's signal.
    pub signals: Vec<usize>,
    /// The column names (the signals' labels), in column order.
    pub names: Vec<String>,
    /// Samples per second of every column.
    pub rate: f64,
    /// Every annotation of the file (EDF+/BDF+), record-keeping ones left out.
    pub annotations: Vec<Annotation>,
    /// Where an EDF+D recording has no data.
    pub gaps: Vec<Gap>,
    /// Seconds after the header's start time at which the first sample lies (EDF+ may start
    /// a recording a fraction of a second after the header's whole second).
    pub first_onset: f64,
    /// Data records read.
    pub records: u64,
    /// The header's count of data records when the file holds fewer whole ones (a copy cut
    /// short): the records present are read.
    pub truncated: Option<u64>,
    /// Per column: samples at the signal's digital minimum or maximum (a clipped signal
    /// rests there).
    pub at_limits: Vec<u64>,
}

impl Recording {
    /// The sample of the table's timeline an annotation's onset falls on (None: outside it).
    pub fn sample_of(&self, onset: f64) -> Option<usize> {
        let sample = ((onset - self.first_onset) * self.rate).round();
        (sample >= 0.0 && sample < self.table.len() as f64).then_some(sample as usize)
    }
}

/// Reads the header of an EDF/BDF file: what to show before choosing a lead.
pub fn read_header(path: &Path) -> Result<Header> {
    Ok(open_edf(path)?.header)
}

/// An EDF/BDF file opened once: its descriptor and length, and its header read from it.
pub(crate) struct OpenEdf {
    pub(crate) file: File,
    pub(crate) len: u64,
    pub(crate) header: Header,
}

/// Opens `path` as a regular file and reads its header: the fixed part says how long the
/// whole header is (bounded by the format's own maximum of 9999 signals), so at most two
/// reads of the file's start.
pub(crate) fn open_edf(path: &Path) -> Result<OpenEdf> {
    let (file, len) = crate::file::open_regular(path, "EDF file")?;
    let source = Source::File { file: &file, path };
    let start = |bytes: usize| -> Result<Vec<u8>> {
        let mut out = vec![0u8; (bytes as u64).min(len) as usize];
        source.read_at(0, &mut out)?;
        Ok(out)
    };
    let head = start(header::FIXED_BYTES)?;
    let count = std::str::from_utf8(head.get(252..256).unwrap_or_default())
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n <= header::MAX_SIGNALS)
        .unwrap_or(0);
    let bytes = start(header::FIXED_BYTES + count * header::SIGNAL_BYTES)?;
    let header = parse_header(&bytes, &path.display().to_string())?;
    Ok(OpenEdf { file, len, header })
}

/// Reads the chosen signals of an EDF/BDF file (`leads`: labels or indices as decimal
/// strings; empty: every signal that is not annotations, which must then share one rate).
pub fn read_edf(path: &Path, leads: &[String]) -> Result<Recording> {
    read_opened(open_edf(path)?, path, leads)
}

/// [`read_edf`] of a file [`open_edf`] opened.
pub(crate) fn read_opened(opened: OpenEdf, path: &Path, leads: &[String]) -> Result<Recording> {
    let source = Source::File {
        file: &opened.file,
        path,
    };
    decode(opened.header, leads, opened.len, &source)
}

/// [`read_edf`] over a file's bytes already in memory (tests, fuzzing).
pub fn decode_bytes(bytes: &[u8], leads: &[String]) -> Result<Recording> {
    let header = parse_header(bytes, "EDF bytes")?;
    decode(header, leads, bytes.len() as u64, &Source::Bytes(bytes))
}

/// Where the data records come from.
enum Source<'a> {
    File { file: &'a File, path: &'a Path },
    Bytes(&'a [u8]),
}

impl Source<'_> {
    fn read_at(&self, offset: u64, into: &mut [u8]) -> Result<()> {
        match self {
            Source::Bytes(bytes) => {
                let at = offset as usize;
                into.copy_from_slice(&bytes[at..at + into.len()]);
                Ok(())
            }
            Source::File { file, path } => {
                read_exact_at(file, into, offset).map_err(|source| EcgError::Io {
                    path: path.to_path_buf(),
                    source: if source.kind() == std::io::ErrorKind::UnexpectedEof {
                        std::io::Error::new(
                            source.kind(),
                            "the file became shorter while it was read",
                        )
                    } else {
                        source
                    },
                })
            }
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, into: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, into, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut into: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !into.is_empty() {
        let n = file.seek_read(into, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        into = &mut into[n..];
        offset += n as u64;
    }
    Ok(())
}

/// The chosen signals' header indices.
pub fn choose(header: &Header, leads: &[String]) -> Result<Vec<usize>> {
    let data: Vec<usize> = (0..header.signals.len())
        .filter(|&i| !header.is_annotations(i))
        .collect();
    let fail = |reason: String| invalid("EDF lead", reason);
    let chosen: Vec<usize> = if leads.is_empty() {
        data.clone()
    } else {
        let mut chosen = Vec::with_capacity(leads.len());
        for lead in leads {
            let wanted = lead.trim();
            let found = data
                .iter()
                .copied()
                .find(|&i| header.signals[i].label == wanted)
                .or_else(|| {
                    data.iter()
                        .copied()
                        .find(|&i| header.signals[i].label.eq_ignore_ascii_case(wanted))
                })
                .or_else(|| wanted.parse::<usize>().ok().filter(|i| data.contains(i)));
            let Some(index) = found else {
                return Err(fail(format!(
                    "no signal {lead:?} (signals: {}; or an index from 0)",
                    header.labels()
                )));
            };
            if chosen.contains(&index) {
                return Err(fail(format!(
                    "{lead:?} chooses signal {:?} a second time",
                    header.signals[index].label
                )));
            }
            chosen.push(index);
        }
        chosen
    };
    if chosen.is_empty() {
        return Err(fail("the file has only annotations, no signal".into()));
    }
    let per_record = header.signals[chosen[0]].samples_per_record;
    if chosen
        .iter()
        .any(|&i| header.signals[i].samples_per_record != per_record)
    {
        let rates: Vec<String> = chosen
            .iter()
            .map(|&i| format!("{:?} {} Hz", header.signals[i].label, header.rate(i)))
            .collect();
        return Err(fail(format!(
            "the signals have different rates ({}): choose signals of one rate",
            rates.join(", ")
        )));
    }
    if per_record == 0 {
        return Err(fail(format!(
            "signal {:?} has no samples",
            header.signals[chosen[0]].label
        )));
    }
    Ok(chosen)
}

/// How many whole data records to read, and the header's count when the file holds fewer.
fn records_present(header: &Header, len: u64) -> Result<(u64, Option<u64>)> {
    let record_bytes = header.record_bytes() as u64;
    let whole = len.saturating_sub(header.header_bytes as u64) / record_bytes;
    let (records, truncated) = match header.records {
        Some(declared) if whole < declared => (whole, Some(declared)),
        Some(declared) => (declared, None),
        None => (whole, None),
    };
    if records == 0 {
        return Err(invalid(
            "EDF file",
            format!(
                "no data record: the header declares {}, the file holds {len} bytes after a \
                 {}-byte header and {record_bytes}-byte records",
                header
                    .records
                    .map_or("-1 (unknown)".into(), |n| n.to_string()),
                header.header_bytes
            ),
        ));
    }
    Ok((records, truncated))
}

/// What the parallel tasks return: per record, its start (EDF+) and annotations.
pub(crate) struct ChunkResult {
    pub(crate) starts: Vec<Option<f64>>,
    pub(crate) annotations: Vec<Annotation>,
    pub(crate) at_limits: Vec<u64>,
}

/// What reading the chosen signals takes, decided from the header and the file's length
/// (the CPU and CUDA readers share it).
pub(crate) struct Plan {
    pub(crate) header: Header,
    pub(crate) chosen: Vec<usize>,
    pub(crate) names: Vec<String>,
    pub(crate) records: u64,
    pub(crate) truncated: Option<u64>,
    pub(crate) per_record: usize,
    pub(crate) rows: usize,
    pub(crate) annotation_signals: Vec<usize>,
}

impl Plan {
    pub(crate) fn new(header: Header, leads: &[String], len: u64, name: &str) -> Result<Plan> {
        let chosen = choose(&header, leads)?;
        let (records, truncated) = records_present(&header, len)?;
        let per_record = header.signals[chosen[0]].samples_per_record;
        let rows = records
            .checked_mul(per_record as u64)
            .ok_or_else(|| invalid("EDF file", "too many samples"))?;
        crate::synth::check_memory(rows, name)?;
        let annotation_signals = (0..header.signals.len())
            .filter(|&i| header.is_annotations(i))
            .collect();
        Ok(Plan {
            names: column_names(&header, &chosen),
            chosen,
            records,
            truncated,
            per_record,
            rows: rows as usize,
            annotation_signals,
            header,
        })
    }

    pub(crate) fn schema(&self) -> Result<Schema> {
        let mut schema = Schema::builder();
        for name in &self.names {
            schema = schema.column(name, DType::F32);
        }
        Ok(schema.build()?)
    }

    /// (gain, offset, digital min, digital max) of each chosen signal.
    pub(crate) fn scales(&self) -> Vec<(f64, f64, i32, i32)> {
        self.chosen
            .iter()
            .map(|&i| {
                let s = &self.header.signals[i];
                let (gain, offset) = s.scale();
                (gain, offset, s.digital_min, s.digital_max)
            })
            .collect()
    }

    /// Parses the annotation signals of one record (`record`: its bytes) into `into`.
    pub(crate) fn annotations_of(
        &self,
        record: &[u8],
        index: u64,
        into: &mut ChunkResult,
        slot: usize,
    ) -> Result<()> {
        for (n, &a) in self.annotation_signals.iter().enumerate() {
            let signal = &self.header.signals[a];
            let text =
                &record[signal.offset..][..signal.samples_per_record * self.header.format.width()];
            let start = parse_record(text, index, &mut into.annotations)?;
            if n == 0 {
                into.starts[slot] = start;
            }
        }
        Ok(())
    }

    /// The recording from its decoded table and the chunks' findings, in record order;
    /// EDF+D records are laid out on their timeline.
    pub(crate) fn finish(self, table: SoaTable, chunks: Vec<ChunkResult>) -> Result<Recording> {
        let mut starts = Vec::with_capacity(self.records as usize);
        let mut annotations = Vec::new();
        let mut at_limits = vec![0u64; self.chosen.len()];
        for chunk in chunks {
            starts.extend(chunk.starts);
            annotations.extend(chunk.annotations);
            for (total, n) in at_limits.iter_mut().zip(chunk.at_limits) {
                *total += n;
            }
        }
        let mut recording = Recording {
            rate: self.header.rate(self.chosen[0]),
            signals: self.chosen,
            names: self.names,
            annotations,
            gaps: Vec::new(),
            first_onset: starts.first().copied().flatten().unwrap_or(0.0),
            records: self.records,
            truncated: self.truncated,
            at_limits,
            table,
            header: self.header,
        };
        if recording.header.continuity == Continuity::Discontinuous {
            place_records(&mut recording, &starts, self.per_record)?;
        }
        Ok(recording)
    }
}

fn decode(header: Header, leads: &[String], len: u64, source: &Source<'_>) -> Result<Recording> {
    let plan = Plan::new(header, leads, len, &source_name(source))?;
    let header = &plan.header;
    let per_record = plan.per_record;
    // SAFETY: every row of every column is written below: the chunks cover records
    // 0..records, each writing its records' `per_record` samples of every chosen signal. On an
    // error the table is dropped unread.
    let mut table = unsafe { SoaTable::new_uninit(plan.schema()?, plan.rows)? };
    advise_huge_pages(table.buffer());
    let record_bytes = header.record_bytes();
    let per_chunk = (CHUNK_BYTES / record_bytes).max(1);
    let chunk_rows = per_chunk * per_record;
    // Per chunk, its part of every column.
    let mut parts: Vec<Vec<&mut [f32]>> = Vec::new();
    let mut rests: Vec<&mut [f32]> = table.columns_mut::<f32>()?;
    while !rests[0].is_empty() {
        let mut part = Vec::with_capacity(rests.len());
        for rest in rests.iter_mut() {
            let take = chunk_rows.min(rest.len());
            let (head, tail) = std::mem::take(rest).split_at_mut(take);
            part.push(head);
            *rest = tail;
        }
        parts.push(part);
    }
    let scales = plan.scales();
    let records = plan.records;
    let results: Vec<Result<ChunkResult>> = parts
        .into_par_iter()
        .enumerate()
        .map(|(c, mut part)| {
            let first = (c * per_chunk) as u64;
            let count = (per_chunk as u64).min(records - first) as usize;
            READ_BUFFER.with_borrow_mut(|buffer| {
                // A buffer kept per thread: a fresh one costs a page fault per 4 KiB, as
                // much as the read itself.
                if buffer.len() < count * record_bytes {
                    buffer.resize(count * record_bytes, 0);
                }
                let bytes = &mut buffer[..count * record_bytes];
                let decoded = decode_chunk(&plan, bytes, source, first, &mut part, &scales);
                if buffer.len() > 2 * CHUNK_BYTES {
                    *buffer = Vec::new(); // one huge record's buffer is not kept
                }
                decoded
            })
        })
        .collect();
    let chunks = results.into_iter().collect::<Result<Vec<_>>>()?;
    plan.finish(table, chunks)
}

/// Asks the kernel for huge pages under a fresh host table: filled by many threads at once,
/// its first touches were a page fault per 4 KiB, which contend for the process's memory map
/// and cost as much as reading the file. Advice only: memory that cannot take it is left as
/// it is.
fn advise_huge_pages(buffer: &zerohop::Buffer) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = buffer.as_ptr() as usize;
        let first = start.next_multiple_of(PAGE);
        let end = (start + buffer.len()) / PAGE * PAGE;
        if end > first && end - first >= 2 << 20 {
            // SAFETY: madvise only advises: the range lies inside this buffer's own memory,
            // whose contents (not yet written) it does not change; a refusal is ignored.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buffer;
}

thread_local! {
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads the records from `first` on into `bytes` (whole records) and decodes them into
/// `part` (this chunk's rows of every column).
fn decode_chunk(
    plan: &Plan,
    bytes: &mut [u8],
    source: &Source<'_>,
    first: u64,
    part: &mut [&mut [f32]],
    scales: &[(f64, f64, i32, i32)],
) -> Result<ChunkResult> {
    let header = &plan.header;
    let record_bytes = header.record_bytes();
    let per_record = plan.per_record;
    let count = bytes.len() / record_bytes;
    source.read_at(
        header.header_bytes as u64 + first * record_bytes as u64,
        bytes,
    )?;
    let mut result = ChunkResult {
        starts: vec![None; count],
        annotations: Vec::new(),
        at_limits: vec![0; plan.chosen.len()],
    };
    for (r, record) in bytes.chunks_exact(record_bytes).enumerate() {
        for (k, &s) in plan.chosen.iter().enumerate() {
            let signal = &header.signals[s];
            let from = &record[signal.offset..][..per_record * header.format.width()];
            let to = &mut part[k][r * per_record..][..per_record];
            result.at_limits[k] += scale_into(header.format, from, to, scales[k]);
        }
        plan.annotations_of(record, first + r as u64, &mut result, r)?;
    }
    Ok(result)
}

/// Decodes one record's samples of a signal into physical units; returns how many sat at
/// the digital minimum or maximum.
fn scale_into(format: Format, from: &[u8], to: &mut [f32], scale: (f64, f64, i32, i32)) -> u64 {
    let lanes = crate::simd::Lanes::widest();
    u64::from(match format {
        Format::Edf => scale_16(lanes, from, to, scale),
        Format::Bdf => scale_24(lanes, from, to, scale),
    })
}

/// digital × gain + offset in double precision, rounded once to float (the CUDA kernel's
/// operations, so both give the same bits); counts the samples at the digital limits.
#[inline(always)]
fn scale_one(digital: i32, scale: (f64, f64, i32, i32), out: &mut f32) -> u32 {
    let (gain, offset, low, high) = scale;
    *out = (f64::from(digital) * gain + offset) as f32;
    u32::from(digital <= low) + u32::from(digital >= high)
}

#[inline(always)]
fn scale_16_kernel(from: &[u8], to: &mut [f32], scale: (f64, f64, i32, i32)) -> u32 {
    let mut at_limits = 0;
    for (b, out) in from.chunks_exact(2).zip(to.iter_mut()) {
        at_limits += scale_one(i16::from_le_bytes([b[0], b[1]]).into(), scale, out);
    }
    at_limits
}

#[inline(always)]
fn scale_24_kernel(from: &[u8], to: &mut [f32], scale: (f64, f64, i32, i32)) -> u32 {
    let mut at_limits = 0;
    for (b, out) in from.chunks_exact(3).zip(to.iter_mut()) {
        // Sign-extend the 24-bit value from the top of an i32.
        at_limits += scale_one(i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8, scale, out);
    }
    at_limits
}

crate::simd::by_width!(
    /// EDF's 16-bit samples scaled, at the widest vectors this CPU runs.
    fn scale_16(from: &[u8], to: &mut [f32], scale: (f64, f64, i32, i32)) -> u32 = scale_16_kernel
);
crate::simd::by_width!(
    /// BDF's 24-bit samples scaled, at the widest vectors this CPU runs.
    fn scale_24(from: &[u8], to: &mut [f32], scale: (f64, f64, i32, i32)) -> u32 = scale_24_kernel
);

/// Lays an EDF+D recording's records out on one timeline: each at its own start (its
/// first annotation list), gaps between them NaN.
fn place_records(
    recording: &mut Recording,
    starts: &[Option<f64>],
    per_record: usize,
) -> Result<()> {
    let duration = recording.header.record_duration;
    let rate = recording.rate;
    let fail = |reason: String| invalid("EDF+D file", reason);
    let mut offsets = Vec::with_capacity(starts.len());
    let mut gaps = Vec::new();
    let mut next_sample = 0usize;
    let mut previous_end: Option<f64> = None;
    for (r, start) in starts.iter().enumerate() {
        let Some(start) = *start else {
            return Err(fail(format!(
                "data record {r} does not say when it starts (its first annotation list keeps \
                 no time)"
            )));
        };
        if let Some(end) = previous_end {
            let gap = start - end;
            // Half a sample either way is the writer's rounding, not a gap.
            if gap < -0.5 / rate {
                return Err(fail(format!(
                    "data record {r} starts at {start} s, before the previous one ends \
                     ({end} s): records overlap or are out of order"
                )));
            }
            let missing = (gap * rate).round();
            if missing >= 1.0 {
                let samples = missing as usize;
                gaps.push(Gap {
                    sample: next_sample,
                    samples,
                    onset: end,
                });
                next_sample = next_sample
                    .checked_add(samples)
                    .ok_or_else(|| fail("gaps too long to lay out".into()))?;
            }
        }
        offsets.push(next_sample);
        next_sample += per_record;
        previous_end = Some(start + duration);
    }
    if gaps.is_empty() {
        return Ok(());
    }
    let data = starts.len() * per_record;
    let missing = next_sample - data;
    if missing / MAX_GAP_RATIO > data {
        return Err(fail(format!(
            "its gaps last {:.0} s against {:.0} s of data, more than {MAX_GAP_RATIO} times \
             as long: split the file at its gaps and read the parts",
            missing as f64 / rate,
            data as f64 / rate
        )));
    }
    crate::synth::check_memory(next_sample as u64, "the EDF+D recording with its gaps")?;
    let schema = recording.table.schema().clone();
    // SAFETY: every row is written below: each record's samples at its offset, and NaN in
    // every gap; records and gaps tile 0..next_sample.
    let mut spread = unsafe { SoaTable::new_uninit(schema, next_sample)? };
    let from = recording
        .names
        .iter()
        .map(|n| recording.table.column::<f32>(n))
        .collect::<zerohop::Result<Vec<_>>>()?;
    for (column, source) in spread.columns_mut::<f32>()?.into_iter().zip(from) {
        for (r, &at) in offsets.iter().enumerate() {
            column[at..at + per_record]
                .copy_from_slice(&source[r * per_record..(r + 1) * per_record]);
        }
        for gap in &gaps {
            column[gap.sample..gap.sample + gap.samples].fill(f32::NAN);
        }
    }
    recording.table = spread;
    recording.gaps = gaps;
    Ok(())
}

/// Column names: the labels, made unique (two signals may share a label, or have none).
fn column_names(header: &Header, chosen: &[usize]) -> Vec<String> {
    chosen
        .iter()
        .map(|&i| {
            let label = &header.signals[i].label;
            let shared = chosen
                .iter()
                .filter(|&&j| &header.signals[j].label == label)
                .count();
            if label.is_empty() || shared > 1 {
                format!("{label} [signal {i}]").trim_start().to_string()
            } else {
                label.clone()
            }
        })
        .collect()
}

fn source_name(source: &Source<'_>) -> String {
    match source {
        Source::File { path, .. } => path.display().to_string(),
        Source::Bytes(_) => "the EDF bytes".into(),
    }
}

#[cfg(test)]
mod tests;
