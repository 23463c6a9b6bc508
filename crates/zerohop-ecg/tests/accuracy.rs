//! Detection accuracy of the adaptive method on synthetic sweeps, scored AAMI EC57-style
//! (±150 ms, one-to-one, the first and last 5 s not scored): every rate from 30 to 240 bpm in
//! steps of 10, 10 minutes each at 360 Hz, with 10 % ectopic beats, baseline wander and
//! 0.05 mV noise. Goal: sensitivity and positive predictivity ≥ 99.5 % at every rate, and
//! ≥ 99 % of detected beats embedded as rows.

use zerohop_ecg::synth::{generate, score, SynthOptions};
use zerohop_ecg::{segment_with, Method, Params};

const RATE: f64 = 360.0;

#[test]
fn the_adaptive_method_holds_from_30_to_240_bpm() {
    let mut failures = Vec::new();
    for bpm in (30..=240).step_by(10) {
        let synth = generate(&SynthOptions {
            rate: RATE,
            seconds: 600.0,
            heart_rate: f64::from(bpm),
            ectopic: 0.1,
            noise_mv: 0.05,
            wander_mv: 0.1,
            seed: u64::from(bpm as u32),
            ..Default::default()
        })
        .unwrap();
        let params = Params::for_rate(RATE).unwrap();
        let seg = segment_with(&synth.signal, &params, Method::Adaptive).unwrap();
        let peaks: Vec<f64> = seg
            .r_peaks
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&r| r as f64)
            .collect();
        let acc = score(
            &peaks,
            &synth.r_peaks,
            0.15 * RATE,
            (5.0 * RATE) as usize,
            synth.signal.len(),
        );
        let rows = seg.beats.shape()[0] as f64;
        let embedded = rows / peaks.len() as f64;
        let (se, ppv) = (acc.sensitivity(), acc.positive_predictive_value());
        println!("{bpm:3} bpm: Se {se:.4} +P {ppv:.4} embedded {embedded:.4}");
        if se < 0.995 || ppv < 0.995 || embedded < 0.99 {
            failures.push(format!("{bpm} bpm: {acc:?}, embedded {embedded:.4}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
