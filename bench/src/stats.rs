//! The percentiles every bench of this crate prints, computed here once: nearest rank (the
//! smallest sample with at least q % of the samples at or below it), no interpolation, so a
//! printed p99 is a sample that happened.
//!
//! Invariant: no bench of the crate computes a percentile elsewhere (nor in a shell).

/// The q-th percentile (0–100, nearest rank) of V, sorted here; NaN when V is empty.
pub(crate) fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// "min / median / max" of V, two decimals (a figure per agent, summed up over the agents).
pub(crate) fn spread(v: &[f64]) -> String {
    format!(
        "{:.2} / {:.2} / {:.2}",
        pct(v, 0.0),
        pct(v, 50.0),
        pct(v, 100.0)
    )
}

/// Mean and sample standard deviation (n − 1, the σ hyperfine prints) of V; σ is 0 for one
/// sample, both NaN for none.
pub(crate) fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_is_a_sample() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), 50.0);
        assert_eq!(pct(&v, 99.0), 99.0);
        assert_eq!(pct(&v, 100.0), 100.0);
        assert_eq!(pct(&v, 0.0), 1.0);
        // 20 samples: p99 is the largest (the 19.8th rank rounds up to the 20th).
        let w: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(pct(&w, 99.0), 20.0);
        assert_eq!(pct(&w, 50.0), 10.0);
        assert!(pct(&[], 50.0).is_nan());
    }

    #[test]
    fn mean_sd_is_the_sample_deviation() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        // Sum of squares 32 over n - 1 = 7 (the population σ would be 2).
        assert!((sd - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
        assert!(mean_sd(&[]).0.is_nan());
    }

    #[test]
    fn spread_is_min_median_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), "1.00 / 2.00 / 3.00");
    }
}
