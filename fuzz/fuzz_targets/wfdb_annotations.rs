//! The MIT-format annotation parser, two ways (the first input byte picks: even, the rest
//! is an annotation file, so seeds are real files after one byte; odd, the rest builds a
//! list of annotations).
//!
//! * Any bytes: no panic; annotations are real codes (never the end mark or an escape) with
//!   a symbol, no more of them than words; a refusal names the file.
//! * Annotation lists written by an independent encoder (long and negative intervals as
//!   SKIPs, subtypes, channels, annotator numbers and texts as escapes): parsing gives back
//!   every field exactly.
#![no_main]

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use zerohop_ecg::wfdb::{is_beat, parse_annotations, symbol};

#[derive(Arbitrary, Debug)]
struct Item {
    delta: i32,
    code: u8,
    subtype: i8,
    chan: u8,
    num: i8,
    aux: Option<Vec<u8>>,
}

fn word(out: &mut Vec<u8>, code: u16, field: u16) {
    out.extend_from_slice(&((code << 10) | (field & 0x3ff)).to_le_bytes());
}

fn check_items(items: &[Item]) {
    let mut bytes = Vec::new();
    let (mut sample, mut chan, mut num) = (0i64, 0u8, 0i8);
    let mut want = Vec::new();
    for it in items {
        // Codes 1–49, leaving out the comment code, whose texts may be file definitions.
        let code = u16::from(it.code % 49 + 1);
        let code = if code == 22 { 1 } else { code };
        let delta = i64::from(it.delta);
        if (0..1024).contains(&delta) {
            word(&mut bytes, code, delta as u16);
        } else {
            let d = it.delta as u32;
            word(&mut bytes, 59, 0);
            bytes.extend_from_slice(&((d >> 16) as u16).to_le_bytes());
            bytes.extend_from_slice(&(d as u16).to_le_bytes());
            word(&mut bytes, code, 0);
        }
        sample += delta;
        if it.subtype != 0 {
            word(&mut bytes, 61, u16::from(it.subtype as u8));
        }
        if it.chan != chan {
            word(&mut bytes, 62, u16::from(it.chan));
            chan = it.chan;
        }
        if it.num != num {
            word(&mut bytes, 60, u16::from(it.num as u8));
            num = it.num;
        }
        let aux = it.aux.as_ref().map(|t| {
            let text: Vec<u8> = t.iter().take(300).map(|&c| c % 95 + 32).collect();
            word(&mut bytes, 63, text.len() as u16);
            bytes.extend_from_slice(&text);
            if text.len() % 2 == 1 {
                bytes.push(0);
            }
            text.iter().map(|&c| char::from(c)).collect::<String>()
        });
        want.push((sample, code as u8, it.subtype, chan, num, aux));
    }
    word(&mut bytes, 0, 0);
    let file = parse_annotations(&bytes, Path::new("fuzz.atr"))
        .unwrap_or_else(|e| panic!("refused a valid file: {e}"));
    assert_eq!(file.time_resolution, None);
    let got: Vec<_> = file
        .annotations
        .iter()
        .map(|a| (a.sample, a.code, a.subtype, a.chan, a.num, a.aux.clone()))
        .collect();
    assert_eq!(got, want);
    for a in &file.annotations {
        if let Some(s) = symbol(a.code) {
            assert_eq!(&*a.symbol, s);
        }
    }
}

fn check_bytes(bytes: &[u8]) {
    match parse_annotations(bytes, Path::new("fuzz.atr")) {
        Ok(file) => {
            assert!(file.annotations.len() <= bytes.len() / 2);
            for a in &file.annotations {
                assert!((1..59).contains(&a.code), "{a:?}");
                assert!(!a.symbol.is_empty());
                if is_beat(a.code) {
                    assert!(symbol(a.code).is_some());
                }
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains("fuzz.atr"), "{message}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        check_bytes(rest);
    } else if let Ok(items) = Vec::<Item>::arbitrary_take_rest(Unstructured::new(rest)) {
        check_items(&items);
    }
});
