//! Header edge cases, every format against hand-packed bytes, frame counting, lead choice
//! and annotation escapes.

use std::borrow::Cow;
use std::path::Path;

use super::*;

fn header(text: &str) -> Header {
    parse_header(text, Path::new("t.hea")).unwrap()
}

fn header_err(text: &str) -> String {
    parse_header(text, Path::new("t.hea"))
        .unwrap_err()
        .to_string()
}

/// Decodes `text`'s record with every signal file holding `bytes`.
fn decode(text: &str, leads: &[&str], bytes: &[u8]) -> Result<Record> {
    let leads: Vec<String> = leads.iter().map(|s| s.to_string()).collect();
    decode_signals(header(text), &leads, Path::new("d"), |_| {
        Ok(Cow::Owned(bytes.to_vec()))
    })
}

fn column(r: &Record, name: &str) -> Vec<f32> {
    r.table.column::<f32>(name).unwrap().to_vec()
}

#[test]
fn header_of_record_100_with_comments_and_blank_lines() {
    let h = header(
        "# a comment first\n100 2 360 650000\n100.dat 212 200 11 1024 995 -22131 0 MLII\n\n\
         100.dat 212 200 11 1024 1011 20052 0 V5\r\n# 69 M 1085 1629 x1\n#Aldomet, Inderal\n",
    );
    assert_eq!(h.record, "100");
    assert_eq!((h.rate, h.samples), (360.0, Some(650000)));
    assert_eq!(h.signals.len(), 2);
    let s = &h.signals[0];
    assert_eq!((s.file.as_str(), s.format, s.gain), ("100.dat", 212, 200.0));
    assert_eq!((s.adc_resolution, s.adc_zero, s.baseline), (11, 1024, 1024));
    assert_eq!(
        (s.initial_value, s.checksum, s.block_size),
        (995, Some(-22131), 0)
    );
    assert_eq!((s.units.as_str(), s.description.as_str()), ("mV", "MLII"));
    assert_eq!(h.signals[1].description, "V5");
    assert_eq!(
        h.comments,
        ["a comment first", "69 M 1085 1629 x1", "Aldomet, Inderal"]
    );
}

#[test]
fn header_defaults_and_optional_fields() {
    // No frequency: 250 Hz; no samples; a bare signal line.
    let h = header("r 1\nr.dat 16\n");
    assert_eq!((h.rate, h.samples), (250.0, None));
    let s = &h.signals[0];
    assert_eq!(
        (s.gain, s.baseline, s.adc_zero, s.initial_value),
        (200.0, 0, 0, 0)
    );
    assert_eq!(
        (s.units.as_str(), s.adc_resolution, s.checksum),
        ("mV", 16, None)
    );
    assert_eq!(s.description, "");
    // Counter frequency, base counter, 0 samples (= unspecified), time and date.
    let h = header("r 1 500/1000(12.5) 0 10:20:30.5 01/02/2003\nr.dat 80 0/uV\n");
    assert_eq!(
        (h.rate, h.counter_rate, h.base_counter),
        (500.0, Some(1000.0), Some(12.5))
    );
    assert_eq!(h.samples, None);
    assert_eq!(h.base_time.as_deref(), Some("10:20:30.5"));
    assert_eq!(h.base_date.as_deref(), Some("01/02/2003"));
    // Gain 0 is the default gain; units without a baseline; 8-bit format width.
    let s = &h.signals[0];
    assert_eq!(
        (s.gain, s.units.as_str(), s.adc_resolution),
        (200.0, "uV", 8)
    );
    // Baseline differs from the ADC zero; description with spaces; format suffixes.
    let h = header("r 1 128\nr.dat 212x1:0+512 -13.5(-7)/mmHg 12 3 4 5 6 ABP  radial  line \n");
    let s = &h.signals[0];
    assert_eq!(
        (s.format, s.samples_per_frame, s.skew, s.byte_offset),
        (212, 1, 0, 512)
    );
    assert_eq!((s.gain, s.baseline, s.adc_zero), (-13.5, -7, 3));
    assert_eq!((s.initial_value, s.checksum, s.block_size), (4, Some(5), 6));
    assert_eq!(
        (s.units.as_str(), s.description.as_str()),
        ("mmHg", "ABP  radial  line")
    );
    // Only an ADC zero given: the baseline and initial value follow it.
    let s = &header("r 1\nr.dat 16 100 12 -5\n").signals[0];
    assert_eq!((s.baseline, s.initial_value), (-5, -5));
}

#[test]
fn header_errors_name_the_line_the_column_and_the_field() {
    let e = header_err("r 1 abc\nr.dat 16\n");
    assert!(
        e.contains("t.hea, line 1, column 5 (sampling frequency)"),
        "{e}"
    );
    assert!(header_err("r 1 -360\nr.dat 16\n").contains("not positive"));
    assert!(header_err("r 1 inf\nr.dat 16\n").contains("not a finite number"));
    let e = header_err("r/3 2 360\ns1 100\ns2 100\n");
    assert!(e.contains("multi-segment") && e.contains("line 1"), "{e}");
    let e = header_err("r 2\nr.dat 16\n# only one\n");
    assert!(e.contains("announces 2 signal(s), the header has 1"), "{e}");
    let e = header_err("r 1\nr.dat 16\nextra 1\n");
    assert!(e.contains("line 3") && e.contains("unexpected line"), "{e}");
    let e = header_err("r 1\n\nr.dat 16 200(0/mV\n");
    assert!(e.contains("line 3, column 10 (baseline)"), "{e}");
    let e = header_err("r 1\nr.dat 16y2\n");
    assert!(e.contains("(format)") && e.contains("'y'"), "{e}");
    // A multi-byte character after the format (found by fuzzing: a slice inside it).
    let e = header_err("r 1\nr.dat 16\u{fffd} 200\n");
    assert!(e.contains("(format)") && e.contains("'\u{fffd}'"), "{e}");
    assert!(header_err("r 1\nr.dat 16x0\n").contains("samples per frame"));
    assert!(header_err("r 1\nr.dat\n").contains("has no format"));
    assert!(header_err("r 1\nr.dat 16 200 x\n").contains("(ADC resolution)"));
    assert!(header_err("r\n").contains("no number of signals"));
    assert!(header_err("# nothing\n\n").contains("no record line"));
    assert!(header_err("r 1 360 10 1:2:3 1/2/2000 more\nr.dat 16\n").contains("unexpected field"));
    assert!(header_err("r 1 360 10 noon\nr.dat 16\n").contains("(base time)"));
}

#[test]
fn lead_names_are_unique() {
    let h = header(
        "r 4\nf 16 200 16 0 0 0 0 V1\nf 16 200 16 0 0 0 0 V1\nf 16\nf 16 200 16 0 0 0 0 V1\n",
    );
    assert_eq!(h.lead_names(), ["V1", "V1_2", "signal2", "V1_3"]);
}

/// Packs 12-bit samples as format 212 does (two in three bytes), independently of the
/// decoder.
fn pack_212(samples: &[i32]) -> Vec<u8> {
    let mut out = Vec::new();
    for pair in samples.chunks(2) {
        let a = (pair[0] & 0xfff) as u32;
        out.push(a as u8);
        match pair.get(1) {
            Some(&b) => {
                let b = (b & 0xfff) as u32;
                out.push(((a >> 8) | ((b >> 8) << 4)) as u8);
                out.push(b as u8);
            }
            None => out.push((a >> 8) as u8),
        }
    }
    out
}

#[test]
fn format_212_interleaved_signed_and_invalid() {
    // Frames (s0, s1): the packing runs across the two signals.
    let raw = [995, 1011, -1, 2047, -2048, 0, 0x7ff, -0x7ff];
    let bytes = pack_212(&raw);
    let text = "r 2 360 4\nr.dat 212 200 12 1024 0 0 0 MLII\nr.dat 212 100(10)/uV 12 0 0 0 0 V5\n";
    let r = decode(text, &[], &bytes).unwrap();
    assert_eq!(r.table.len(), 4);
    let mlii = column(&r, "MLII");
    let v5 = column(&r, "V5");
    let want0: Vec<f32> = [995, -1, -2048, 0x7ff]
        .iter()
        .map(|&v: &i32| ((v - 1024) as f64 / 200.0) as f32)
        .collect();
    assert_eq!(mlii[0], want0[0]);
    assert_eq!(mlii[1], want0[1]);
    assert!(mlii[2].is_nan(), "-2048 is WFDB's invalid sample");
    assert_eq!(mlii[3], want0[3]);
    assert_eq!(v5, [10.01, 20.37, -0.1, -20.57]);
    assert_eq!(
        r.leads().map(|s| s.units.as_str()).collect::<Vec<_>>(),
        ["mV", "uV"]
    );
    // One signal, odd count: the last sample takes two bytes.
    let bytes = pack_212(&[5, -6, 7]);
    assert_eq!(bytes.len(), 5);
    let r = decode("r 1\nr.dat 212 1 12 0 0 0 0 x\n", &[], &bytes).unwrap();
    assert_eq!(column(&r, "x"), [5.0, -6.0, 7.0]);
}

#[test]
fn formats_16_61_80_160_24_32() {
    let cases: [(&str, Vec<u8>, Vec<f32>); 6] = [
        (
            "16",
            vec![0x01, 0x00, 0xff, 0xff, 0x00, 0x80, 0xff, 0x7f],
            vec![1.0, -1.0, f32::NAN, 32767.0],
        ),
        (
            "61",
            vec![0x00, 0x01, 0xff, 0xfe, 0x80, 0x00, 0x7f, 0xff],
            vec![1.0, -2.0, f32::NAN, 32767.0],
        ),
        (
            "80",
            vec![129, 127, 0, 255],
            vec![1.0, -1.0, f32::NAN, 127.0],
        ),
        (
            "160",
            vec![0x01, 0x80, 0xff, 0x7f, 0x00, 0x00, 0xff, 0xff],
            vec![1.0, -1.0, f32::NAN, 32767.0],
        ),
        (
            "24",
            vec![1, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0x80, 0xff, 0xff, 0x7f],
            vec![1.0, -1.0, f32::NAN, 8388607.0],
        ),
        (
            "32",
            vec![
                2, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0x80, 0, 0, 1, 0,
            ],
            vec![2.0, -2.0, f32::NAN, 65536.0],
        ),
    ];
    for (format, bytes, want) in cases {
        let text = format!("r 1 100 4\nr.dat {format} 1 16 0 0 0 0 s\n");
        let got = column(&decode(&text, &[], &bytes).unwrap(), "s");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "format {format}: {got:?} != {want:?}"
            );
        }
    }
}

#[test]
fn formats_310_and_311() {
    let raw = [1, -1, 511, -512, 300, -300, 7];
    // 310: per 3 samples, two little-endian words; a, b in bits 1-10; c split in bits 11-15.
    let mut b310 = Vec::new();
    for t in raw.chunks(3) {
        let v = |i: usize| t.get(i).map_or(0u32, |&x| (x & 0x3ff) as u32);
        let w0 = (v(0) << 1) | ((v(2) & 0x1f) << 11);
        let w1 = (v(1) << 1) | ((v(2) >> 5) << 11);
        b310.extend_from_slice(&(w0 as u16).to_le_bytes());
        if t.len() > 1 {
            b310.extend_from_slice(&(w1 as u16).to_le_bytes());
        }
    }
    // 311: per 3 samples, one little-endian 32-bit word (a | b << 10 | c << 20).
    let mut b311 = Vec::new();
    for t in raw.chunks(3) {
        let v = |i: usize| t.get(i).map_or(0u32, |&x| (x & 0x3ff) as u32);
        let w = v(0) | v(1) << 10 | v(2) << 20;
        b311.extend_from_slice(&w.to_le_bytes()[..[0, 2, 3, 4][t.len()]]);
    }
    assert_eq!((b310.len(), b311.len()), (10, 10));
    for (format, bytes) in [("310", b310), ("311", b311)] {
        let text = format!("r 1\nr.dat {format} 1 10 0 0 0 0 s\n");
        let got = column(&decode(&text, &[], &bytes).unwrap(), "s");
        assert_eq!(got.len(), 7, "format {format}");
        let want = [1.0, -1.0, 511.0, f32::NAN, 300.0, -300.0, 7.0];
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "format {format}: {got:?}"
            );
        }
    }
}

#[test]
fn frame_counts_from_the_header_or_the_file() {
    let bytes: Vec<u8> = (0..12).collect(); // 6 int16 samples = 3 frames of 2 signals
    let two = |n: &str| format!("r 2 100 {n}\nf 16 1 16 0 0 0 0 a\nf 16 1 16 0 0 0 0 b\n");
    // The header's count when the file holds it (a longer file is read that far).
    assert_eq!(decode(&two("2"), &[], &bytes).unwrap().table.len(), 2);
    // Missing, zero or more than the file holds: the file's frames.
    assert_eq!(decode(&two(""), &[], &bytes).unwrap().table.len(), 3);
    assert_eq!(decode(&two("0"), &[], &bytes).unwrap().table.len(), 3);
    assert_eq!(decode(&two("10"), &[], &bytes).unwrap().table.len(), 3);
    // A truncated final frame is an error naming the file and the frame.
    let e = decode(&two(""), &[], &bytes[..10]).unwrap_err().to_string();
    assert!(
        e.contains("d/f ends inside frame 2") && e.contains("2 byte(s)"),
        "{e}"
    );
    let e = decode(&two("10"), &[], &bytes[..11])
        .unwrap_err()
        .to_string();
    assert!(e.contains("inside frame 2"), "{e}");
    // The byte offset skips a prefix.
    let r = decode("r 1 100\nf 16+4 1 16 0 0 0 0 a\n", &[], &bytes).unwrap();
    assert_eq!(
        column(&r, "a"),
        [0x0504 as f32, 0x0706 as f32, 0x0908 as f32, 0x0b0a as f32]
    );
    let e = decode("r 1 100\nf 16+40 1\n", &[], &bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("fewer than its byte offset 40"), "{e}");
    // An empty file is an empty record.
    assert_eq!(decode(&two(""), &[], &[]).unwrap().table.len(), 0);
}

#[test]
fn signals_in_several_files() {
    let text = "r 3 100\na.dat 16 1 16 0 0 0 0 A\nb.dat 80 2 8 0 0 0 0 B\nb.dat 80 2 8 0 0 0 0 C\n";
    let r = decode_signals(
        header(text),
        &["C".into(), "A".into()],
        Path::new("d"),
        |name| {
            Ok(Cow::Borrowed(match name {
                "a.dat" => &[1u8, 0, 2, 0, 3, 0][..],
                "b.dat" => &[130u8, 132, 134, 136][..],
                _ => panic!("{name}"),
            }))
        },
    )
    .unwrap();
    assert_eq!(r.names, ["C", "A"]);
    assert_eq!(r.signals, [2, 0]);
    // The shorter file (2 frames) decides.
    assert_eq!(column(&r, "C"), [2.0, 4.0]);
    assert_eq!(column(&r, "A"), [1.0, 2.0]);
    let e = decode("r 3\na 16\nb 16\na 16\n", &[], &[0; 4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not adjacent"), "{e}");
    let e = decode("r 2\na 16\na 212\n", &[], &[0; 4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("formats 16 and 212"), "{e}");
}

#[test]
fn leads_by_name_or_index_and_refusals() {
    let text = "r 2 360 1\nf 16 200 16 0 0 0 0 MLII\nf 16 200 16 0 0 0 0 V5\n";
    let bytes = [200u8, 0, 144, 1];
    let r = decode(text, &["1"], &bytes).unwrap();
    assert_eq!(
        (r.names.as_slice(), column(&r, "V5")),
        (&["V5".to_string()][..], vec![2.0])
    );
    let e = decode(text, &["V1"], &bytes).unwrap_err().to_string();
    assert!(
        e.contains("no lead \"V1\"") && e.contains("MLII, V5"),
        "{e}"
    );
    let e = decode(text, &["MLII", "0"], &bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("second time"), "{e}");
    for (line, what) in [
        ("f 0", "null signal"),
        ("f 8", "does not decode"),
        ("f 16x2", "samples per frame"),
        ("f 16:3", "skew 3"),
        ("f 16 1e-40", "beyond float32"),
    ] {
        let e = decode(&format!("r 1\n{line}\n"), &[], &bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{line}: {e}");
    }
    assert!(decode("r 0\n", &[], &bytes)
        .unwrap_err()
        .to_string()
        .contains("no signals"));
}

#[test]
fn checksums_are_checked_on_whole_signals() {
    let bytes = [1u8, 0, 0xff, 0xff, 5, 0]; // 1, -1, 5: sum 5
    let r = decode("r 1 1 3\nf 16 1 16 0 0 5 0 a\n", &[], &bytes).unwrap();
    assert_eq!(r.checksums, [Some(true)]);
    let r = decode("r 1 1 3\nf 16 1 16 0 0 6 0 a\n", &[], &bytes).unwrap();
    assert_eq!(r.checksums, [Some(false)]);
    // The header's count is the whole signal, even when the file holds more.
    let r = decode("r 1 1 2\nf 16 1 16 0 0 0 0 a\n", &[], &bytes).unwrap();
    assert_eq!(r.checksums, [Some(true)]);
    let r = decode("r 1 1 5\nf 16 1 16 0 0 5 0 a\n", &[], &bytes).unwrap();
    assert_eq!(
        r.checksums,
        [None],
        "a file shorter than the header is not checked"
    );
}

#[test]
fn a_record_larger_than_one_chunk_decodes_in_order() {
    let n = CHUNK_FRAMES * 2 + 7;
    let raw: Vec<i32> = (0..2 * n).map(|i| (i % 4000) as i32 - 2000).collect();
    let bytes = pack_212(&raw);
    let r = decode(
        "r 2\nf 212 1 12 0 0 0 0 a\nf 212 1 12 0 0 0 0 b\n",
        &[],
        &bytes,
    )
    .unwrap();
    let (a, b) = (column(&r, "a"), column(&r, "b"));
    assert_eq!(a.len(), n);
    for i in 0..n {
        for (got, want) in [(a[i], raw[2 * i]), (b[i], raw[2 * i + 1])] {
            assert!(
                got == want as f32 || (want == -2048 && got.is_nan()),
                "frame {i}"
            );
        }
    }
}

fn w(code: u16, field: u16) -> [u8; 2] {
    ((code << 10) | field).to_le_bytes()
}

fn ann(words: &[[u8; 2]]) -> Result<AnnotationFile> {
    parse_annotations(&words.concat(), Path::new("t.atr"))
}

#[test]
fn annotations_with_every_escape() {
    let mut words = vec![w(28, 18), w(63, 3)];
    words.push([b'(', b'N']);
    words.push([0, 0]); // "(N" and its NUL, padded to an even length
    words.extend([w(1, 59), w(62, 2), w(60, 5), w(61, 0xff)]);
    // SKIP: +100000 in PDP-11 order (high word first).
    words.extend([
        w(59, 0),
        (1u16).to_le_bytes(),
        ((100000u32 - 65536) as u16).to_le_bytes(),
    ]);
    words.extend([w(5, 10), w(63, 4), *b"ab", *b"cd"]);
    words.extend([w(59, 0), 0xffffu16.to_le_bytes(), 0xfff0u16.to_le_bytes()]); // -16
    words.extend([w(14, 6), w(0, 0), w(1, 1)]); // the end word: the last word is not read
    let f = ann(&words).unwrap();
    let a = &f.annotations;
    assert_eq!(a.len(), 4);
    assert_eq!((a[0].sample, a[0].code, &*a[0].symbol), (18, 28, "+"));
    assert_eq!(a[0].aux.as_deref(), Some("(N"));
    assert_eq!(
        (
            a[1].sample,
            &*a[1].symbol,
            a[1].chan,
            a[1].num,
            a[1].subtype
        ),
        (77, "N", 2, 5, -1)
    );
    assert_eq!(a[1].aux, None);
    // chan and num carry over; subtype does not.
    assert_eq!(
        (
            a[2].sample,
            &*a[2].symbol,
            a[2].chan,
            a[2].num,
            a[2].subtype
        ),
        (100087, "V", 2, 5, 0)
    );
    assert_eq!(a[2].aux.as_deref(), Some("abcd"));
    assert_eq!((a[3].sample, &*a[3].symbol), (100087 - 16 + 6, "~"));
    assert!(is_beat(a[1].code) && is_beat(a[2].code));
    assert!(!is_beat(a[0].code) && !is_beat(a[3].code));
}

#[test]
fn annotation_definitions_are_applied_and_left_out() {
    let note = |text: &str| {
        let mut v = vec![w(22, 0), w(63, text.len() as u16)];
        let mut bytes = text.as_bytes().to_vec();
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        v.extend(bytes.chunks(2).map(|c| [c[0], c[1]]));
        v
    };
    let mut words = note("## time resolution: 1000");
    words.extend(note("## annotation type definitions"));
    words.extend(note("42 Z custom beat"));
    words.extend(note("## end of definitions"));
    words.extend([
        w(59, 0),
        0xffffu16.to_le_bytes(),
        0xffffu16.to_le_bytes(),
        w(0, 1),
    ]);
    words.extend([w(42, 5), w(22, 0), w(63, 2), *b"hi", w(15, 1)]);
    let f = ann(&words).unwrap();
    assert_eq!(f.time_resolution, Some(1000.0));
    assert_eq!(f.custom_symbols, [(42, "Z".to_string())]);
    let a = &f.annotations;
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!((a[0].sample, &*a[0].symbol), (5, "Z"));
    assert_eq!(
        (a[1].sample, &*a[1].symbol, a[1].aux.as_deref()),
        (5, "\"", Some("hi"))
    );
    assert_eq!(&*a[2].symbol, "?15");
}

#[test]
fn annotation_errors_name_the_file_and_the_byte() {
    let e = ann(&[w(60, 1)]).unwrap_err().to_string();
    assert!(
        e.contains("t.atr, byte 0") && e.contains("before any annotation"),
        "{e}"
    );
    let e = ann(&[w(1, 1), w(59, 0), [0, 0]]).unwrap_err().to_string();
    assert!(e.contains("byte 2") && e.contains("SKIP"), "{e}");
    let e = ann(&[w(1, 1), w(63, 9), *b"ab"]).unwrap_err().to_string();
    assert!(e.contains("runs past the end"), "{e}");
    let e = parse_annotations(&[1, 4, 7], Path::new("t.atr"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("byte 2") && e.contains("middle of a 16-bit word"),
        "{e}"
    );
    // Without an end word the annotations up to the end are kept.
    assert_eq!(ann(&[w(1, 1), w(1, 1)]).unwrap().annotations.len(), 2);
    assert!(ann(&[]).unwrap().annotations.is_empty());
}

#[test]
fn beat_codes_are_exactly_the_ec57_beats() {
    let beats: String = (0..=255u8)
        .filter(|&c| is_beat(c))
        .map(|c| symbol(c).unwrap())
        .collect();
    let mut sorted: Vec<char> = beats.chars().collect();
    sorted.sort_unstable();
    let mut want: Vec<char> = "NLRBAaJSVrFejnE/fQ?".chars().collect();
    want.sort_unstable();
    assert_eq!(sorted, want);
    for s in ["+", "~", "|", "x", "\"", "[", "]", "!", "p", "t", "(", ")"] {
        let code = (0..=255u8).find(|&c| symbol(c) == Some(s)).unwrap();
        assert!(!is_beat(code), "{s}");
    }
    assert_eq!(
        (symbol(0), symbol(15), symbol(42), symbol(200)),
        (None, None, None, None)
    );
}
