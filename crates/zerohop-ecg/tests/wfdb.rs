//! The WFDB reader on the bundled MIT-BIH Arrhythmia Database record 100 (30 min, MLII and
//! V5 at 360 Hz, format 212), against an independent decoder of its bytes, the header's
//! checksums and the reference annotation counts.

use std::path::{Path, PathBuf};

use zerohop_ecg::wfdb::{
    is_beat, read_annotation_file, read_annotations, read_header, read_record,
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps/ecg/python/zerohop_ecg/data")
        .join(name)
}

/// Format 212 decoded the plain way: frame i's two samples from bytes 3i..3i+3.
fn reference_212(bytes: &[u8]) -> Vec<(i32, i32)> {
    bytes
        .chunks_exact(3)
        .map(|b| {
            let a = i32::from(b[0]) | (i32::from(b[1]) & 0x0f) << 8;
            let c = i32::from(b[2]) | (i32::from(b[1]) >> 4) << 8;
            let signed = |v: i32| if v >= 2048 { v - 4096 } else { v };
            (signed(a), signed(c))
        })
        .collect()
}

#[test]
fn record_100_header() {
    let h = read_header(&data("mitdb100.hea")).unwrap();
    assert_eq!(h.record, "mitdb100");
    assert_eq!((h.rate, h.samples), (360.0, Some(650_000)));
    assert_eq!(h.lead_names(), ["MLII", "V5"]);
    for s in &h.signals {
        assert_eq!((s.file.as_str(), s.format), ("mitdb100.dat", 212));
        assert_eq!((s.gain, s.baseline, s.units.as_str()), (200.0, 1024, "mV"));
        assert_eq!((s.adc_resolution, s.adc_zero), (11, 1024));
    }
    assert_eq!(h.signals[0].initial_value, 995);
    assert_eq!(h.signals[1].initial_value, 1011);
    assert_eq!(h.comments, ["69 M 1085 1629 x1", "Aldomet, Inderal"]);
}

#[test]
fn record_100_signals_match_an_independent_decoder_and_the_checksums() {
    let r = read_record(&data("mitdb100"), &[]).unwrap();
    assert_eq!(r.names, ["MLII", "V5"]);
    assert_eq!(r.table.len(), 650_000);
    // The header's 16-bit checksums of both signals hold: every sample decoded right.
    assert_eq!(r.checksums, [Some(true), Some(true)]);
    let mlii = r.table.column::<f32>("MLII").unwrap();
    let v5 = r.table.column::<f32>("V5").unwrap();
    let reference = reference_212(&std::fs::read(data("mitdb100.dat")).unwrap());
    assert_eq!(reference.len(), 650_000);
    // The first samples are the header's initial values.
    assert_eq!(reference[0], (995, 1011));
    assert_eq!((mlii[0], v5[0]), (-0.145, -0.065));
    for (i, &(a, b)) in reference.iter().enumerate() {
        let want = |v: i32| ((f64::from(v) - 1024.0) / 200.0) as f32;
        assert_eq!((mlii[i], v5[i]), (want(a), want(b)), "frame {i}");
    }
    // Record 100 has no invalid samples and stays within a few millivolts.
    assert!(mlii
        .iter()
        .chain(v5)
        .all(|v| v.is_finite() && v.abs() < 6.0));

    // One lead by name, by index, and the record named by its header file.
    let only = read_record(&data("mitdb100.hea"), &["V5".into()]).unwrap();
    assert_eq!(only.names, ["V5"]);
    assert_eq!(only.table.column::<f32>("V5").unwrap(), v5);
    let by_index = read_record(&data("mitdb100"), &["0".into()]).unwrap();
    assert_eq!(by_index.table.column::<f32>("MLII").unwrap(), mlii);
    let e = read_record(&data("mitdb100"), &["V1".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("MLII, V5"), "{e}");
}

#[test]
fn missing_files_are_io_errors_naming_the_path() {
    let e = read_record(&data("no-such-record"), &[]).unwrap_err();
    assert!(matches!(e, zerohop_ecg::EcgError::Io { .. }));
    assert!(e.to_string().contains("no-such-record.hea"), "{e}");
    let e = read_annotations(&data("no-such-record.atr")).unwrap_err();
    assert!(e.to_string().contains("no-such-record.atr"), "{e}");
}

/// Counts from WFDB's own `rdann -r 100 -a atr` (2274 lines: one rhythm label and 2273
/// beats: 2239 N, 33 A, 1 V; first beat at sample 77, last at 649991; the V, at 546792,
/// has subtype 1).
#[test]
fn record_100_annotations() {
    let file = read_annotation_file(&data("mitdb100.atr")).unwrap();
    assert_eq!(file.time_resolution, None);
    assert!(file.custom_symbols.is_empty());
    let a = file.annotations;
    assert_eq!(a.len(), 2274);
    assert_eq!(a.iter().filter(|a| is_beat(a.code)).count(), 2273);
    let count = |s: &str| a.iter().filter(|a| a.symbol == s).count();
    assert_eq!(
        (count("N"), count("A"), count("V"), count("+")),
        (2239, 33, 1, 1)
    );
    assert_eq!(
        (a[0].sample, &*a[0].symbol, a[0].aux.as_deref()),
        (18, "+", Some("(N"))
    );
    assert_eq!(
        (a[1].sample, &*a[1].symbol, a[1].aux.as_deref()),
        (77, "N", None)
    );
    assert_eq!((a[2].sample, a[3].sample), (370, 662));
    assert_eq!(a.last().unwrap().sample, 649_991);
    assert!(a.windows(2).all(|w| w[0].sample <= w[1].sample));
    assert!(a.iter().all(|a| a.chan == 0 && a.num == 0));
    // rdann lists one annotation with subtype 1 (a SUB escape in the file).
    let sub: Vec<(i64, &str, i8)> = a
        .iter()
        .filter(|a| a.subtype != 0)
        .map(|a| (a.sample, &*a.symbol, a.subtype))
        .collect();
    assert_eq!(sub, [(546_792, "V", 1)]);
}
