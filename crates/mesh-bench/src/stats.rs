//! Latencies summarised: p50, p99, max, and what a count over a span is per
//! second.

use serde::Serialize;

/// Milliseconds from one start to each of N completions.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spread {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// `count` over `max_ms`: completions per second, the whole span.
    pub per_second: f64,
}

impl Spread {
    pub fn of(mut ms: Vec<f64>) -> Spread {
        if ms.is_empty() {
            return Spread::default();
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            let i = ((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[i]
        };
        let max = ms[ms.len() - 1];
        Spread {
            count: ms.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: max,
            per_second: if max > 0.0 {
                ms.len() as f64 / (max / 1000.0)
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_of_the_sorted_values() {
        let s = Spread::of((1..=100).rev().map(f64::from).collect());
        assert_eq!(
            (s.count, s.p50_ms, s.p99_ms, s.max_ms),
            (100, 50.0, 99.0, 100.0)
        );
        assert!((s.per_second - 1000.0).abs() < 1e-9);
        assert_eq!(Spread::of(vec![]).count, 0);
        let one = Spread::of(vec![7.0]);
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (7.0, 7.0, 7.0));
    }
}
