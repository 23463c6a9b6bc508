use super::*;
use crate::segment::Params;
use crate::synth::{generate, SynthOptions};

/// Reproducible standard normal samples (xorshift64* and Box–Muller).
fn normal(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (uniform().max(1e-300), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn peaks_of(signal: &[f32], rate: f64) -> Vec<i64> {
    let seg = crate::segment_with(
        signal,
        &Params::for_rate(rate).unwrap(),
        crate::Method::Adaptive,
    )
    .unwrap();
    seg.r_peaks.to_vec::<i64>().unwrap()
}

fn judged(signal: &[f32], rate: f64) -> Assessment {
    assess(signal, rate, &peaks_of(signal, rate), WINDOW_S).unwrap()
}

fn synthetic(seconds: f64, rate: f64, heart_rate: f64, seed: u64) -> Vec<f32> {
    generate(&SynthOptions {
        rate,
        seconds,
        heart_rate,
        ectopic: 0.1,
        noise_mv: 0.05,
        seed,
        ..Default::default()
    })
    .unwrap()
    .signal
}

fn count(a: &Assessment, q: Quality) -> usize {
    a.codes.iter().filter(|&&c| c == q).count()
}

#[test]
fn record_100_is_good_throughout() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps/ecg/python/zerohop_ecg/data/mitdb100");
    let record = crate::wfdb::read_record(&path, &[]).unwrap();
    for lead in ["MLII", "V5"] {
        let signal = record.table.column::<f32>(lead).unwrap();
        let a = judged(signal, 360.0);
        assert_eq!(a.codes.len(), 180);
        assert_eq!(count(&a, Quality::Good), 180, "{lead}: {:?}", a.stats);
    }
}

#[test]
fn clean_synthetic_ecg_is_good_at_every_rate() {
    for rate in [250.0, 360.0, 1000.0] {
        for bpm in [30.0, 70.0, 150.0, 240.0] {
            let signal = synthetic(120.0, rate, bpm, bpm as u64);
            let a = judged(&signal, rate);
            assert!(
                a.codes.iter().all(|c| c.is_reliable()),
                "{rate} Hz, {bpm} bpm: {:?} {:?}",
                a.codes,
                a.stats
            );
        }
    }
}

#[test]
fn noise_has_no_qrs_like_energy() {
    let rate = 360.0;
    let white = normal(120 * 360, 3);
    // Band-limited: white noise through the detector's own QRS band-pass.
    let mut band = vec![0f32; white.len()];
    crate::segment::curvature(&white, &crate::segment::ricker(43), &mut band);
    let uniform: Vec<f32> = white.iter().map(|v| v.fract()).collect();
    for (name, signal) in [("white", white), ("band", band), ("uniform", uniform)] {
        let a = judged(&signal, rate);
        assert_eq!(
            count(&a, Quality::NoQrs),
            a.codes.len(),
            "{name}: {:?}",
            a.stats
        );
    }
}

#[test]
fn slow_waves_spiky_in_the_band_have_no_qrs_like_energy() {
    // 160 ms wide bumps every 1.5 s: as spiky in the band as a fast ECG, far too slow
    // for a QRS complex. The band's mean frequency decides.
    let rate = 250.0;
    let noise = normal(120 * 250, 5);
    let signal: Vec<f32> = (0..noise.len())
        .map(|i| {
            let t = i as f64 / rate;
            let phase = (t - 1.0)
                .rem_euclid(1.5)
                .min(1.5 - (t - 1.0).rem_euclid(1.5));
            ((-phase * phase / (2.0 * 0.08 * 0.08)).exp() as f32) + 0.002 * noise[i]
        })
        .collect();
    let a = judged(&signal, rate);
    assert_eq!(count(&a, Quality::NoQrs), a.codes.len(), "{:?}", a.stats);
    let spiky = a
        .stats
        .iter()
        .filter(|s| f64::from(s.kurtosis) >= KURTOSIS_MIN);
    assert!(spiky.count() > a.codes.len() / 2, "{:?}", a.stats);
    assert!(a
        .stats
        .iter()
        .all(|s| f64::from(s.band) < BAND_FREQUENCY_MIN));
}

#[test]
fn a_flat_stretch_is_flat_to_within_a_window() {
    let rate = 250.0;
    let mut signal = synthetic(1200.0, rate, 70.0, 9);
    let (from, to) = (400 * 250, 700 * 250);
    signal[from..to].fill(0.3);
    let a = judged(&signal, rate);
    let spans = a.unreliable_spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let Span { start, end, reason } = spans[0];
    assert_eq!(reason, Quality::Flat);
    assert!(start.abs_diff(from) <= a.window && end.abs_diff(to) <= a.window);
    // Flat with a trace of converter noise is flat too.
    for (v, n) in signal[from..to].iter_mut().zip(normal(to - from, 2)) {
        *v = 0.3 + 0.002 * n.round();
    }
    let noisy_flat = judged(&signal, rate);
    assert_eq!(
        noisy_flat.unreliable_spans()[0].reason,
        Quality::Flat,
        "{:?}",
        noisy_flat.stats
    );
}

#[test]
fn clipping_at_the_rail_is_clipped() {
    let rate = 360.0;
    let signal: Vec<f32> = synthetic(60.0, rate, 70.0, 4)
        .into_iter()
        .map(|v| v.min(0.9))
        .collect();
    let a = judged(&signal, rate);
    assert_eq!(count(&a, Quality::Clipped), a.codes.len(), "{:?}", a.stats);
}

#[test]
fn ecg_with_noise_at_6_to_12_db_stays_good() {
    let rate = 360.0;
    let clean = generate(&SynthOptions {
        rate,
        seconds: 120.0,
        noise_mv: 0.0,
        wander_mv: 0.0,
        seed: 3,
        ..Default::default()
    })
    .unwrap()
    .signal;
    let (low, high) = extremes(&clean).unwrap();
    let power = f64::from(high - low).powi(2) / 8.0;
    for snr in [6.0, 12.0] {
        let sd = (power / 10f64.powf(snr / 10.0)).sqrt() as f32;
        let noisy: Vec<f32> = clean
            .iter()
            .zip(normal(clean.len(), 7))
            .map(|(&s, n)| s + sd * n)
            .collect();
        let a = judged(&noisy, rate);
        assert_eq!(
            count(&a, Quality::Good),
            a.codes.len(),
            "{snr} dB: {:?}",
            a.stats
        );
    }
}

#[test]
fn beats_that_disagree_are_too_noisy() {
    // Spikes at random heights and shapes: QRS-like energy, but no two alike.
    let rate = 250.0;
    let noise = normal(60 * 250, 11);
    let mut signal: Vec<f32> = noise.iter().map(|v| 0.01 * v).collect();
    let mut peaks = Vec::new();
    for (k, p) in (100..signal.len() - 100).step_by(200).enumerate() {
        for t in 0..20 {
            signal[p - 10 + t] += noise[(k * 37 + t * 13) % noise.len()];
        }
        peaks.push(p as i64);
    }
    let a = assess(&signal, rate, &peaks, WINDOW_S).unwrap();
    assert_eq!(count(&a, Quality::Noisy), a.codes.len(), "{:?}", a.stats);
}

#[test]
fn a_last_short_window_joins_the_one_before() {
    let rate = 250.0;
    let signal = synthetic(35.0, rate, 70.0, 5);
    let a = judged(&signal, rate);
    assert_eq!(a.codes.len(), 3);
    assert_eq!(a.window_span(2), (5000, 8750));
    assert_eq!(a.window_of(8749), 2);
    // Shorter than a window: one window of it all.
    let short = judged(&signal[..1000], rate);
    assert_eq!((short.codes.len(), short.window_span(0)), (1, (0, 1000)));
}

#[test]
fn beats_and_spans_follow_their_windows() {
    let a = Assessment {
        rate: 100.0,
        len: 5500,
        window: 1000,
        codes: vec![
            Quality::Good,
            Quality::Flat,
            Quality::NoQrs,
            Quality::Flat,
            Quality::Good,
        ],
        stats: Vec::new(),
    };
    assert_eq!(
        a.reliable_beats(&[0, 999, 1000, 3999, 4000, 5499]).unwrap(),
        [true, true, false, false, true, true]
    );
    assert!(a
        .reliable_beats(&[5500])
        .unwrap_err()
        .to_string()
        .contains("5500"));
    assert!(a.reliable_beats(&[-1]).is_err());
    assert_eq!(
        a.unreliable_spans(),
        [Span {
            start: 1000,
            end: 4000,
            reason: Quality::Flat
        }]
    );
    assert_eq!(a.samples_of(Quality::Good), 2500);
    assert!((a.reliable_fraction() - 2500.0 / 5500.0).abs() < 1e-12);
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let signal = vec![0.5f32; 5000];
    let refused = |s: &[f32], rate: f64, peaks: &[i64], window: f64| {
        assess(s, rate, peaks, window).unwrap_err().to_string()
    };
    assert!(refused(&[], 250.0, &[], 10.0).contains("no samples"));
    assert!(refused(&signal, 250.0, &[], 1.0).contains("quality window"));
    assert!(refused(&signal, 250.0, &[], f64::NAN).contains("quality window"));
    assert!(refused(&signal, 1.0, &[], 10.0).contains("sampling rate"));
    assert!(refused(&signal, 250.0, &[10, 5000], 10.0).contains("entry 1 is sample 5000"));
    assert!(refused(&signal, 250.0, &[-3], 10.0).contains("r_peaks"));
    assert!(refused(&signal, 250.0, &[20, 10], 10.0).contains("ascending"));
    let mut nan = signal.clone();
    nan[7] = f32::NAN;
    assert!(refused(&nan, 250.0, &[], 10.0).contains("first at sample 7"));
    // A constant signal is flat, not an error.
    let a = assess(&signal, 250.0, &[], 10.0).unwrap();
    assert!(a.codes.iter().all(|&c| c == Quality::Flat));
    // The largest finite samples are judged without overflow.
    let huge: Vec<f32> = (0..5000)
        .map(|i| if i % 2 == 0 { f32::MAX } else { -f32::MAX })
        .collect();
    assert_eq!(assess(&huge, 250.0, &[], 10.0).unwrap().codes.len(), 2);
}

/// Codes and every figure, bit for bit (NaN figures included).
fn same_verdicts(a: &Assessment, b: &Assessment) -> bool {
    let bits =
        |s: &WindowStats| [s.range, s.clipped, s.kurtosis, s.band, s.correlation].map(f32::to_bits);
    a.codes == b.codes
        && a.stats.len() == b.stats.len()
        && a.stats
            .iter()
            .zip(&b.stats)
            .all(|(x, y)| bits(x) == bits(y) && x.beats == y.beats)
}

#[test]
fn detection_and_quality_in_one_go_equal_the_two_calls() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps/ecg/python/zerohop_ecg/data/mitdb100");
    let record = crate::wfdb::read_record(&path, &[]).unwrap();
    let mut cases: Vec<(Vec<f32>, f64)> =
        vec![(record.table.column::<f32>("MLII").unwrap().to_vec(), 360.0)];
    // Blocks of 1, 2, 4 and 8 samples, and a stretch of flat, clipped and noisy signal.
    for rate in [100.0, 250.0, 500.0, 1000.0] {
        cases.push((synthetic(95.0, rate, 70.0, 3), rate));
    }
    let mut mixed = synthetic(60.0, 250.0, 80.0, 4);
    mixed[2500..5000].fill(0.3);
    let top = mixed[5000..7500].iter().fold(f32::MIN, |m, &v| m.max(v));
    mixed[5000..7500]
        .iter_mut()
        .for_each(|v| *v = v.min(0.6 * top));
    for (v, n) in mixed[10_000..12_500].iter_mut().zip(normal(2500, 5)) {
        *v += n;
    }
    cases.push((mixed, 250.0));
    for (signal, rate) in &cases {
        let params = Params::for_rate(*rate).unwrap();
        let one_go = segment_judged(signal, &params, crate::Method::Adaptive, WINDOW_S).unwrap();
        let peaks = peaks_of(signal, *rate);
        assert_eq!(one_go.segmentation.r_peaks.to_vec::<i64>().unwrap(), peaks);
        let apart = assess(signal, *rate, &peaks, WINDOW_S).unwrap();
        assert!(same_verdicts(&one_go.assessment, &apart), "{rate} Hz");
        assert!(one_go.seconds > 0.0);
        // Past the length judged beside the detection: judged after it, in one pass.
        let after = judged_with(signal, &params, crate::Method::Adaptive, WINDOW_S, 1000).unwrap();
        assert_eq!(after.segmentation.r_peaks.to_vec::<i64>().unwrap(), peaks);
        assert!(same_verdicts(&after.assessment, &apart), "{rate} Hz, after");
    }
    // The blog's detector gives its peaks after its whole detection: the same verdicts.
    let (signal, rate) = &cases[0];
    let params = Params::for_rate(*rate).unwrap();
    let blog = segment_judged(signal, &params, crate::Method::Blog, WINDOW_S).unwrap();
    let peaks = blog.segmentation.r_peaks.to_vec::<i64>().unwrap();
    assert!(peaks.len() > 2000, "{}", peaks.len());
    let apart = assess(signal, *rate, &peaks, WINDOW_S).unwrap();
    assert!(
        same_verdicts(&blog.assessment, &apart),
        "the blog's detector"
    );
    // The mixed record's windows read as they were made.
    let codes = &judged(&cases[5].0, 250.0).codes;
    assert_eq!(codes[1], Quality::Flat, "{codes:?}");
    assert_eq!(codes[2], Quality::Clipped, "{codes:?}");
    assert_ne!(codes[4], Quality::Good, "{codes:?}");
    // A bad sample is refused by place, as the detector names it.
    let mut nan = cases[1].0.clone();
    nan[7] = f32::NAN;
    let params = Params::for_rate(100.0).unwrap();
    let err = segment_judged(&nan, &params, crate::Method::Adaptive, WINDOW_S)
        .err()
        .unwrap();
    assert!(err.to_string().contains("first at sample 7"), "{err}");
}

#[test]
fn a_stretch_of_whole_blocks_averages_as_the_whole_does() {
    // Beats' rows are averaged from their own stretch of the signal; they must equal the
    // band's averages of the same blocks, an odd tail included.
    let x = normal(1001, 9);
    for block in [1usize, 2, 4, 8] {
        let mut whole = Vec::new();
        block_averages(&x, (-0.5, 0.7), block, &mut whole);
        assert_eq!(whole.len(), x.len().div_ceil(block));
        let mut part = Vec::new();
        for first in [0, 3, 17] {
            for last in [first + 1, first + 9, whole.len()] {
                let stretch = &x[first * block..x.len().min(last * block)];
                block_averages(stretch, (-0.5, 0.7), block, &mut part);
                let want: Vec<u32> = whole[first..last].iter().map(|v| v.to_bits()).collect();
                let got: Vec<u32> = part.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "block {block}, blocks {first}..{last}");
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn any_finite_input_gets_a_verdict_per_window(
        values in proptest::collection::vec(-1e6f32..1e6, 1..4000),
        rate in 50.0f64..2000.0,
        step in 1usize..500,
    ) {
        let peaks: Vec<i64> = (0..values.len() as i64).step_by(step).collect();
        let a = assess(&values, rate, &peaks, WINDOW_S).unwrap();
        let windows = (values.len() / a.window).max(1);
        proptest::prop_assert_eq!(a.codes.len(), windows);
        proptest::prop_assert_eq!(a.reliable_beats(&peaks).unwrap().len(), peaks.len());
        let spans = a.unreliable_spans();
        proptest::prop_assert!(spans.iter().all(|s| s.start < s.end && s.end <= values.len()));
    }
}
