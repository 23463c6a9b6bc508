use super::*;
use proptest::prelude::*;

/// One signal of a test file: its fields and its digital samples (all records).
#[derive(Clone)]
struct TestSignal {
    label: &'static str,
    per_record: usize,
    physical: (f64, f64),
    digital: (i32, i32),
    samples: Vec<i32>,
}

/// Writes EDF/BDF bytes as the format lays them out; `annotations[r]` is record r's TAL
/// bytes (an annotation signal is added when any are given).
struct TestFile {
    format: Format,
    reserved: &'static str,
    records: u64,
    declared_records: Option<i64>,
    duration: &'static str,
    start: (&'static str, &'static str),
    recording: &'static str,
    signals: Vec<TestSignal>,
    annotations: Vec<Vec<u8>>,
    annotation_bytes: usize,
}

impl TestFile {
    fn edf(signals: Vec<TestSignal>, records: u64) -> Self {
        TestFile {
            format: Format::Edf,
            reserved: "",
            records,
            declared_records: None,
            duration: "1",
            start: ("27.11.26", "10.30.00"),
            recording: "Startdate 27-NOV-2026 X X X",
            signals,
            annotations: Vec::new(),
            annotation_bytes: 60,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut fields: Vec<Field> = self
            .signals
            .iter()
            .map(|s| (s.label.to_string(), s.per_record, s.physical, s.digital))
            .collect();
        let width = self.format.width();
        if !self.annotations.is_empty() {
            let per = self.annotation_bytes / width;
            fields.push((
                self.format.annotation_label().into(),
                per,
                (-1.0, 1.0),
                self.format.digital_limits(),
            ));
        }
        let n = fields.len();
        let mut out = Vec::new();
        if self.format == Format::Bdf {
            out.push(0xFF);
            out.extend_from_slice(b"BIOSEMI");
        } else {
            out.extend_from_slice(b"0       ");
        }
        let mut put = |text: &str, len: usize| {
            let mut b = text.as_bytes().to_vec();
            b.resize(len, b' ');
            out.extend_from_slice(&b[..len]);
        };
        put("X X X X", 80);
        put(self.recording, 80);
        put(self.start.0, 8);
        put(self.start.1, 8);
        put(&(256 * (n + 1)).to_string(), 8);
        put(self.reserved, 44);
        put(
            &self
                .declared_records
                .unwrap_or(self.records as i64)
                .to_string(),
            8,
        );
        put(self.duration, 8);
        put(&n.to_string(), 4);
        for f in &fields {
            put(&f.0, 16);
        }
        for _ in &fields {
            put("AgAgCl electrodes", 80);
        }
        for _ in &fields {
            put("uV", 8);
        }
        for f in &fields {
            put(&f.2 .0.to_string(), 8);
        }
        for f in &fields {
            put(&f.2 .1.to_string(), 8);
        }
        for f in &fields {
            put(&f.3 .0.to_string(), 8);
        }
        for f in &fields {
            put(&f.3 .1.to_string(), 8);
        }
        for _ in &fields {
            put("HP:0.05Hz", 80);
        }
        for f in &fields {
            put(&f.1.to_string(), 8);
        }
        for _ in &fields {
            put("", 32);
        }
        for r in 0..self.records as usize {
            for s in &self.signals {
                for &v in &s.samples[r * s.per_record..(r + 1) * s.per_record] {
                    out.extend_from_slice(&v.to_le_bytes()[..width]);
                }
            }
            if !self.annotations.is_empty() {
                let mut tal = self.annotations[r].clone();
                tal.resize(self.annotation_bytes / width * width, 0);
                out.extend_from_slice(&tal);
            }
        }
        out
    }
}

/// A signal's label, samples per record, physical and digital ranges.
type Field = (String, usize, (f64, f64), (i32, i32));
/// A change that breaks a valid file.
type Breaker = Box<dyn Fn(&mut Vec<u8>)>;

fn ramp(label: &'static str, per_record: usize, records: usize) -> TestSignal {
    TestSignal {
        label,
        per_record,
        physical: (-3276.8, 3276.7),
        digital: (-32768, 32767),
        samples: (0..per_record * records)
            .map(|i| (i as i32 * 37) % 20000 - 10000)
            .collect(),
    }
}

fn tal(onset: &str, texts: &[&str]) -> Vec<u8> {
    let mut b = onset.as_bytes().to_vec();
    b.push(0x14);
    for t in texts {
        b.extend_from_slice(t.as_bytes());
        b.push(0x14);
    }
    b.push(0);
    b
}

#[test]
fn edf_samples_in_physical_units_at_each_signals_rate() {
    let file = TestFile::edf(vec![ramp("ECG II", 250, 4), ramp("Resp", 25, 4)], 4);
    let r = decode_bytes(&file.bytes(), &["ECG II".into()]).unwrap();
    assert_eq!(r.rate, 250.0);
    assert_eq!(r.table.len(), 1000);
    let column = r.table.column::<f32>("ECG II").unwrap();
    for (i, (&got, &digital)) in column.iter().zip(&file.signals[0].samples).enumerate() {
        // (d − dmin) × (pmax − pmin)/(dmax − dmin) + pmin, the format's definition.
        let want = (f64::from(digital) + 32768.0) * (6553.5 / 65535.0) - 3276.8;
        assert!(
            (f64::from(got) - want).abs() < 1e-3,
            "sample {i}: {got} vs {want}"
        );
    }
    let resp = decode_bytes(&file.bytes(), &["resp".into()]).unwrap();
    assert_eq!((resp.rate, resp.table.len()), (25.0, 100));
    assert_eq!(r.header.start_time, Some(10 * 3600 + 30 * 60));
    assert_eq!(r.header.start_date, Some((2026, 11, 27)));
    assert_eq!(r.header.variant(), "EDF");
}

#[test]
fn bdf_reads_24_bit_samples_with_their_sign() {
    let mut file = TestFile::edf(
        vec![TestSignal {
            label: "EXG1",
            per_record: 4,
            physical: (-262144.0, 262143.0),
            digital: (-8388608, 8388607),
            samples: vec![-8388608, -1, 0, 8388607, 123456, -654321, 1, 2],
        }],
        2,
    );
    file.format = Format::Bdf;
    file.reserved = "24BIT";
    let r = decode_bytes(&file.bytes(), &[]).unwrap();
    let column = r.table.column::<f32>("EXG1").unwrap();
    let (gain, offset) = r.header.signals[0].scale();
    for (&got, &digital) in column.iter().zip(&file.signals[0].samples) {
        assert_eq!(got, (f64::from(digital) * gain + offset) as f32);
    }
    assert!(column[0] < -262143.0 && column[3] > 262142.0 && column[1] < 0.0);
    assert_eq!(r.at_limits, vec![2]);
    assert_eq!(r.header.variant(), "BDF");
}

#[test]
fn leads_by_label_index_and_their_errors() {
    let file = TestFile::edf(vec![ramp("ECG I", 100, 2), ramp("ECG II", 100, 2)], 2);
    let bytes = file.bytes();
    assert_eq!(
        decode_bytes(&bytes, &["1".into()]).unwrap().names,
        ["ECG II"]
    );
    assert_eq!(
        decode_bytes(&bytes, &[]).unwrap().names,
        ["ECG I", "ECG II"]
    );
    let err = decode_bytes(&bytes, &["V5".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"V5\"") && err.contains("\"ECG I\", \"ECG II\""),
        "{err}"
    );
    let err = decode_bytes(&bytes, &["ECG I".into(), "0".into()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("a second time"), "{err}");
    let mixed = TestFile::edf(vec![ramp("ECG", 200, 2), ramp("Pleth", 50, 2)], 2);
    let err = decode_bytes(&mixed.bytes(), &[]).unwrap_err().to_string();
    assert!(
        err.contains("\"ECG\" 200 Hz") && err.contains("\"Pleth\" 50 Hz"),
        "{err}"
    );
}

#[test]
fn edf_plus_annotations_and_beat_symbols() {
    let mut file = TestFile::edf(vec![ramp("ECG", 100, 3)], 3);
    file.reserved = "EDF+C";
    file.annotations = vec![
        [tal("+0.25", &[""]), tal("+0.5", &["N"])].concat(),
        [tal("+1.25", &[""]), tal("+1.3\u{15}2.5", &["V", "Arousal"])].concat(),
        tal("+2.25", &[""]),
    ];
    let r = decode_bytes(&file.bytes(), &[]).unwrap();
    assert_eq!(r.first_onset, 0.25);
    assert_eq!(r.names, ["ECG"], "the annotation signal is no lead");
    let texts: Vec<(f64, Option<f64>, &str)> = r
        .annotations
        .iter()
        .map(|a| (a.onset, a.duration, a.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            (0.5, None, "N"),
            (1.3, Some(2.5), "V"),
            (1.3, Some(2.5), "Arousal")
        ]
    );
    assert_eq!(r.sample_of(0.5), Some(25));
    assert_eq!(r.sample_of(100.0), None);
    assert_eq!(beat_symbol("V"), Some("V"));
    assert_eq!(beat_symbol(" N "), Some("N"));
    assert_eq!(beat_symbol("Arousal"), None);
    assert_eq!(beat_symbol("+"), None, "a rhythm change is no beat");
}

#[test]
fn edf_plus_d_gaps_read_as_nan_at_their_place() {
    let mut file = TestFile::edf(vec![ramp("ECG", 10, 3)], 3);
    file.reserved = "EDF+D";
    file.annotations = vec![tal("+0", &[""]), tal("+1", &[""]), tal("+4.5", &[""])];
    let r = decode_bytes(&file.bytes(), &[]).unwrap();
    assert_eq!(
        r.gaps,
        [Gap {
            sample: 20,
            samples: 25,
            onset: 2.0
        }]
    );
    let column = r.table.column::<f32>("ECG").unwrap();
    assert_eq!(column.len(), 55);
    assert!(column[20..45].iter().all(|v| v.is_nan()));
    assert!(column[..20]
        .iter()
        .chain(&column[45..])
        .all(|v| v.is_finite()));
    let (gain, offset) = r.header.signals[0].scale();
    assert_eq!(
        column[45],
        (f64::from(file.signals[0].samples[20]) * gain + offset) as f32
    );

    file.annotations[2] = tal("+4000", &[""]);
    let err = decode_bytes(&file.bytes(), &[]).unwrap_err().to_string();
    assert!(err.contains("more than 100 times"), "{err}");
    file.annotations[2] = tal("+1.5", &[""]);
    let err = decode_bytes(&file.bytes(), &[]).unwrap_err().to_string();
    assert!(
        err.contains("data record 2") && err.contains("overlap"),
        "{err}"
    );
    file.annotations[2] = tal("+3", &["no time kept here"]);
    file.annotations[2][0] = b'+';
    let err = decode_bytes(&file.bytes(), &[]).unwrap_err().to_string();
    assert!(err.contains("data record 2"), "{err}");
}

#[test]
fn a_file_cut_short_reads_its_whole_records_and_says_so() {
    let file = TestFile::edf(vec![ramp("ECG", 50, 4)], 4);
    let mut bytes = file.bytes();
    bytes.truncate(bytes.len() - 30);
    let r = decode_bytes(&bytes, &[]).unwrap();
    assert_eq!((r.records, r.truncated, r.table.len()), (3, Some(4), 150));
    let mut unknown = TestFile::edf(vec![ramp("ECG", 50, 4)], 4);
    unknown.declared_records = Some(-1);
    let r = decode_bytes(&unknown.bytes(), &[]).unwrap();
    assert_eq!((r.records, r.truncated), (4, None));
    let header_only = &file.bytes()[..512];
    let err = decode_bytes(header_only, &[]).unwrap_err().to_string();
    assert!(err.contains("no data record"), "{err}");
}

#[test]
fn header_errors_name_the_field() {
    let good = TestFile::edf(vec![ramp("ECG", 10, 1)], 1).bytes();
    let cases: Vec<(Breaker, &str)> = vec![
        (Box::new(|b| b[0] = b'1'), "not an EDF version"),
        (
            Box::new(|b| b[184..192].copy_from_slice(b"768     ")),
            "768 bytes",
        ),
        (
            Box::new(|b| b[244..252].copy_from_slice(b"0       ")),
            "duration 0",
        ),
        (
            Box::new(|b| b[244..252].copy_from_slice(b"abc     ")),
            "\"abc\"",
        ),
        (
            Box::new(|b| b[252..256].copy_from_slice(b"0   ")),
            "0 signals",
        ),
        // The signal's physical maximum (field 4) set to its minimum.
        (
            Box::new(|b| b[256 + 16 + 80 + 8 + 8..][..8].copy_from_slice(b"-3276.8 ")),
            "give no scale",
        ),
        // A physical maximum that scales the largest digital value past float32.
        (
            Box::new(|b| b[256 + 16 + 80 + 8 + 8..][..8].copy_from_slice(b"1e39    ")),
            "beyond float32's range",
        ),
        // Digital maximum below the minimum.
        (
            Box::new(|b| b[256 + 16 + 80 + 8 * 4..][..8].copy_from_slice(b"-40000  ")),
            "not a range",
        ),
        (Box::new(|b| b.truncate(300)), "inside the 512-byte header"),
    ];
    for (break_it, expected) in cases {
        let mut bytes = good.clone();
        break_it(&mut bytes);
        let err = decode_bytes(&bytes, &[]).unwrap_err().to_string();
        assert!(err.contains(expected), "{expected:?} not in {err}");
    }
    let mut plus = TestFile::edf(vec![ramp("ECG", 10, 1)], 1);
    plus.reserved = "EDF+C";
    let err = decode_bytes(&plus.bytes(), &[]).unwrap_err().to_string();
    assert!(
        err.contains("without a signal labelled \"EDF Annotations\""),
        "{err}"
    );
}

#[test]
fn start_dates_follow_the_edf_century_rule() {
    let mut file = TestFile::edf(vec![ramp("ECG", 10, 1)], 1);
    file.recording = "";
    file.start = ("02.03.99", "23.59.59");
    let h = decode_bytes(&file.bytes(), &[]).unwrap().header;
    assert_eq!(
        (h.start_date, h.start_time),
        (Some((1999, 3, 2)), Some(86399))
    );
    file.start = ("31.12.84", "24.00.00");
    let h = decode_bytes(&file.bytes(), &[]).unwrap().header;
    assert_eq!((h.start_date, h.start_time), (Some((2084, 12, 31)), None));
}

#[test]
fn many_records_across_parallel_chunks_keep_their_order() {
    // Records of 1000 samples × 3000: several chunks of CHUNK_BYTES.
    let records = 3000;
    let file = TestFile::edf(vec![ramp("ECG", 1000, records)], records as u64);
    let r = decode_bytes(&file.bytes(), &[]).unwrap();
    let column = r.table.column::<f32>("ECG").unwrap();
    let (gain, offset) = r.header.signals[0].scale();
    assert!(column
        .iter()
        .zip(&file.signals[0].samples)
        .all(|(&got, &d)| got == (f64::from(d) * gain + offset) as f32));
}

#[test]
fn tal_errors_name_the_record() {
    let mut out = Vec::new();
    for (bytes, expected) in [
        (&b"+1\x14\x14"[..], "closing 0 byte"),
        (b"+1\x14x\x00", "does not end with byte 0x14"),
        (b"1\x14\x14\x00", "signed number"),
        (b"+1e3\x14\x14\x00", "signed number"),
        (b"+1\x15x\x14\x14\x00", "duration"),
    ] {
        let err = parse_record(bytes, 7, &mut out).unwrap_err().to_string();
        assert!(
            err.contains("data record 7") && err.contains(expected),
            "{err}"
        );
    }
    assert_eq!(parse_record(&[0; 10], 0, &mut out).unwrap(), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// No byte changed anywhere in a valid file makes the reader panic.
    #[test]
    fn damaged_files_give_errors_not_panics(
        at in 0usize..900,
        value in any::<u8>(),
        cut in 0usize..1000,
    ) {
        let mut file = TestFile::edf(vec![ramp("ECG", 20, 3)], 3);
        file.reserved = "EDF+D";
        file.annotations = vec![tal("+0", &[""]), tal("+1", &["N"]), tal("+5", &[""])];
        let mut bytes = file.bytes();
        let at = at % bytes.len();
        bytes[at] = value;
        bytes.truncate(cut.max(1).min(bytes.len()));
        let _ = decode_bytes(&bytes, &[]);
    }
}
