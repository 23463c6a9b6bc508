//! Criterion settings the quick benches share: short warm-up and measurement, so `make bench`
//! stays a few minutes on two cores.

use criterion::Criterion;

pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
}
