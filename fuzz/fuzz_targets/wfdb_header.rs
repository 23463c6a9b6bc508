//! The WFDB header parser, two ways (the first input byte picks: even, the rest is header
//! text, so seeds are plain headers after one byte; odd, the rest builds a header).
//!
//! * Any text: no panic; a refusal names the file; an accepted header keeps the format's
//!   invariants (a positive finite rate, non-zero finite gains, unique lead names).
//! * Headers written from arbitrary field values, with optional fields left out in every
//!   allowed way: parsing gives back exactly the values written, and WFDB's defaults for the
//!   rest.
#![no_main]

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use zerohop_ecg::wfdb::{parse_header, Header, DEFAULT_GAIN, DEFAULT_RATE};

#[derive(Arbitrary, Debug)]
struct SignalSpec {
    file: u8,
    format: u8,
    offset: Option<u32>,
    gain: Option<(i32, Option<i32>)>,
    units: Option<u8>,
    /// How many of resolution, zero, initial value, checksum, block size, description.
    fields: u8,
    resolution: u8,
    zero: i32,
    initial: i32,
    checksum: i16,
    block: u16,
    description: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Built {
    name: u16,
    rate: Option<(u16, Option<(u16, Option<i16>)>)>,
    samples: Option<u32>,
    signals: Vec<SignalSpec>,
    comments: Vec<u8>,
}

fn check_invariants(h: &Header) {
    assert!(h.rate.is_finite() && h.rate > 0.0, "{h:?}");
    assert!(h.samples != Some(0));
    for s in &h.signals {
        assert!(s.gain.is_finite() && s.gain != 0.0, "{s:?}");
        assert!(s.samples_per_frame > 0);
        assert!(!s.units.is_empty());
    }
    let names = h.lead_names();
    assert_eq!(names.len(), h.signals.len());
    for (i, n) in names.iter().enumerate() {
        assert!(!n.is_empty());
        assert!(!names[..i].contains(n), "{names:?}");
    }
}

/// Printable, without '#', starting with a letter, no trailing blanks.
fn description(s: &SignalSpec) -> String {
    std::iter::once('L')
        .chain(s.description.iter().take(20).map(|&c| match c % 64 + 32 {
            b'#' => 'x',
            c => char::from(c),
        }))
        .collect::<String>()
        .trim_end()
        .to_string()
}

fn check_built(b: &Built) {
    const FORMATS: [u16; 9] = [16, 24, 32, 61, 80, 160, 212, 310, 311];
    const UNITS: [&str; 4] = ["mV", "uV", "mmHg", "%"];
    let signals = &b.signals[..b.signals.len().min(8)];
    let mut text = String::new();
    let mut line = format!("rec{} {}", b.name, signals.len());
    let mut want_rate = DEFAULT_RATE;
    let mut want_samples = None;
    if let Some((rate, counter)) = b.rate {
        let rate = rate.max(1);
        want_rate = f64::from(rate);
        line += &format!(" {rate}");
        if let Some((counter, base)) = counter {
            line += &format!("/{counter}");
            if let Some(base) = base {
                line += &format!("({base})");
            }
        }
        if let Some(n) = b.samples {
            line += &format!(" {n}");
            want_samples = (n > 0).then_some(u64::from(n));
        }
    }
    text += &line;
    text += "\n";
    for s in signals {
        let format = FORMATS[usize::from(s.format) % FORMATS.len()];
        let mut line = format!("f{}.dat {format}", s.file % 3);
        if let Some(o) = s.offset {
            line += &format!("+{o}");
        }
        let mut fields = usize::from(s.fields % 7);
        if let Some((gain, baseline)) = s.gain {
            line += &format!(" {gain}");
            if let Some(b) = baseline {
                line += &format!("({b})");
            }
            if let Some(u) = s.units {
                line += &format!("/{}", UNITS[usize::from(u) % UNITS.len()]);
            }
        } else {
            fields = 0;
        }
        let description = description(s);
        let values = [
            s.resolution.to_string(),
            s.zero.to_string(),
            s.initial.to_string(),
            s.checksum.to_string(),
            s.block.to_string(),
            description.clone(),
        ];
        for v in &values[..fields] {
            line += " ";
            line += v;
        }
        text += &line;
        text += "\n";
    }
    let comment: String = b
        .comments
        .iter()
        .take(30)
        .map(|&c| char::from(c % 94 + 33))
        .collect();
    text += &format!("# {comment}\n");

    let h = parse_header(&text, Path::new("fuzz.hea"))
        .unwrap_or_else(|e| panic!("refused a valid header: {e}\n{text}"));
    check_invariants(&h);
    assert_eq!(h.record, format!("rec{}", b.name));
    assert_eq!(h.rate, want_rate, "{text}");
    assert_eq!(h.samples, want_samples, "{text}");
    assert_eq!(h.signals.len(), signals.len());
    assert_eq!(h.comments, [comment.trim()]);
    for (s, got) in signals.iter().zip(&h.signals) {
        assert_eq!(got.format, FORMATS[usize::from(s.format) % FORMATS.len()]);
        assert_eq!(got.byte_offset, u64::from(s.offset.unwrap_or(0)));
        let fields = if s.gain.is_some() {
            usize::from(s.fields % 7)
        } else {
            0
        };
        let (gain, baseline) = s.gain.unwrap_or((0, None));
        let gain = if gain == 0 {
            DEFAULT_GAIN
        } else {
            f64::from(gain)
        };
        assert_eq!(got.gain, gain, "{text}");
        let zero = if fields >= 2 { i64::from(s.zero) } else { 0 };
        assert_eq!(got.adc_zero, zero, "{text}");
        assert_eq!(got.baseline, baseline.map_or(zero, i64::from), "{text}");
        let initial = if fields >= 3 {
            i64::from(s.initial)
        } else {
            zero
        };
        assert_eq!(got.initial_value, initial, "{text}");
        let checksum = (fields >= 4).then_some(i64::from(s.checksum));
        assert_eq!(got.checksum, checksum, "{text}");
        let units = match (s.gain, s.units) {
            (Some(_), Some(u)) => UNITS[usize::from(u) % UNITS.len()],
            _ => "mV",
        };
        assert_eq!(got.units, units, "{text}");
        let description = if fields >= 6 {
            description(s)
        } else {
            String::new()
        };
        assert_eq!(got.description, description, "{text}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        match parse_header(&text, Path::new("fuzz.hea")) {
            Ok(h) => check_invariants(&h),
            Err(e) => {
                let message = e.to_string();
                assert!(message.contains("fuzz.hea"), "{message}");
            }
        }
    } else if let Ok(b) = Built::arbitrary_take_rest(Unstructured::new(rest)) {
        check_built(&b);
    }
});
