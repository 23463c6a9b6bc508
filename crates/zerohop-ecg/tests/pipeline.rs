//! The ECG pipeline's stages against naive references, the CSV reader's policies and errors,
//! detection accuracy on synthetic data, and the bundled real recording.

use std::path::{Path, PathBuf};

use zerohop_ecg::csv::{parse_csv, read_csv, CsvOptions, EmptyField, NanPolicy};
use zerohop_ecg::segment::{curvature, local_maxima, ricker, rising_edges, segment, Params};
use zerohop_ecg::synth::{generate, score, write_csv, SynthOptions};
use zerohop_ecg::EcgError;

fn parse(text: &str, options: &CsvOptions) -> Result<zerohop::soa::SoaTable, EcgError> {
    parse_csv(text.as_bytes(), Path::new("test.csv"), options)
}

#[test]
fn csv_header_columns_and_selection() {
    let t = parse(
        "time,mv,other\n0,1.5,9\n1,-2.25,9\r\n\n2,3e-1,9\n",
        &CsvOptions::default(),
    )
    .unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t.column::<f32>("mv").unwrap(), &[1.5, -2.25, 0.3]);
    assert_eq!(t.column::<f32>("time").unwrap(), &[0.0, 1.0, 2.0]);
    let only = CsvOptions {
        columns: vec!["mv".into()],
        ..Default::default()
    };
    let t = parse("time,mv\n0,1\n1,2\n", &only).unwrap();
    assert_eq!(t.schema().columns().len(), 1);
    assert_eq!(t.column::<f32>("mv").unwrap(), &[1.0, 2.0]);
    let headless = parse(
        "1;2\n3;4\n",
        &CsvOptions {
            delimiter: b';',
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(headless.column::<f32>("c1").unwrap(), &[2.0, 4.0]);
    let missing = headless.column::<f32>("mv").unwrap_err().to_string();
    assert!(missing.contains("no column"), "{missing}");
}

#[test]
fn csv_errors_name_line_and_column() {
    let err = parse("a,b\n1,2\n3,x\n", &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(err, "test.csv, line 3, column 2 (b): \"x\" is not a number");
    let err = parse("a,b\n1,2\n\n3\n", &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 4") && err.contains("expected 2 fields, found 1"),
        "{err}"
    );
    let err = parse("a,b\n1,\n", &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2, column 2 (b): empty field"), "{err}");
    let err = parse("a\nnan\n", &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not finite"), "{err}");
    assert!(parse(
        "a\nb\n",
        &CsvOptions {
            columns: vec!["z".into()],
            ..Default::default()
        }
    )
    .is_err());
    assert!(parse("", &CsvOptions::default()).is_err());
    assert!(
        read_csv(Path::new("/nonexistent/x.csv"), &CsvOptions::default())
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/x.csv")
    );
}

#[test]
fn csv_columns_selected_out_of_file_order_each_get_their_own_values() {
    // Found by the csv_reader fuzz target: with a selection not in file order, one column was
    // never written and the table exposed uninitialised memory.
    let options = |names: &[&str]| CsvOptions {
        has_header: Some(false),
        delimiter: b'|',
        columns: names.iter().map(|n| n.to_string()).collect(),
        nan: NanPolicy::Allow,
        ..Default::default()
    };
    let t = parse("5.|6.|-inf\n1|2|3\n", &options(&["c2", "c0"])).unwrap();
    assert_eq!(t.column::<f32>("c2").unwrap(), &[f32::NEG_INFINITY, 3.0]);
    assert_eq!(t.column::<f32>("c0").unwrap(), &[5.0, 1.0]);
    let names: Vec<&str> = t
        .schema()
        .columns()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["c2", "c0"],
        "the selection's order is the table's order"
    );
    let t = parse("1|2|3\n4|5|6\n", &options(&["c1", "c2", "c0"])).unwrap();
    assert_eq!(t.column::<f32>("c1").unwrap(), &[2.0, 5.0]);
    assert_eq!(t.column::<f32>("c2").unwrap(), &[3.0, 6.0]);
    assert_eq!(t.column::<f32>("c0").unwrap(), &[1.0, 4.0]);
}

#[test]
fn csv_empty_and_nan_policies() {
    let nan = CsvOptions {
        empty: EmptyField::Nan,
        nan: NanPolicy::Allow,
        ..Default::default()
    };
    let t = parse("a,b\n1,\nnan,2\n", &nan).unwrap();
    let a = t.column::<f32>("a").unwrap();
    assert!(a[1].is_nan());
    assert!(t.column::<f32>("b").unwrap()[0].is_nan());
    let fill = CsvOptions {
        empty: EmptyField::Value(-1.0),
        ..Default::default()
    };
    let wide = CsvOptions {
        has_header: Some(true),
        ..fill.clone()
    };
    let err = parse(
        "a

,
", &wide,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("expected 1 fields"), "{err}");
    assert_eq!(
        parse("a\n 1 \n", &fill)
            .unwrap()
            .column::<f32>("a")
            .unwrap(),
        &[1.0]
    );
}

#[test]
fn csv_large_input_splits_across_chunks_in_order() {
    let mut text = String::from("mv\n");
    for i in 0..300_000 {
        text.push_str(&format!("{}\n", i as f32 * 0.5));
    }
    let t = parse(&text, &CsvOptions::default()).unwrap();
    let mv = t.column::<f32>("mv").unwrap();
    assert_eq!(mv.len(), 300_000);
    assert!(mv.iter().enumerate().all(|(i, &v)| v == i as f32 * 0.5));
    assert_eq!(mv.as_ptr() as usize % 128, 0);
    let mut broken = text.clone();
    broken.push_str("oops\n");
    let err = parse(&broken, &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 300002"), "{err}");
}

#[test]
fn curvature_equals_a_naive_circular_convolution() {
    let signal: Vec<f32> = (0..5000)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let kernel = ricker(43);
    let mut fast = vec![0f32; signal.len()];
    curvature(&signal, &kernel, &mut fast);
    let n = signal.len() as isize;
    for i in 0..signal.len() {
        let naive: f64 = kernel
            .iter()
            .enumerate()
            .map(|(j, &k)| {
                k as f64 * signal[(i as isize - j as isize).rem_euclid(n) as usize] as f64
            })
            .sum();
        assert!(
            (fast[i] as f64 - naive).abs() < 1e-4,
            "sample {i}: {} vs {naive}",
            fast[i]
        );
    }
}

#[test]
fn gates_equal_a_naive_window_scan_and_keep_rising_edges() {
    let curv: Vec<f32> = (0..20_000)
        .map(|i| (((i * 2654435761u64 as usize) >> 7) % 97) as f32)
        .collect();
    let window = 31;
    let mut gates = vec![0u8; curv.len() - window + 1];
    local_maxima(&curv, window, &mut gates);
    for (p, &g) in gates.iter().enumerate() {
        let max = curv[p..p + window].iter().cloned().fold(f32::MIN, f32::max);
        assert_eq!(g, u8::from(max == curv[p + 16]), "position {p}");
    }
    let mut edges = vec![0, 1, 1, 0, 1, 0, 0, 1, 1, 1];
    rising_edges(&mut edges);
    assert_eq!(edges, vec![0, 1, 0, 0, 1, 0, 0, 1, 0, 0]);
}

#[test]
fn params_scale_with_the_sampling_rate() {
    let p = Params::for_rate(250.0).unwrap();
    assert_eq!(
        (
            p.ricker_width,
            p.window,
            p.min_length,
            p.max_length,
            p.width
        ),
        (30, 180, 100, 256, 256)
    );
    let p = Params::for_rate(360.0).unwrap();
    assert_eq!(
        (
            p.ricker_width,
            p.window,
            p.min_length,
            p.max_length,
            p.width
        ),
        (43, 259, 144, 369, 512)
    );
    assert!(Params::for_rate(0.0).is_err());
    assert!(Params::for_rate(f64::NAN).is_err());
}

fn detected_peaks(seg: &zerohop_ecg::Segmentation) -> Vec<f64> {
    let offset = seg.params.gate_to_peak();
    seg.gates
        .as_slice::<i64>()
        .unwrap()
        .iter()
        .map(|&g| g as f64 + offset)
        .collect()
}

#[test]
fn detection_is_at_least_99_percent_sensitive_and_precise_on_synthetic_ecg() {
    for (seed, rate, ectopic) in [(1, 250.0, 0.0), (2, 360.0, 0.0), (3, 250.0, 0.05)] {
        let options = SynthOptions {
            rate,
            seconds: 300.0,
            seed,
            ectopic,
            ..Default::default()
        };
        let synthetic = generate(&options).unwrap();
        let params = Params::for_rate(rate).unwrap();
        let seg = segment(&synthetic.signal, &params).unwrap();
        let accuracy = score(
            &detected_peaks(&seg),
            &synthetic.r_peaks,
            0.05 * rate,
            rate as usize,
            synthetic.signal.len(),
        );
        assert!(
            accuracy.sensitivity() >= 0.99 && accuracy.positive_predictive_value() >= 0.99,
            "seed {seed} at {rate} Hz, ectopic {ectopic}: {accuracy:?}"
        );
        let beats = seg.beats.shape();
        assert_eq!(beats[1] as usize, params.width);
        assert!(beats[0] as usize >= synthetic.r_peaks.len() * 9 / 10);
    }
}

#[test]
fn beats_are_left_aligned_and_zero_padded() {
    let synthetic = generate(&SynthOptions {
        seconds: 30.0,
        ..Default::default()
    })
    .unwrap();
    let params = Params::for_rate(250.0).unwrap();
    let seg = segment(&synthetic.signal, &params).unwrap();
    let beats = seg.beats.as_slice::<f32>().unwrap();
    let starts = seg.beat_starts.as_slice::<i64>().unwrap();
    let lengths = seg.beat_lengths.as_slice::<i64>().unwrap();
    for (k, (&s, &l)) in starts.iter().zip(lengths).enumerate() {
        let row = &beats[k * params.width..(k + 1) * params.width];
        assert_eq!(
            &row[..l as usize],
            &synthetic.signal[s as usize..(s + l) as usize]
        );
        assert!(row[l as usize..].iter().all(|&v| v == 0.0));
        assert!((params.min_length as i64..=params.max_length as i64).contains(&l));
    }
    assert!(segment(&synthetic.signal[..10], &params).is_err());
}

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps/ecg/python/zerohop_ecg")
        .join(relative)
}

#[test]
fn the_bundled_record_208_segments_like_the_reference_reimplementation() {
    let raw = std::fs::read(repo_file("data/mitdb208_excerpt_360hz.u16le")).unwrap();
    let mv: Vec<f32> = raw
        .chunks_exact(2)
        .map(|c| (u16::from_le_bytes([c[0], c[1]]) as f32 - 1024.0) / 200.0)
        .collect();
    assert_eq!(mv.len(), 108_000);
    let seg = segment(&mv, &Params::for_rate(360.0).unwrap()).unwrap();
    let gates = seg.gates.as_slice::<i64>().unwrap();
    // A NumPy re-implementation of the blog's steps (FFT curvature) found 504 gates starting
    // 15, 233, 442, 639, 834, 1020, 1207, 1391, 1581, 1770 and kept 499 segments.
    assert_eq!(
        &gates[..10],
        &[15, 233, 442, 639, 834, 1020, 1207, 1391, 1581, 1770]
    );
    assert!((502..=506).contains(&gates.len()), "{} gates", gates.len());
    assert!(
        (497..=501).contains(&seg.beats.shape()[0]),
        "{} beats",
        seg.beats.shape()[0]
    );
}

#[test]
fn synthetic_csv_round_trips_through_the_reader() {
    let dir = std::env::temp_dir().join(format!("zerohop-ecg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let synthetic = generate(&SynthOptions {
        seconds: 20.0,
        ..Default::default()
    })
    .unwrap();
    let (csv, peaks) = (dir.join("ecg.csv"), dir.join("peaks.csv"));
    write_csv(&synthetic, &csv, Some(&peaks)).unwrap();
    let table = read_csv(&csv, &CsvOptions::default()).unwrap();
    let mv = table.column::<f32>("mv").unwrap();
    assert_eq!(mv.len(), synthetic.signal.len());
    assert!(mv
        .iter()
        .zip(&synthetic.signal)
        .all(|(a, b)| (a - b).abs() < 1e-4));
    let p = read_csv(&peaks, &CsvOptions::default()).unwrap();
    assert_eq!(p.len(), synthetic.r_peaks.len());
    std::fs::remove_dir_all(&dir).ok();
}

mod single_column {
    use super::*;
    use proptest::prelude::*;

    /// Lines a single-column CSV may hold: plain decimals (the one-pass path), and everything
    /// that must fall back to the general parser.
    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (-99999i32..99999, 0u32..10_000).prop_map(|(a, b)| format!("{a}.{b}")),
            1 => Just(String::new()),
            1 => Just("   ".to_string()),
            1 => (-1000i32..1000).prop_map(|v| format!("{v}\r")),
            1 => (-1000i32..1000).prop_map(|v| format!(" {v} ")),
            1 => (-9i32..9).prop_map(|v| format!("{v}e-2")),
            1 => Just("1234567890".to_string()),
            1 => Just("+7".to_string()),
        ]
    }

    /// What every non-blank line should parse to.
    fn expected(lines: &[String]) -> Vec<f32> {
        lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(|l| l.parse::<f32>().unwrap())
            .collect()
    }

    proptest! {
        #[test]
        fn the_one_pass_reader_agrees_with_str_parse(lines in proptest::collection::vec(line(), 1..400)) {
            let text = format!("mv\n{}\n", lines.join("\n"));
            let table = parse(&text, &CsvOptions::default()).unwrap();
            prop_assert_eq!(table.column::<f32>("mv").unwrap(), &expected(&lines)[..]);
        }
    }

    #[test]
    fn errors_in_single_column_files_name_their_line() {
        let err = parse("mv\n1.5\n\n2.5\nx\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "test.csv, line 5, column 1 (mv): \"x\" is not a number"
        );
        let err = parse("mv\n1.5\n2,3\n", &CsvOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 3") && err.contains("expected 1 fields, found 2"),
            "{err}"
        );
    }
}
