//! Time columns: clock-formatted times (`0:00.003`), recognising a column that is a time
//! axis rather than a signal, and the sampling rate that axis implies.

/// How many leading values decide whether a column is a time axis: enough to see a steady
/// step, few enough to cost nothing next to reading the file.
const TIME_AXIS_WINDOW: usize = 1000;

/// Whether a units-row entry names a clock format (`hh:mm:ss.mmm`, `mm:ss`), whose values are
/// written as clock times and read as seconds.
pub(super) fn is_clock_unit(unit: &str) -> bool {
    let unit = unit.to_ascii_lowercase();
    unit.contains("hh:mm") || unit.contains("mm:ss")
}

/// A clock time `[h:]m:ss[.fff]` in seconds; None unless it is exactly that form (minutes and
/// seconds after the first part below 60).
pub(super) fn parse_clock(text: &str) -> Option<f64> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let (last, leading) = parts.split_last()?;
    let whole = |p: &str| {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<f64>().ok())
            .flatten()
    };
    let (int, frac) = last.split_once('.').unwrap_or((last, ""));
    whole(int)?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: f64 = last.parse().ok()?;
    let mut total = 0.0;
    for (i, part) in leading.iter().enumerate() {
        let value = whole(part)?;
        if i > 0 && value >= 60.0 {
            return None;
        }
        total = total * 60.0 + value;
    }
    (seconds < 60.0).then_some(total * 60.0 + seconds)
}

/// Whether `values` look like a time axis (elapsed seconds, milliseconds, sample numbers)
/// rather than a signal: over the first 1000 values, strictly increasing with steps within
/// half of the median step. The tolerance is that wide because exported times are rounded:
/// 360 Hz written to the millisecond steps by 3, 3, 2, 3, … ms; a signal is never strictly
/// increasing for that long, so the wide tolerance does not let one pass.
pub fn is_time_axis(values: &[f32]) -> bool {
    let window = &values[..values.len().min(TIME_AXIS_WINDOW)];
    if window.len() < 3 {
        return false;
    }
    let steps: Vec<f64> = window
        .windows(2)
        .map(|w| f64::from(w[1]) - f64::from(w[0]))
        .collect();
    // `s > 0.0` is false for NaN, so non-finite values fail here too.
    if !steps.iter().all(|&s| s > 0.0 && s.is_finite()) {
        return false;
    }
    let mut sorted = steps.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    steps.iter().all(|&s| (s - median).abs() <= 0.5 * median)
}

/// How many seconds one unit of a time column is, from its units-row entry; None for a unit
/// that is not time (samples, mV, …).
fn seconds_per_unit(unit: &str) -> Option<f64> {
    let unit = unit.trim().to_ascii_lowercase();
    if is_clock_unit(&unit) {
        return Some(1.0);
    }
    match unit.as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => Some(1.0),
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => Some(1e-3),
        "us" | "µs" | "usec" | "microsecond" | "microseconds" => Some(1e-6),
        _ => None,
    }
}

/// The sampling rate in Hz that a time column implies, or None when it is not a time axis
/// (see [`is_time_axis`]) or its unit is unknown. `unit` is the column's units-row entry:
/// seconds (`s`, `seconds`, a clock format such as `hh:mm:ss.mmm`), milliseconds (`ms`) or
/// microseconds (`us`); without one, values with a fractional step between 10 µs and 0.1 s
/// are taken as seconds, and anything else (sample numbers, unlabelled milliseconds) gives
/// None rather than a guess.
///
/// The step is the mean over the first 1000 values, (last − first) / (count − 1), not the
/// median: rounded timestamps make single steps wrong by up to a unit of the last digit,
/// while the span is off by at most one unit over the whole window. A rate within 0.1 % of
/// a whole number of Hz (0.05 %) is returned as that number.
pub fn time_axis_rate(values: &[f32], unit: Option<&str>) -> Option<f64> {
    if !is_time_axis(values) {
        return None;
    }
    let window = &values[..values.len().min(TIME_AXIS_WINDOW)];
    let step =
        (f64::from(window[window.len() - 1]) - f64::from(window[0])) / (window.len() - 1) as f64;
    let seconds = match unit.map(str::trim).filter(|u| !u.is_empty()) {
        Some(unit) => step * seconds_per_unit(unit)?,
        None if (1e-5..0.1).contains(&step) => step,
        None => return None,
    };
    let rate = 1.0 / seconds;
    let whole = rate.round();
    Some(if (rate - whole).abs() <= 5e-4 * rate {
        whole
    } else {
        rate
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times_read_as_seconds() {
        assert_eq!(parse_clock("0:00.003"), Some(0.003));
        assert_eq!(parse_clock("1:02.5"), Some(62.5));
        assert_eq!(parse_clock("1:00:01"), Some(3601.0));
        let late = parse_clock("25:59:59.999").unwrap();
        assert!(
            (late - (25.0 * 3600.0 + 59.0 * 60.0 + 59.999)).abs() < 1e-9,
            "{late}"
        );
        for text in [
            "", "1", "1.5", "0:60", "1:60:00", "a:00", ":00", "0:", "0:00.x", "1:2:3:4", "-1:00",
        ] {
            assert_eq!(parse_clock(text), None, "{text}");
        }
        assert!(is_clock_unit("hh:mm:ss.mmm") && is_clock_unit("MM:SS"));
        assert!(!is_clock_unit("seconds"));
    }

    #[test]
    fn time_axes_and_signals() {
        let seconds: Vec<f32> = (0..5000).map(|i| i as f32 / 360.0).collect();
        assert!(is_time_axis(&seconds));
        // Rounded to the millisecond: steps of 2 and 3 ms.
        let rounded: Vec<f32> = (0..5000)
            .map(|i| ((i as f64 / 360.0 * 1000.0).round() / 1000.0) as f32)
            .collect();
        assert!(is_time_axis(&rounded));
        let samples: Vec<f32> = (100..2000).map(|i| i as f32).collect();
        assert!(is_time_axis(&samples));
        let signal: Vec<f32> = (0..5000).map(|i| (i as f32 * 0.05).sin()).collect();
        assert!(!is_time_axis(&signal));
        assert!(!is_time_axis(&[0.0, 1.0]));
        assert!(!is_time_axis(&[0.0, 1.0, 1.0, 2.0]));
        assert!(!is_time_axis(&[0.0, 1.0, f32::NAN, 3.0]));
        // A gap (a missing stretch) is not a steady step.
        assert!(!is_time_axis(&[0.0, 1.0, 2.0, 10.0, 11.0]));
        // Only the first 1000 values count.
        let mut late = seconds.clone();
        late[3000] = -1.0;
        assert!(is_time_axis(&late));
    }

    #[test]
    fn rates_from_time_columns() {
        let rounded: Vec<f32> = (0..5000)
            .map(|i| ((i as f64 / 360.0 * 1000.0).round() / 1000.0) as f32)
            .collect();
        assert_eq!(time_axis_rate(&rounded, Some("seconds")), Some(360.0));
        assert_eq!(time_axis_rate(&rounded, Some("hh:mm:ss.mmm")), Some(360.0));
        assert_eq!(time_axis_rate(&rounded, None), Some(360.0));
        let ms: Vec<f32> = (0..3000).map(|i| i as f32 * 4.0).collect();
        assert_eq!(time_axis_rate(&ms, Some("ms")), Some(250.0));
        assert_eq!(
            time_axis_rate(&ms, None),
            None,
            "unlabelled whole steps are not guessed"
        );
        let samples: Vec<f32> = (0..3000).map(|i| i as f32).collect();
        assert_eq!(time_axis_rate(&samples, Some("samples")), None);
        let signal: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.05).sin()).collect();
        assert_eq!(time_axis_rate(&signal, Some("s")), None);
        let odd: Vec<f32> = (0..3000).map(|i| i as f32 / 333.3).collect();
        let rate = time_axis_rate(&odd, Some("s")).unwrap();
        assert!((rate - 333.3).abs() < 0.01, "{rate}");
    }
}
