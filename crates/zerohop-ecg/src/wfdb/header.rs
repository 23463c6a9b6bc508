//! The header (`.hea`) of a single-segment WFDB record: one record line, one line per
//! signal, and `#` comment lines (PhysioNet's header(5) page describes the fields).

use std::path::Path;

use crate::error::{EcgError, ParseProblem, Result};

/// The sampling frequency WFDB assumes when the record line gives none.
pub const DEFAULT_RATE: f64 = 250.0;
/// ADC units per physical unit when a signal line gives no gain, or a gain of 0 (WFDB's
/// DEFGAIN).
pub const DEFAULT_GAIN: f64 = 200.0;
/// The physical unit when a signal line names none.
pub const DEFAULT_UNITS: &str = "mV";

/// A parsed header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The record name of the record line (`100`).
    pub record: String,
    /// Samples per second per signal (frames per second).
    pub rate: f64,
    /// The counter frequency (`fs/counter`), when given.
    pub counter_rate: Option<f64>,
    /// The base counter value (`(base)`), when given.
    pub base_counter: Option<f64>,
    /// Samples per signal; `None` when the field is missing or 0, which WFDB reads as
    /// "unspecified" (the signal files then say how long the record is).
    pub samples: Option<u64>,
    /// The base time (`HH:MM:SS`), as written.
    pub base_time: Option<String>,
    /// The base date (`DD/MM/YYYY`), as written.
    pub base_date: Option<String>,
    pub signals: Vec<Signal>,
    /// The text of the `#` lines, without the `#` and surrounding blanks.
    pub comments: Vec<String>,
}

/// One signal line.
#[derive(Clone, Debug, PartialEq)]
pub struct Signal {
    /// The signal file, relative to the header's directory.
    pub file: String,
    /// The storage format (16, 212, 80, …; 0 is a null signal with no file data).
    pub format: u16,
    /// `xN`: samples per frame (1 unless given; only 1 is readable here).
    pub samples_per_frame: u32,
    /// `:N`: skew in frames (0 unless given; only 0 is readable here).
    pub skew: u64,
    /// `+N`: bytes before the first sample in the signal file.
    pub byte_offset: u64,
    /// ADC units per physical unit (never 0: a 0 or missing gain is [`DEFAULT_GAIN`]).
    pub gain: f64,
    /// The ADC value of physical zero (the ADC zero unless given).
    pub baseline: i64,
    /// The physical unit ([`DEFAULT_UNITS`] unless given).
    pub units: String,
    /// Bits of ADC resolution (the format's width unless given).
    pub adc_resolution: u32,
    pub adc_zero: i64,
    /// The first sample's value (the ADC zero unless given).
    pub initial_value: i64,
    /// The 16-bit sum of all samples, when given.
    pub checksum: Option<i64>,
    pub block_size: u64,
    /// The description, usually the lead name (`MLII`); may contain spaces; may be empty.
    pub description: String,
}

impl Header {
    /// Column names for every signal: the description, or `signal<i>` when it is empty;
    /// a repeated name gets `_2`, `_3`, … (two `V1` signals become `V1` and `V1_2`).
    pub fn lead_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::with_capacity(self.signals.len());
        for (i, s) in self.signals.iter().enumerate() {
            let base = if s.description.is_empty() {
                format!("signal{i}")
            } else {
                s.description.clone()
            };
            let mut name = base.clone();
            let mut k = 2;
            while names.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            names.push(name);
        }
        names
    }
}

/// The bits per sample of a storage format (the ADC resolution a signal line may omit).
pub(crate) fn format_bits(format: u16) -> u32 {
    match format {
        80 | 8 | 508 => 8,
        310 | 311 => 10,
        212 => 12,
        24 | 524 => 24,
        32 => 32,
        _ => 16,
    }
}

/// The largest header file read: ample for thousands of signal lines and their comments,
/// and no more memory than that for a file that only claims to be a header.
pub(crate) const MAX_HEADER_BYTES: u64 = 16 << 20;

/// Reads and parses a header file. Non-UTF-8 bytes (Latin-1 comments in old records) are
/// replaced rather than refused: only ASCII fields matter to the reader.
pub fn read_header(path: &Path) -> Result<Header> {
    let bytes = crate::file::read_small(path, "WFDB header", MAX_HEADER_BYTES)?;
    parse_header(&String::from_utf8_lossy(&bytes), path)
}

/// Where a field sits, for errors.
struct Place<'a> {
    path: &'a Path,
    line: usize,
}

impl Place<'_> {
    fn error(&self, column: usize, name: &str, reason: impl Into<String>) -> EcgError {
        EcgError::Parse {
            path: self.path.to_owned(),
            line: self.line,
            column,
            name: name.into(),
            problem: ParseProblem::Malformed,
            reason: reason.into(),
        }
    }

    fn number<T: std::str::FromStr>(&self, (column, text): (usize, &str), name: &str) -> Result<T> {
        text.parse()
            .map_err(|_| self.error(column, name, format!("{text:?} is not a valid {name}")))
    }

    /// A finite float (Rust's parser also takes "inf" and "NaN", which no header means).
    fn float(&self, (column, text): (usize, &str), name: &str) -> Result<f64> {
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(self.error(column, name, format!("{text:?} is not a finite number"))),
        }
    }
}

/// The blank-separated fields of a line with their 1-based columns.
fn fields(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s + 1, &line[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s + 1, &line[s..]));
    }
    out
}

/// Parses header text (`path` names the header in errors). Multi-segment records are
/// refused: they are a list of other records, each read on its own.
pub fn parse_header(text: &str, path: &Path) -> Result<Header> {
    let mut header: Option<Header> = None;
    let mut expected = 0usize;
    let mut comments = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let place = Place {
            path,
            line: index + 1,
        };
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            comments.push(comment.trim().to_string());
            continue;
        }
        match &mut header {
            None => {
                let (h, nsig) = parse_record_line(raw, &place)?;
                expected = nsig;
                header = Some(h);
            }
            Some(h) if h.signals.len() < expected => {
                h.signals.push(parse_signal_line(raw, &place)?);
            }
            Some(_) => {
                return Err(place.error(
                    1,
                    "line",
                    format!(
                        "unexpected line after the {expected} signal line(s) the record line \
                         announces: {line:?}"
                    ),
                ))
            }
        }
    }
    let Some(mut header) = header else {
        return Err(EcgError::Parse {
            path: path.to_owned(),
            line: 1,
            column: 1,
            name: "record line".into(),
            problem: ParseProblem::Malformed,
            reason: "the header has no record line".into(),
        });
    };
    if header.signals.len() < expected {
        return Err(EcgError::Parse {
            path: path.to_owned(),
            line: text.lines().count().max(1),
            column: 1,
            name: "signal line".into(),
            problem: ParseProblem::Malformed,
            reason: format!(
                "the record line announces {expected} signal(s), the header has {}",
                header.signals.len()
            ),
        });
    }
    header.comments = comments;
    Ok(header)
}

/// `name[/nseg] nsig [fs[/counter][(base)] [nsamp [time [date]]]]`; returns the header and
/// the number of signal lines to expect.
fn parse_record_line(line: &str, place: &Place<'_>) -> Result<(Header, usize)> {
    let f = fields(line);
    let (column, name_field) = f[0];
    let record = match name_field.split_once('/') {
        Some((_, segments)) => {
            return Err(place.error(
                column,
                "record name",
                format!(
                    "{name_field:?} is a multi-segment record ({segments} segments), which \
                     this reader does not read; read each segment's record instead"
                ),
            ))
        }
        None => name_field.to_string(),
    };
    let Some(&nsig_field) = f.get(1) else {
        return Err(place.error(
            column + name_field.len(),
            "number of signals",
            "the record line has no number of signals",
        ));
    };
    let nsig: usize = place.number(nsig_field, "number of signals")?;
    let mut header = Header {
        record,
        rate: DEFAULT_RATE,
        counter_rate: None,
        base_counter: None,
        samples: None,
        base_time: None,
        base_date: None,
        signals: Vec::new(),
        comments: Vec::new(),
    };
    if let Some(&(column, spec)) = f.get(2) {
        // `360`, `360/720`, `360/720(0)` or `360(0)`.
        let (rates, base) = match spec.split_once('(') {
            Some((rates, rest)) => {
                let Some(base) = rest.strip_suffix(')') else {
                    return Err(place.error(
                        column,
                        "base counter",
                        format!("{spec:?} opens a '(' it does not close"),
                    ));
                };
                (rates, Some(base))
            }
            None => (spec, None),
        };
        let (rate, counter) = match rates.split_once('/') {
            Some((rate, counter)) => (rate, Some(counter)),
            None => (rates, None),
        };
        header.rate = place.float((column, rate), "sampling frequency")?;
        if header.rate <= 0.0 {
            return Err(place.error(
                column,
                "sampling frequency",
                format!("{rate:?} is not positive"),
            ));
        }
        if let Some(counter) = counter {
            header.counter_rate = Some(place.float((column, counter), "counter frequency")?);
        }
        if let Some(base) = base {
            header.base_counter = Some(place.float((column, base), "base counter")?);
        }
    }
    if let Some(&samples) = f.get(3) {
        let n: u64 = place.number(samples, "number of samples")?;
        header.samples = (n > 0).then_some(n);
    }
    if let Some(&(column, time)) = f.get(4) {
        if !time
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'.')
        {
            return Err(place.error(
                column,
                "base time",
                format!("{time:?} is not a time (HH:MM:SS)"),
            ));
        }
        header.base_time = Some(time.to_string());
    }
    if let Some(&(column, date)) = f.get(5) {
        if !date.bytes().all(|b| b.is_ascii_digit() || b == b'/') {
            return Err(place.error(
                column,
                "base date",
                format!("{date:?} is not a date (DD/MM/YYYY)"),
            ));
        }
        header.base_date = Some(date.to_string());
    }
    if let Some(&(column, extra)) = f.get(6) {
        return Err(place.error(
            column,
            "record line",
            format!("unexpected field {extra:?} after the base date"),
        ));
    }
    Ok((header, nsig))
}

/// `file format[xN][:N][+N] [gain[(baseline)][/units] [res [zero [init [checksum
/// [block [description…]]]]]]]`.
fn parse_signal_line(line: &str, place: &Place<'_>) -> Result<Signal> {
    let f = fields(line);
    let file = f[0].1.to_string();
    let Some(&(column, format_field)) = f.get(1) else {
        return Err(place.error(
            f[0].0 + file.len(),
            "format",
            format!("the signal line for {file:?} has no format"),
        ));
    };
    let digits = format_field
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(format_field.len());
    let format: u16 = place.number((column, &format_field[..digits]), "format")?;
    let (mut spf, mut skew, mut offset) = (None, None, None);
    let mut rest = &format_field[digits..];
    while let Some(tag) = rest.chars().next() {
        let body = &rest[tag.len_utf8()..];
        let end = body
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(body.len());
        let (name, slot) = match tag {
            'x' => ("samples per frame", &mut spf),
            ':' => ("skew", &mut skew),
            '+' => ("byte offset", &mut offset),
            _ => {
                return Err(place.error(
                    column,
                    "format",
                    format!("{format_field:?}: unexpected {tag:?} (expected xN, :N or +N)"),
                ))
            }
        };
        if slot.is_some() {
            return Err(place.error(
                column,
                name,
                format!("{format_field:?} gives the {name} twice"),
            ));
        }
        *slot = Some(place.number::<u64>((column, &body[..end]), name)?);
        rest = &body[end..];
    }
    let samples_per_frame = match spf {
        None => 1,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| place.error(column, "samples per frame", format!("{n} is invalid")))?,
    };

    let mut signal = Signal {
        file,
        format,
        samples_per_frame,
        skew: skew.unwrap_or(0),
        byte_offset: offset.unwrap_or(0),
        gain: DEFAULT_GAIN,
        baseline: 0,
        units: DEFAULT_UNITS.to_string(),
        adc_resolution: format_bits(format),
        adc_zero: 0,
        initial_value: 0,
        checksum: None,
        block_size: 0,
        description: String::new(),
    };
    let mut baseline = None;
    if let Some(&(column, spec)) = f.get(2) {
        let (left, units) = match spec.split_once('/') {
            Some((left, units)) => (left, Some(units)),
            None => (spec, None),
        };
        let (gain, base) = match left.split_once('(') {
            Some((gain, rest)) => {
                let Some(base) = rest.strip_suffix(')') else {
                    return Err(place.error(
                        column,
                        "baseline",
                        format!("{spec:?} opens a '(' it does not close"),
                    ));
                };
                (gain, Some(base))
            }
            None => (left, None),
        };
        let g = place.float((column, gain), "gain")?;
        // A gain of 0 means "uncalibrated": WFDB then uses its default gain.
        signal.gain = if g == 0.0 { DEFAULT_GAIN } else { g };
        if let Some(base) = base {
            baseline = Some(place.number::<i64>((column, base), "baseline")?);
        }
        if let Some(units) = units.filter(|u| !u.is_empty()) {
            signal.units = units.to_string();
        }
    }
    if let Some(&field) = f.get(3) {
        let bits: u32 = place.number(field, "ADC resolution")?;
        if bits > 0 {
            signal.adc_resolution = bits;
        }
    }
    if let Some(&field) = f.get(4) {
        signal.adc_zero = place.number(field, "ADC zero")?;
    }
    signal.initial_value = match f.get(5) {
        Some(&field) => place.number(field, "initial value")?,
        None => signal.adc_zero,
    };
    if let Some(&field) = f.get(6) {
        signal.checksum = Some(place.number(field, "checksum")?);
    }
    if let Some(&field) = f.get(7) {
        signal.block_size = place.number(field, "block size")?;
    }
    if let Some(&(column, _)) = f.get(8) {
        // The description is the rest of the line, spaces included.
        signal.description = line[column - 1..].trim_end().to_string();
    }
    signal.baseline = baseline.unwrap_or(signal.adc_zero);
    Ok(signal)
}
