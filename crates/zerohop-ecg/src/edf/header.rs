//! The header of an EDF, EDF+ or BDF(+) file: 256 bytes about the recording, then 256 bytes
//! per signal stored field by field (every label, then every transducer, …). Every field is
//! checked here, so the decoder can trust the arithmetic it does with them.

use crate::error::{invalid, Result};

/// Bytes of the fixed part, and of each signal's fields.
pub const FIXED_BYTES: usize = 256;
pub const SIGNAL_BYTES: usize = 256;
/// The most signals a header may declare: its field has four digits.
pub const MAX_SIGNALS: usize = 9999;

/// Which of the formats the file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// European Data Format: 16-bit samples.
    Edf,
    /// BioSemi's variant: 24-bit samples.
    Bdf,
}

impl Format {
    /// Bytes per sample.
    pub fn width(self) -> usize {
        match self {
            Format::Edf => 2,
            Format::Bdf => 3,
        }
    }

    /// The range a digital value can take.
    pub fn digital_limits(self) -> (i32, i32) {
        match self {
            Format::Edf => (i16::MIN.into(), i16::MAX.into()),
            Format::Bdf => (-(1 << 23), (1 << 23) - 1),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Edf => "EDF",
            Format::Bdf => "BDF",
        }
    }

    /// The label of the signal that holds EDF+/BDF+ annotations.
    pub fn annotation_label(self) -> &'static str {
        match self {
            Format::Edf => "EDF Annotations",
            Format::Bdf => "BDF Annotations",
        }
    }
}

/// Whether an EDF+/BDF+ file's data records follow each other without gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// Plain EDF/BDF (no annotation signal required), contiguous by definition.
    Plain,
    /// EDF+C / BDF+C: contiguous.
    Continuous,
    /// EDF+D / BDF+D: each record's own start time comes from its first annotation list.
    Discontinuous,
}

/// The parsed header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub format: Format,
    pub continuity: Continuity,
    /// The local patient and recording identification fields, trimmed.
    pub patient: String,
    pub recording: String,
    /// The start date (year, month, day): the header's dd.mm.yy, with the four-digit year
    /// of an EDF+ recording field (`Startdate 02-MAR-2002`) where it gives one.
    pub start_date: Option<(i32, u32, u32)>,
    /// The start time, in seconds after midnight (hh.mm.ss).
    pub start_time: Option<u32>,
    /// Bytes before the first data record: 256 × (signals + 1).
    pub header_bytes: usize,
    /// Data records the header declares; `None` for -1 (a recording still being written:
    /// the file's length tells).
    pub records: Option<u64>,
    /// Seconds each data record spans.
    pub record_duration: f64,
    pub signals: Vec<SignalHeader>,
}

/// One signal's fields.
#[derive(Clone, Debug, PartialEq)]
pub struct SignalHeader {
    pub label: String,
    pub transducer: String,
    /// The physical dimension ("uV", "mV").
    pub units: String,
    pub physical_min: f64,
    pub physical_max: f64,
    pub digital_min: i32,
    pub digital_max: i32,
    pub prefiltering: String,
    pub samples_per_record: usize,
    /// Where the signal's samples start inside a data record, in bytes.
    pub offset: usize,
}

impl SignalHeader {
    /// Physical units per digital step, and the physical value of digital 0:
    /// physical = digital × gain + offset.
    pub fn scale(&self) -> (f64, f64) {
        let gain = (self.physical_max - self.physical_min)
            / (f64::from(self.digital_max) - f64::from(self.digital_min));
        (gain, self.physical_min - f64::from(self.digital_min) * gain)
    }
}

impl Header {
    /// Bytes of one data record.
    pub fn record_bytes(&self) -> usize {
        self.signals
            .iter()
            .map(|s| s.samples_per_record * self.format.width())
            .sum()
    }

    /// Whether signal `i` holds annotations (EDF+/BDF+), not samples.
    pub fn is_annotations(&self, i: usize) -> bool {
        self.continuity != Continuity::Plain
            && self.signals[i].label == self.format.annotation_label()
    }

    /// Samples per second of signal `i`.
    pub fn rate(&self, i: usize) -> f64 {
        self.signals[i].samples_per_record as f64 / self.record_duration
    }

    /// The labels of the signals, as a list for messages.
    pub fn labels(&self) -> String {
        self.signals
            .iter()
            .map(|s| format!("{:?}", s.label))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The format's name as its reserved field says it ("EDF+D", "BDF").
    pub fn variant(&self) -> String {
        let suffix = match self.continuity {
            Continuity::Plain => "",
            Continuity::Continuous => "+C",
            Continuity::Discontinuous => "+D",
        };
        format!("{}{suffix}", self.format.name())
    }
}

/// Reads the fixed part and the signal fields from the start of a file (`bytes` may hold
/// more: the data that follows is not looked at). `name` names the file in errors.
pub fn parse_header(bytes: &[u8], name: &str) -> Result<Header> {
    let fail = |reason: String| invalid("EDF header", format!("{name}: {reason}"));
    if bytes.len() < FIXED_BYTES {
        return Err(fail(format!(
            "{} bytes, shorter than the 256-byte header every EDF and BDF file starts with",
            bytes.len()
        )));
    }
    let format = match &bytes[..8] {
        b"0       " => Format::Edf,
        [0xFF, rest @ ..] if rest == b"BIOSEMI" => Format::Bdf,
        other => {
            return Err(fail(format!(
                "starts with {:?}, not an EDF version (\"0\" and 7 blanks) or BDF's \
                 0xFF \"BIOSEMI\"",
                String::from_utf8_lossy(other)
            )))
        }
    };
    let field = |at: usize, len: usize| text(&bytes[at..at + len]);
    let reserved = field(192, 44);
    let continuity = match reserved.as_str() {
        r if r.starts_with("EDF+C") || r.starts_with("BDF+C") => Continuity::Continuous,
        r if r.starts_with("EDF+D") || r.starts_with("BDF+D") => Continuity::Discontinuous,
        _ => Continuity::Plain,
    };
    let recording = field(88, 80);
    let header_bytes: usize = number(&field(184, 8), "header bytes", &fail)?;
    let records: i64 = number(&field(236, 8), "number of data records", &fail)?;
    let records = match records {
        -1 => None,
        n if n >= 0 => Some(n as u64),
        n => return Err(fail(format!("number of data records {n}"))),
    };
    let record_duration: f64 = number(&field(244, 8), "data record duration", &fail)?;
    if !(record_duration.is_finite() && record_duration >= 0.0) {
        return Err(fail(format!(
            "data record duration {record_duration} s is not a duration"
        )));
    }
    let count: usize = number(&field(252, 4), "number of signals", &fail)?;
    if count == 0 || count > MAX_SIGNALS {
        return Err(fail(format!(
            "{count} signals; a recording has 1 to {MAX_SIGNALS}"
        )));
    }
    let expected = FIXED_BYTES + count * SIGNAL_BYTES;
    if header_bytes != expected {
        return Err(fail(format!(
            "the header says it is {header_bytes} bytes; with {count} signals it is {expected}"
        )));
    }
    if bytes.len() < expected {
        return Err(fail(format!(
            "the file ends after {} bytes, inside the {expected}-byte header of {count} signals",
            bytes.len()
        )));
    }
    let signals = parse_signals(&bytes[FIXED_BYTES..expected], count, format, &fail)?;
    let header = Header {
        format,
        continuity,
        patient: field(8, 80),
        start_date: start_date(&field(168, 8), &recording),
        start_time: start_time(&field(176, 8)),
        recording,
        header_bytes,
        records,
        record_duration,
        signals,
    };
    let data_signals = (0..count).filter(|&i| !header.is_annotations(i)).count();
    if record_duration == 0.0 && data_signals > 0 {
        return Err(fail(
            "data record duration 0 s in a file with signals: their rates are unknown".into(),
        ));
    }
    if header.continuity != Continuity::Plain && data_signals == count {
        return Err(fail(format!(
            "an {} file without a signal labelled {:?}",
            header.variant(),
            format.annotation_label()
        )));
    }
    Ok(header)
}

/// The per-signal fields: `count` values of each field in turn.
fn parse_signals(
    bytes: &[u8],
    count: usize,
    format: Format,
    fail: &impl Fn(String) -> crate::EcgError,
) -> Result<Vec<SignalHeader>> {
    // (width of the field) in the order the header stores them.
    const WIDTHS: [usize; 10] = [16, 80, 8, 8, 8, 8, 8, 80, 8, 32];
    let mut fields: Vec<Vec<String>> = Vec::with_capacity(WIDTHS.len());
    let mut at = 0;
    for width in WIDTHS {
        fields.push(
            (0..count)
                .map(|i| text(&bytes[at + i * width..at + (i + 1) * width]))
                .collect(),
        );
        at += count * width;
    }
    let (lowest, highest) = format.digital_limits();
    let mut offset = 0usize;
    let mut signals = Vec::with_capacity(count);
    for (i, label) in fields[0].iter().enumerate() {
        let what = |field: &str| format!("signal {i} ({label:?}): {field}");
        let physical_min: f64 = number(&fields[3][i], &what("physical minimum"), fail)?;
        let physical_max: f64 = number(&fields[4][i], &what("physical maximum"), fail)?;
        let digital_min: i32 = number(&fields[5][i], &what("digital minimum"), fail)?;
        let digital_max: i32 = number(&fields[6][i], &what("digital maximum"), fail)?;
        let samples_per_record: usize = number(&fields[8][i], &what("samples per record"), fail)?;
        if !(physical_min.is_finite() && physical_max.is_finite()) || physical_min == physical_max {
            return Err(fail(format!(
                "{}: physical minimum {physical_min} and maximum {physical_max} give no scale",
                what("range")
            )));
        }
        if digital_min >= digital_max || digital_min < lowest || digital_max > highest {
            return Err(fail(format!(
                "{}: digital minimum {digital_min} and maximum {digital_max} are not a range \
                 of {} samples ({lowest} to {highest})",
                what("range"),
                format.name()
            )));
        }
        // Every digital value the format can hold, scaled, must be a float32 (values outside
        // the digital range are out of spec, not out of memory's reach).
        let step =
            (physical_max - physical_min) / (f64::from(digital_max) - f64::from(digital_min));
        let zero = physical_min - f64::from(digital_min) * step;
        let reach = (f64::from(lowest) * step + zero)
            .abs()
            .max((f64::from(highest) * step + zero).abs());
        if reach.is_nan() || reach >= f64::from(f32::MAX) {
            return Err(fail(format!(
                "{}: physical minimum {physical_min} and maximum {physical_max} over digital \
                 {digital_min} to {digital_max} put samples beyond float32's range",
                what("range")
            )));
        }
        signals.push(SignalHeader {
            label: label.clone(),
            transducer: fields[1][i].clone(),
            units: fields[2][i].clone(),
            physical_min,
            physical_max,
            digital_min,
            digital_max,
            prefiltering: fields[7][i].clone(),
            samples_per_record,
            offset,
        });
        // A record of more than 1 GiB is no recorder's; the bound keeps every product of
        // offsets and counts below far from overflow.
        offset = samples_per_record
            .checked_mul(format.width())
            .and_then(|b| b.checked_add(offset))
            .filter(|&b| b <= 1 << 30)
            .ok_or_else(|| {
                fail(format!(
                    "{}: a data record of more than 1 GiB",
                    what("samples per record")
                ))
            })?;
    }
    if offset == 0 {
        return Err(fail("every signal has 0 samples per data record".into()));
    }
    Ok(signals)
}

/// A header field as text: ASCII as the format asks, any other byte read as Latin-1 (what
/// older systems write in patient names), blanks trimmed.
fn text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| char::from(b))
        .collect::<String>()
        .trim_matches(|c: char| c == ' ' || c == '\0')
        .to_string()
}

fn number<T: std::str::FromStr>(
    field: &str,
    what: &str,
    fail: &impl Fn(String) -> crate::EcgError,
) -> Result<T> {
    field
        .parse()
        .map_err(|_| fail(format!("{what} {field:?} is not a number")))
}

/// dd.mm.yy; EDF+ says the recording field's `Startdate dd-MMM-yyyy` gives the century.
fn start_date(field: &str, recording: &str) -> Option<(i32, u32, u32)> {
    let [day, month, yy] = three_numbers(field)?;
    if !(1..=31).contains(&day) || !(1..=12).contains(&month) || yy > 99 {
        return None;
    }
    // The EDF rule for two-digit years: 85–99 are 1985–1999, the rest 2000–2084.
    let mut year = if yy >= 85 { 1900 + yy } else { 2000 + yy } as i32;
    let plus_year = recording
        .strip_prefix("Startdate ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|date| date.rsplit('-').next())
        .and_then(|y| y.parse::<i32>().ok());
    if let Some(y) = plus_year.filter(|y| y.rem_euclid(100) as u32 == yy) {
        year = y;
    }
    Some((year, month, day))
}

/// hh.mm.ss in seconds after midnight.
fn start_time(field: &str) -> Option<u32> {
    let [h, m, s] = three_numbers(field)?;
    (h < 24 && m < 60 && s < 60).then_some(h * 3600 + m * 60 + s)
}

/// `a.b.c`, the header's way of writing dates and times.
fn three_numbers(field: &str) -> Option<[u32; 3]> {
    let parts: Vec<u32> = field
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    parts.try_into().ok()
}
