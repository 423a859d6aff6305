//! Latency summaries for the CRI benchmark rows: nearest-rank quantiles in milliseconds.

use std::time::Duration;

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `q` quantile (0.0..=1.0, nearest rank) of `v`, in ms; NaN when `v` is empty.
pub fn quantile_ms(v: &[Duration], q: f64) -> f64 {
    let mut s: Vec<Duration> = v.to_vec();
    s.sort_unstable();
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    ms(s[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<Duration> = [5, 1, 4, 2, 3].map(Duration::from_millis).to_vec();
        assert_eq!(quantile_ms(&v, 0.5), 3.0);
        assert_eq!(quantile_ms(&v, 0.9), 5.0);
        assert_eq!(quantile_ms(&v, 0.0), 1.0);
        assert!(quantile_ms(&[], 0.5).is_nan());
    }
}
