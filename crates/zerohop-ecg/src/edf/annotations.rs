//! EDF+ annotations: each data record's bytes of an "EDF Annotations" signal hold
//! time-stamped annotation lists (TALs), `+onset[\x15duration]\x14text\x14…\x14\x00`,
//! then zero bytes. The first TAL of a record's first annotation signal has an empty text
//! and gives the record's start, in seconds after the file's start time.

use crate::error::{invalid, Result};

const ONSET_END: u8 = 0x14;
const DURATION_MARK: u8 = 0x15;

/// One annotation of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    /// Seconds after the file's start time (negative: before it).
    pub onset: f64,
    pub duration: Option<f64>,
    pub text: String,
}

/// Parses the annotation bytes of data record `record`: its annotations are appended to
/// `out`; the record's start is returned when its first TAL keeps time (an empty first text,
/// as EDF+ asks of every record).
pub fn parse_record(bytes: &[u8], record: u64, out: &mut Vec<Annotation>) -> Result<Option<f64>> {
    let fail = |reason: String| {
        invalid(
            "EDF+ annotations",
            format!("data record {record}: {reason}"),
        )
    };
    let mut start = None;
    let mut rest = bytes;
    let mut first = true;
    loop {
        let skipped = rest.iter().take_while(|&&b| b == 0).count();
        rest = &rest[skipped..];
        if rest.is_empty() {
            return Ok(start);
        }
        let end = rest.iter().position(|&b| b == 0).ok_or_else(|| {
            fail(
                "an annotation list runs to the end of the record without its closing 0 byte"
                    .into(),
            )
        })?;
        let tal = &rest[..end];
        rest = &rest[end..];
        let Some(body) = tal.strip_suffix(&[ONSET_END]) else {
            return Err(fail(format!(
                "an annotation list does not end with byte 0x14: {:?}",
                String::from_utf8_lossy(tal)
            )));
        };
        let mut parts = body.split(|&b| b == ONSET_END);
        let time = parts.next().unwrap_or_default();
        let (onset, duration) = onset_and_duration(time).map_err(fail)?;
        let mut texts = parts.peekable();
        if first {
            first = false;
            if texts.peek().is_some_and(|t| t.is_empty()) {
                texts.next();
                start = Some(onset);
            }
        }
        for text in texts {
            out.push(Annotation {
                onset,
                duration,
                text: String::from_utf8_lossy(text).into_owned(),
            });
        }
    }
}

/// `+12.5` or `-0.2\x1530`: the onset must be signed, as EDF+ writes it.
fn onset_and_duration(field: &[u8]) -> Result<(f64, Option<f64>), String> {
    let text = String::from_utf8_lossy(field);
    let (onset, duration) = match text.split_once(char::from(DURATION_MARK)) {
        Some((o, d)) => (o, Some(d)),
        None => (text.as_ref(), None),
    };
    let plain_number = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && s.bytes().filter(|&b| b == b'.').count() <= 1
    };
    let value = onset
        .strip_prefix(['+', '-'])
        .filter(|v| plain_number(v))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("onset {onset:?} is not a signed number of seconds"))?;
    let onset = if onset.starts_with('-') {
        -value
    } else {
        value
    };
    let duration = match duration {
        None | Some("") => None,
        Some(d) => Some(
            Some(d)
                .filter(|d| plain_number(d))
                .and_then(|d| d.parse::<f64>().ok())
                .filter(|d| d.is_finite())
                .ok_or_else(|| format!("duration {d:?} is not a number of seconds"))?,
        ),
    };
    Ok((onset, duration))
}

/// The MIT-BIH beat symbol an annotation's text is, if it is one: the way beat-by-beat
/// reference annotations travel in EDF+ (one annotation per beat, its text the class).
pub fn beat_symbol(text: &str) -> Option<&'static str> {
    static BEATS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let beats = BEATS.get_or_init(|| {
        (0..=u8::MAX)
            .filter(|&code| crate::wfdb::is_beat(code))
            .filter_map(crate::wfdb::symbol)
            .collect()
    });
    let text = text.trim();
    beats.iter().copied().find(|&symbol| symbol == text)
}
