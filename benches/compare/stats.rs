//! Summary statistics of latency samples.

use serde_json::{Value, json};

/// min / median / p99 / mean / max of a set of samples (milliseconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

/// Nearest-rank percentile of sorted samples.
fn rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[k.clamp(1, sorted.len()) - 1]
}

impl Stats {
    pub fn of(samples: &[f64]) -> Stats {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return Stats {
                n: 0,
                min: f64::NAN,
                median: f64::NAN,
                p99: f64::NAN,
                mean: f64::NAN,
                max: f64::NAN,
            };
        }
        let mid = s.len() / 2;
        let median = if s.len() % 2 == 1 {
            s[mid]
        } else {
            (s[mid - 1] + s[mid]) / 2.0
        };
        Stats {
            n: s.len(),
            min: s[0],
            median,
            p99: rank(&s, 99.0),
            mean: s.iter().sum::<f64>() / s.len() as f64,
            max: s[s.len() - 1],
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "n": self.n,
            "min": round3(self.min),
            "median": round3(self.median),
            "p99": round3(self.p99),
            "mean": round3(self.mean),
            "max": round3(self.max),
        })
    }
}

/// Rounds to 3 decimals for the JSON file (NaN becomes null).
pub fn round3(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

/// `a / b`, NaN when `b` is not positive.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// `1.23×` (or `-` when undefined).
pub fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "-".into()
    }
}

/// Milliseconds with two decimals.
pub fn fmt_ms(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "-".into()
    }
}
