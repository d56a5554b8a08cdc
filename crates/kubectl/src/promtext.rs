//! The agent's `/metrics` (OpenMetrics text, as prometheus-client writes it) read back into
//! samples: `name{label="value",...} number` lines; comments and `# EOF` skipped.

use std::collections::BTreeMap;

/// One sample: its metric name (with `_total`, `_bucket`, ... as written), labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name, e.g. `meshnft_repairs_total`.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The samples of `text`; a line that is not a sample is skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(sample).collect()
}

fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i..]),
        None => line.split_at(line.find(' ')?),
    };
    let mut labels = BTreeMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        let end = closing_brace(body)?;
        labels = parse_labels(&body[..end])?;
        &body[end + 1..]
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The index of the `}` that closes a label set (braces inside quoted values skipped).
fn closing_brace(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return None,
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key, value);
        rest = after[end? + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(out)
}

/// The sum of the samples named `name` whose labels include every pair of `with`.
pub fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples() {
        let text = "# HELP meshnft_ready x\n# TYPE meshnft_ready gauge\nmeshnft_ready 1\n\
            meshnft_cni_operations_total{verb=\"ADD\",result=\"failed\",code=\"7\"} 2\n\
            meshnft_cni_operations_total{verb=\"ADD\",result=\"ok\",code=\"0\"} 5\n\
            meshnft_build_info{version=\"0.1.0\",commit=\"a}b\\\"c\"} 1\n# EOF\n";
        let s = parse(text);
        assert_eq!(s.len(), 4);
        assert_eq!(sum(&s, "meshnft_ready", &[]), 1.0);
        assert_eq!(
            sum(&s, "meshnft_cni_operations_total", &[("verb", "ADD")]),
            7.0
        );
        assert_eq!(
            sum(
                &s,
                "meshnft_cni_operations_total",
                &[("verb", "ADD"), ("result", "failed")]
            ),
            2.0
        );
        assert_eq!(s[3].labels["commit"], "a}b\"c");
        assert!(parse("garbage{\nx 1 2\n").iter().all(|s| s.name == "x"));
    }
}
