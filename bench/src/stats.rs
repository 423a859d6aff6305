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
    fn spread_is_min_median_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), "1.00 / 2.00 / 3.00");
    }
}
