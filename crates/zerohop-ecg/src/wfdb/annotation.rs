//! MIT-format annotation files (`.atr`, `.qrs`, …): a stream of 16-bit little-endian words,
//! each with a 6-bit code (top bits) and a 10-bit field (low bits). Codes 1–49 are
//! annotations whose field is the sample delta from the previous one; 59–63 are escapes
//! (SKIP, NUM, SUB, CHN, AUX) that carry extra fields; the word 0 ends the file.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use crate::error::{invalid, Result};

const SKIP: u16 = 59;
const NUM: u16 = 60;
const SUB: u16 = 61;
const CHN: u16 = 62;
const AUX: u16 = 63;
/// A comment annotation; at sample 0 with a `## …` text it is a file-level definition.
const NOTE: u8 = 22;

/// One annotation.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    /// The sample number (in the annotation file's time resolution: the record's sampling
    /// frequency unless [`AnnotationFile::time_resolution`] says otherwise).
    pub sample: i64,
    /// The annotation code (1 = `N`, 5 = `V`, 28 = rhythm change, …).
    pub code: u8,
    /// The code's mnemonic (`N`, `V`, `+`, …), from the standard table or the file's own
    /// definitions; `"?<code>"` for a code neither defines.
    pub symbol: Cow<'static, str>,
    pub subtype: i8,
    /// The channel; like WFDB, it carries over from the previous annotation unless given.
    pub chan: u8,
    /// The annotator number; carries over like `chan`.
    pub num: i8,
    /// The auxiliary text (rhythm annotations hold `(N`, `(AFIB`, …), trailing NULs removed.
    pub aux: Option<String>,
}

/// An annotation file's annotations and the file-level definitions it carried.
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotationFile {
    /// The annotations, definitions excluded.
    pub annotations: Vec<Annotation>,
    /// `## time resolution: F`: the sample numbers' frequency, when it differs from the
    /// record's.
    pub time_resolution: Option<f64>,
    /// Codes the file defines itself (`code → symbol`).
    pub custom_symbols: Vec<(u8, String)>,
}

/// The standard WFDB code table (ecgcodes.h): `SYMBOLS[code]`; `None` for unused codes.
const SYMBOLS: [Option<&str>; 50] = [
    None,       // 0 NOTANN
    Some("N"),  // 1 NORMAL
    Some("L"),  // 2 LBBB
    Some("R"),  // 3 RBBB
    Some("a"),  // 4 ABERR
    Some("V"),  // 5 PVC
    Some("F"),  // 6 FUSION
    Some("J"),  // 7 NPC
    Some("A"),  // 8 APC
    Some("S"),  // 9 SVPB
    Some("E"),  // 10 VESC
    Some("j"),  // 11 NESC
    Some("/"),  // 12 PACE
    Some("Q"),  // 13 UNKNOWN
    Some("~"),  // 14 NOISE
    None,       // 15
    Some("|"),  // 16 ARFCT
    None,       // 17
    Some("s"),  // 18 STCH
    Some("T"),  // 19 TCH
    Some("*"),  // 20 SYSTOLE
    Some("D"),  // 21 DIASTOLE
    Some("\""), // 22 NOTE
    Some("="),  // 23 MEASURE
    Some("p"),  // 24 PWAVE
    Some("B"),  // 25 BBB
    Some("^"),  // 26 PACESP
    Some("t"),  // 27 TWAVE
    Some("+"),  // 28 RHYTHM
    Some("u"),  // 29 UWAVE
    Some("?"),  // 30 LEARN
    Some("!"),  // 31 FLWAV
    Some("["),  // 32 VFON
    Some("]"),  // 33 VFOFF
    Some("e"),  // 34 AESC
    Some("n"),  // 35 SVESC
    Some("@"),  // 36 LINK
    Some("x"),  // 37 NAPC
    Some("f"),  // 38 PFUS
    Some("("),  // 39 WFON
    Some(")"),  // 40 WFOFF
    Some("r"),  // 41 RONT
    None,       // 42–49: free for a file's own definitions
    None,
    None,
    None,
    None,
    None,
    None,
    None,
];

/// The standard mnemonic of an annotation code (`1 → "N"`), `None` for unused codes.
pub fn symbol(code: u8) -> Option<&'static str> {
    SYMBOLS.get(usize::from(code)).copied().flatten()
}

/// Whether a code is a beat annotation in the sense of AAMI EC57 (the beats a QRS detector
/// is scored on): `N L R B A a J S V r F e j n E / f Q ?`. Rhythm, noise, artifact, comment
/// and waveform codes are not beats; neither is `!` (ventricular flutter wave), which WFDB's
/// own `isqrs` table counts but EC57 scoring leaves out.
pub fn is_beat(code: u8) -> bool {
    matches!(code, 1..=13 | 25 | 30 | 34 | 35 | 38 | 41)
}

/// The largest annotation file read: 128 million two-byte annotations, a beat every 10 ms
/// for two weeks; a larger file is not the annotation file of one record.
pub(crate) const MAX_ANNOTATION_BYTES: u64 = 256 << 20;

/// Reads an annotation file's annotations (definitions excluded; see [`parse_annotations`]).
pub fn read_annotations(path: &Path) -> Result<Vec<Annotation>> {
    Ok(read_annotation_file(path)?.annotations)
}

/// Reads an annotation file with its file-level definitions.
pub fn read_annotation_file(path: &Path) -> Result<AnnotationFile> {
    let bytes = crate::file::read_small(path, "annotation file", MAX_ANNOTATION_BYTES)?;
    parse_annotations(&bytes, path)
}

/// Parses MIT-format annotation bytes (`path` names the file in errors).
///
/// Definitions, which writers put at sample 0 as comment (`"`) annotations whose text starts
/// with `## ` (the time resolution, and a block of `code symbol description` lines between
/// `## annotation type definitions` and `## end of definitions`), are applied and left out.
pub fn parse_annotations(bytes: &[u8], path: &Path) -> Result<AnnotationFile> {
    let fail = |offset: usize, reason: String| {
        invalid(
            "annotation file",
            format!("{}, byte {offset}: {reason}", path.display()),
        )
    };
    let word = |i: usize| u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
    let words = bytes.len() / 2;
    let mut out = AnnotationFile {
        annotations: Vec::new(),
        time_resolution: None,
        custom_symbols: Vec::new(),
    };
    let mut custom: HashMap<u8, String> = HashMap::new();
    let mut in_definitions = false;
    let (mut sample, mut chan, mut num) = (0i64, 0u8, 0i8);
    let mut i = 0;
    let mut ended = false;
    while i < words {
        let w = word(i);
        let (code, field) = (w >> 10, w & 0x3ff);
        match code {
            0 if field == 0 => {
                ended = true;
                break;
            }
            SKIP => {
                if i + 2 >= words {
                    return Err(fail(2 * i, "a SKIP without its 32-bit interval".into()));
                }
                // PDP-11 order: the high 16 bits first, each half little-endian.
                let delta = ((u32::from(word(i + 1)) << 16) | u32::from(word(i + 2))) as i32;
                sample = sample
                    .checked_add(delta.into())
                    .ok_or_else(|| fail(2 * i, "the sample number overflows 64 bits".into()))?;
                i += 3;
                continue;
            }
            NUM | SUB | CHN | AUX => {
                let Some(last) = out.annotations.last_mut() else {
                    return Err(fail(
                        2 * i,
                        format!("escape code {code} comes before any annotation"),
                    ));
                };
                let byte = (field & 0xff) as u8;
                match code {
                    NUM => {
                        last.num = byte as i8;
                        num = last.num;
                    }
                    SUB => last.subtype = byte as i8,
                    CHN => {
                        last.chan = byte;
                        chan = byte;
                    }
                    _ => {
                        let len = usize::from(field);
                        let start = 2 * i + 2;
                        let Some(text) = bytes.get(start..start + len) else {
                            return Err(fail(
                                2 * i,
                                format!(
                                    "an auxiliary text of {len} bytes runs past the end of \
                                     the file ({} bytes)",
                                    bytes.len()
                                ),
                            ));
                        };
                        // Writers count the C string's terminating NUL in the length.
                        let end = text.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                        // Latin-1: every byte is one character, so nothing is lost.
                        last.aux = Some(text[..end].iter().map(|&b| char::from(b)).collect());
                        i += 1 + len.div_ceil(2);
                        continue;
                    }
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        sample = sample
            .checked_add(field.into())
            .ok_or_else(|| fail(2 * i, "the sample number overflows 64 bits".into()))?;
        i += 1;
        if code == 0 {
            // NOTANN with an interval only moves the time (writers end definitions so).
            continue;
        }
        let code = code as u8;
        out.annotations.push(Annotation {
            sample,
            code,
            symbol: Cow::Borrowed(""),
            subtype: 0,
            chan,
            num,
            aux: None,
        });
        // The previous annotation is complete: settle it now that its escapes are read.
        settle(&mut out, &mut custom, &mut in_definitions, 1);
    }
    if !ended && bytes.len() % 2 == 1 {
        return Err(fail(
            bytes.len() - 1,
            "the file ends in the middle of a 16-bit word".into(),
        ));
    }
    settle(&mut out, &mut custom, &mut in_definitions, 0);
    for a in &mut out.annotations {
        a.symbol = match custom.get(&a.code) {
            Some(s) => Cow::Owned(s.clone()),
            None => {
                symbol(a.code).map_or_else(|| Cow::Owned(format!("?{}", a.code)), Cow::Borrowed)
            }
        };
    }
    let mut defined: Vec<(u8, String)> = custom.into_iter().collect();
    defined.sort();
    out.custom_symbols = defined;
    Ok(out)
}

/// Handles the annotation `back` places from the end (its escapes all read): a definition
/// is applied and removed.
fn settle(
    out: &mut AnnotationFile,
    custom: &mut HashMap<u8, String>,
    in_definitions: &mut bool,
    back: usize,
) {
    let Some(index) = out.annotations.len().checked_sub(back + 1) else {
        return;
    };
    let a = &out.annotations[index];
    if a.code != NOTE || a.sample != 0 {
        return;
    }
    let text = a.aux.as_deref().unwrap_or("");
    let definition = if let Some(rest) = text.strip_prefix("## ") {
        if rest == "annotation type definitions" {
            *in_definitions = true;
        } else if rest == "end of definitions" {
            *in_definitions = false;
        } else if let Some(value) = rest.strip_prefix("time resolution:") {
            out.time_resolution = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0);
        }
        true
    } else if *in_definitions {
        // `code symbol description`
        let mut parts = text.split_whitespace();
        if let (Some(Ok(code)), Some(sym)) = (parts.next().map(str::parse::<u8>), parts.next()) {
            custom.insert(code, sym.to_string());
        }
        true
    } else {
        false
    };
    if definition {
        out.annotations.remove(index);
    }
}
