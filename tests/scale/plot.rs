//! The plot of a run of several steps (`scale.svg`): the API server's CPU-seconds per window
//! against the number of nodes, a series per phase and window (`start`, `restart`,
//! `apiserver`), each with its least-squares line, extended to [`TO`] nodes as an
//! extrapolation; and the extrapolation's table. Also re-plotted from `windows.tsv` files
//! (`scale_plot`, `MESHNFT_SCALE_PLOT`).

use super::*;
use std::collections::BTreeMap;

/// Where the lines are extended to (nodes).
pub(crate) const TO: f64 = 5000.0;
/// The windows plotted, in this order (`churn` is a rate, not a step's cost: left out).
const WINDOWS: [&str; 3] = ["start", "restart", "apiserver"];

/// One window of one phase of one step: its nodes and the API server's CPU-seconds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    pub(crate) phase: String,
    pub(crate) window: String,
    pub(crate) nodes: f64,
    pub(crate) cpu: f64,
}

/// The points of this run's rows.
pub(crate) fn points_from_rows(rows: &[Row]) -> Vec<Point> {
    rows.iter()
        .map(|r| Point {
            phase: r.phase.to_string(),
            window: r.window.to_string(),
            nodes: r.nodes as f64,
            cpu: r.api_cpu,
        })
        .collect()
}

/// The points of a `windows.tsv` (its columns found by name: older files have fewer).
pub(crate) fn points_from_tsv(tsv: &str) -> Result<Vec<Point>, String> {
    let mut lines = tsv.lines().filter(|l| !l.trim().is_empty());
    let head: Vec<&str> = lines.next().ok_or("empty")?.split('\t').collect();
    let col = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no column {name}"))
    };
    let (nodes, phase, window, cpu) = (
        col("nodes")?,
        col("phase")?,
        col("window")?,
        col("apiserver_cpu_s")?,
    );
    lines
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split('\t').collect();
            let get = |c: usize| {
                f.get(c)
                    .copied()
                    .ok_or_else(|| format!("line {}: {} fields", i + 2, f.len()))
            };
            let num = |c: usize| {
                get(c)?
                    .trim()
                    .parse::<f64>()
                    .map_err(|e| format!("line {}: {e}", i + 2))
            };
            Ok(Point {
                phase: get(phase)?.to_string(),
                window: get(window)?.to_string(),
                nodes: num(nodes)?,
                cpu: num(cpu)?,
            })
        })
        .collect()
}

/// Several runs' points as one: one point per phase, window and step; a later run's step
/// replaces an earlier one's of the same size.
pub(crate) fn merge(runs: impl IntoIterator<Item = Vec<Point>>) -> Vec<Point> {
    let mut m = BTreeMap::new();
    for p in runs.into_iter().flatten() {
        m.insert((p.phase.clone(), p.window.clone(), p.nodes as u64), p);
    }
    m.into_values().collect()
}

/// A least-squares line `y = slope * x + intercept`, and its R² (`None`: every y the same).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fit {
    pub(crate) slope: f64,
    pub(crate) intercept: f64,
    pub(crate) r2: Option<f64>,
}

impl Fit {
    pub(crate) fn at(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }
}

/// The least-squares line through `xy`; `None` unless there are two different x.
pub(crate) fn fit(xy: &[(f64, f64)]) -> Option<Fit> {
    let n = xy.len() as f64;
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if xy.len() < 2 || sxx <= f64::EPSILON * mx.abs().max(1.0) {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_tot: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    let ss_res: f64 = xy
        .iter()
        .map(|p| (p.1 - (slope * p.0 + intercept)).powi(2))
        .sum();
    let r2 = (ss_tot > 0.0).then(|| 1.0 - ss_res / ss_tot);
    Some(Fit {
        slope,
        intercept,
        r2,
    })
}

/// One phase's window across the steps.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub(crate) phase: String,
    pub(crate) window: String,
    /// (nodes, CPU-seconds), by nodes.
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) fit: Option<Fit>,
}

impl Series {
    pub(crate) fn name(&self) -> String {
        format!("{}, {}", self.phase, self.window)
    }
}

/// The series of `points`: kubelet watches then agents, each window in [`WINDOWS`]'s order.
pub(crate) fn series(points: &[Point]) -> Vec<Series> {
    let mut out = Vec::new();
    for phase in [Phase::Kubelet.name(), Phase::Agents.name()] {
        for window in WINDOWS {
            let mut xy: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.phase == phase && p.window == window)
                .map(|p| (p.nodes, p.cpu))
                .collect();
            if xy.is_empty() {
                continue;
            }
            xy.sort_by(|a, b| a.0.total_cmp(&b.0));
            out.push(Series {
                phase: phase.to_string(),
                window: window.to_string(),
                fit: fit(&xy),
                points: xy,
            });
        }
    }
    out
}

/// The extrapolation's table: per phase and window, the line's slope per 1000 nodes, its
/// intercept, its value at [`TO`] nodes and R²; then an `extrapolated:` line each.
pub(crate) fn table(series: &[Series]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "API server CPU-seconds per window, least squares over the steps, extrapolated to {TO} nodes:"
    );
    let _ = writeln!(
        t,
        "{:<15} {:<9} {:>5} {:>12} {:>10} {:>10} {:>6}",
        "phase", "window", "steps", "s/1000nodes", "intercept", "at 5000", "R2"
    );
    for s in series {
        match s.fit {
            Some(f) => {
                let _ = writeln!(
                    t,
                    "{:<15} {:<9} {:>5} {:>12.2} {:>10.2} {:>10.1} {:>6}",
                    s.phase,
                    s.window,
                    s.points.len(),
                    f.slope * 1000.0,
                    f.intercept,
                    f.at(TO),
                    f.r2.map_or("-".into(), |r| format!("{r:.3}"))
                );
            }
            None => {
                let _ = writeln!(
                    t,
                    "{:<15} {:<9} {:>5} {:>12} {:>10} {:>10} {:>6}",
                    s.phase,
                    s.window,
                    s.points.len(),
                    "-",
                    "-",
                    "-",
                    "-"
                );
            }
        }
    }
    for s in series {
        match s.fit {
            Some(f) => {
                let _ = writeln!(
                    t,
                    "extrapolated: {}: {:.1} API server CPU-seconds at {TO} nodes ({:.2} per 1000 nodes, R2 {})",
                    s.name(),
                    f.at(TO),
                    f.slope * 1000.0,
                    f.r2.map_or("-".into(), |r| format!("{r:.3}"))
                );
            }
            None => {
                let _ = writeln!(t, "extrapolated: {}: none (one step size)", s.name());
            }
        }
    }
    t
}

/// The series' colours: kubelet watches in blues, agents in reds; a window each.
fn colour(s: &Series) -> &'static str {
    let i = WINDOWS.iter().position(|w| *w == s.window).unwrap_or(0);
    if s.phase == Phase::Agents.name() {
        ["#c0392b", "#e67e22", "#8e44ad"][i]
    } else {
        ["#1f4e9c", "#2a9d8f", "#5dade2"][i]
    }
}

/// A marker at (x, y): a circle (`start`), a square (`restart`), a triangle (`apiserver`).
fn marker(window: &str, x: f64, y: f64, fill: &str, stroke: &str) -> String {
    match window {
        "restart" => format!(
            r#"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{fill}" stroke="{stroke}"/>"#,
            x - 4.0,
            y - 4.0
        ),
        "apiserver" => format!(
            r#"<path d="M{:.1},{:.1} l5,9 l-10,0 z" fill="{fill}" stroke="{stroke}"/>"#,
            x,
            y - 5.0
        ),
        _ => {
            format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="4.5" fill="{fill}" stroke="{stroke}"/>"#)
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for about `n` ticks up to `max` (1, 2 or 5 times a power of ten).
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// The plot (hand-written SVG): points, the least-squares lines over the measured steps, and
/// dashed past them to [`TO`] nodes, each line's value there written at its end and in the
/// legend. `source`: where the points come from (the subtitle).
pub(crate) fn svg(series: &[Series], source: &str) -> String {
    let (w, left, pw) = (980.0, 80.0, 740.0);
    let (top, ph) = (70.0, 420.0);
    let legend_top = top + ph + 72.0;
    let height = legend_top + 18.0 * series.len().max(1) as f64 + 16.0;
    let measured_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let measured_min = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(f64::INFINITY, f64::min);
    let x_max = TO.max(measured_max);
    let values = series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.fit.map(|f| f.at(x_max)))
            .chain(s.fit.map(|f| f.at(0.0)))
    });
    let (lo, hi) = values.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let y_step = tick_step((hi - lo).max(1.0) * 1.08, 6.0);
    let y_max = (hi * 1.04 / y_step).ceil().max(1.0) * y_step;
    let y_min = (lo / y_step).floor() * y_step;
    let x = |n: f64| left + pw * n / x_max;
    let y = |v: f64| top + ph - ph * (v - y_min) / (y_max - y_min);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" viewBox="0 0 {w} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="15">API server CPU-seconds per window against nodes: kubelet watches vs. meshnft agents</text>"#
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="40" fill="#444">points: measured steps ({}); lines: least squares; dashed: extrapolation to {TO} nodes</text>"##,
        esc(source)
    );
    let _ = writeln!(
        s,
        r#"<defs><clipPath id="area"><rect x="{left}" y="{top}" width="{pw}" height="{ph}"/></clipPath></defs>"#
    );
    // Grid and axes.
    let x_step = tick_step(x_max, 10.0);
    let mut n = 0.0;
    while n <= x_max + 1e-9 {
        let xx = x(n);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{n}</text>"##,
            top + ph,
            top + ph + 16.0
        );
        n += x_step;
    }
    let mut v = y_min;
    while v <= y_max + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0,
            if y_step < 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        );
        v += y_step;
    }
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">nodes (kubelet watches: one a node; agents: one a node)</text>"#,
        left + pw / 2.0,
        top + ph + 34.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {}) rotate(-90)" text-anchor="middle">API server CPU-seconds in the window</text>"#,
        top + ph / 2.0
    );
    // Measured | extrapolated.
    if measured_max > 0.0 {
        let xx = x(measured_max);
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{ph}" fill="#f4f4f4"/><line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{}" stroke="#999" stroke-dasharray="3 3"/><text x="{:.1}" y="{}" fill="#666">← measured: {}–{} nodes | extrapolated (least squares) →</text>"##,
            x(measured_min),
            xx - x(measured_min),
            top + ph,
            xx + 6.0,
            top + ph - 8.0,
            measured_min,
            measured_max,
        );
    }
    // Lines, then points, then the values at the end.
    let mut ends = Vec::new();
    for se in series {
        let c = colour(se);
        let Some(f) = se.fit else { continue };
        let (a, b) = (se.points[0].0, se.points[se.points.len() - 1].0);
        let _ = writeln!(
            s,
            r#"<g clip-path="url(#area)"><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="7 5"><title>{}: extrapolated</title></line></g>"#,
            x(a),
            y(f.at(a)),
            x(b),
            y(f.at(b)),
            x(b),
            y(f.at(b)),
            x(x_max),
            y(f.at(x_max)),
            esc(&se.name())
        );
        ends.push((y(f.at(x_max)), f.at(x_max), c, se.window.clone()));
    }
    for se in series {
        let c = colour(se);
        for &(n, v) in &se.points {
            let _ = writeln!(
                s,
                "<g><title>{}: {n} nodes, {v:.2} s</title>{}</g>",
                esc(&se.name()),
                marker(&se.window, x(n), y(v), c, "white")
            );
        }
    }
    // The values at TO: a hollow marker on the line's end, the value beside it (moved apart so
    // that none overlap).
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut last = f64::NEG_INFINITY;
    for (yy, v, c, window) in ends {
        let ty = (yy + 4.0).max(last + 14.0);
        last = ty;
        let _ = writeln!(
            s,
            r#"{}<text x="{:.1}" y="{ty:.1}" fill="{c}">{v:.1} s</text>"#,
            marker(&window, x(x_max), yy, "white", c),
            x(x_max) + 8.0
        );
    }
    // The measured steps, zoomed: an inset at the top left.
    if measured_max > 0.0 {
        // Right of the measured band, where the lines are still low.
        let ix = (x(measured_max) + 50.0).min(left + pw * 0.45);
        s.push_str(&inset(series, ix, top + 28.0, measured_max));
    }
    // The legend: each series, its value at TO and its line.
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{}" font-weight="bold">series (window's API server CPU-seconds; at {TO} nodes: the line's value, extrapolated)</text>"#,
        legend_top - 14.0
    );
    for (i, se) in series.iter().enumerate() {
        let c = colour(se);
        let ly = legend_top + 18.0 * i as f64;
        let what = match se.fit {
            Some(f) => format!(
                "at {TO} nodes: {:.1} s (extrapolated); {:.2} s per 1000 nodes, intercept {:.2} s, R² {}; {} steps",
                f.at(TO),
                f.slope * 1000.0,
                f.intercept,
                f.r2.map_or("-".into(), |r| format!("{r:.3}")),
                se.points.len()
            ),
            None => "one step size: no line".to_string(),
        };
        let _ = writeln!(
            s,
            r#"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="{c}" stroke-width="2"/>{}<text x="{}" y="{:.1}"><tspan fill="{c}" font-weight="bold">{}</tspan>: {}</text>"#,
            ly - 4.0,
            left + 28.0,
            ly - 4.0,
            marker(&se.window, left + 14.0, ly - 4.0, c, "white"),
            left + 36.0,
            ly,
            esc(&se.name()),
            esc(&what)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The measured steps alone, in a 300 x 170 panel at (`ix`, `iy`): points and the solid lines.
fn inset(series: &[Series], ix: f64, iy: f64, measured_max: f64) -> String {
    let (iw, ih) = (300.0, 170.0);
    let x_max = measured_max * 1.05;
    let hi = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-3);
    let y_step = tick_step(hi * 1.08, 4.0);
    let y_max = (hi * 1.04 / y_step).ceil().max(1.0) * y_step;
    let x = |n: f64| ix + iw * n / x_max;
    let y = |v: f64| iy + ih - ih * v.max(0.0) / y_max;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="white" fill-opacity="0.85" stroke="none"/><rect x="{ix}" y="{iy}" width="{iw}" height="{ih}" fill="none" stroke="#888"/><text x="{ix}" y="{}" fill="#444">the measured steps, zoomed</text>"##,
        ix - 42.0,
        iy - 18.0,
        iw + 50.0,
        ih + 40.0,
        iy - 5.0
    );
    let x_step = tick_step(x_max, 5.0);
    let mut n = 0.0;
    while n <= x_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle" font-size="10" fill="#444">{n}</text>"##,
            x(n),
            iy + ih + 12.0
        );
        n += x_step;
    }
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{ix}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end" font-size="10" fill="#444">{}</text>"##,
            ix + iw,
            ix - 4.0,
            y(v) + 3.0,
            if y_step < 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            },
            yy = y(v)
        );
        v += y_step;
    }
    for se in series {
        let c = colour(se);
        if let Some(f) = se.fit {
            let (a, b) = (se.points[0].0, se.points[se.points.len() - 1].0);
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="1.5"/>"#,
                x(a),
                y(f.at(a)),
                x(b),
                y(f.at(b))
            );
        }
        for &(n, v) in &se.points {
            s.push_str(&marker(&se.window, x(n), y(v), c, "white"));
            s.push('\n');
        }
    }
    s
}

/// Writes `scale.svg` of `points` into `dir`; returns the extrapolation's table.
pub(crate) fn plot(points: &[Point], dir: &Path, source: &str) -> String {
    let series = series(points);
    let path = dir.join("scale.svg");
    std::fs::write(&path, svg(&series, source)).expect("scale.svg");
    format!("{}plot: {}\n", table(&series), path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "nodes\tpods\tphase\twindow\tseconds\tapiserver_cpu_s\tfirst_max_s\n\
        100\t3000\tkubelet watches\tstart\t10.0\t5.0\t1\n\
        100\t3000\tkubelet watches\tchurn\t10.0\t9.0\t1\n\
        100\t3000\tagents\tstart\t10.0\t4.0\t1\n\
        100\t3000\tagents\trestart\t10.0\t6.0\t1\n\
        200\t6000\tkubelet watches\tstart\t10.0\t99.0\t1\n\
        200\t6000\tagents\tstart\t10.0\t6.0\t1\n\
        200\t6000\tagents\trestart\t10.0\t8.0\t1\n";
    const NEW: &str = "nodes\tpods\tnamespaces\tphase\twindow\tseconds\tapiserver_cpu_s\n\
        200\t6000\t10\tkubelet watches\tstart\t10.0\t7.0\n\
        500\t15000\t10\tkubelet watches\tstart\t10.0\t13.0\n\
        500\t15000\t10\tagents\tstart\t10.0\t12.0\n\
        500\t15000\t10\tagents\trestart\t10.0\t11.0\n";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn least_squares() {
        // On a line: y = 0.02 x + 3.
        let f = fit(&[(100.0, 5.0), (200.0, 7.0), (500.0, 13.0)]).expect("a line");
        assert!(close(f.slope, 0.02) && close(f.intercept, 3.0), "{f:?}");
        assert!(close(f.r2.expect("R²"), 1.0), "{f:?}");
        assert!(close(f.at(TO), 103.0));
        // Off it: slope 0.5, intercept 1, residuals -0.5, 1, -0.5 (1.5) of 2: R² 0.25.
        let f = fit(&[(1.0, 1.0), (2.0, 3.0), (3.0, 2.0)]).expect("a line");
        assert!(close(f.slope, 0.5) && close(f.intercept, 1.0), "{f:?}");
        assert!(close(f.r2.expect("R²"), 0.25), "{f:?}");
        // Flat: no R².
        let f = fit(&[(1.0, 2.0), (3.0, 2.0)]).expect("a line");
        assert!(close(f.slope, 0.0) && f.r2.is_none(), "{f:?}");
        // One size, or none: no line.
        assert!(fit(&[(500.0, 1.0), (500.0, 2.0)]).is_none());
        assert!(fit(&[(500.0, 1.0)]).is_none());
        assert!(fit(&[]).is_none());
    }

    #[test]
    fn merged_series_table_and_svg() {
        let old = points_from_tsv(OLD).expect("the old columns");
        let new = points_from_tsv(NEW).expect("the new columns");
        assert!(points_from_tsv("nodes\tphase\n1\tx\n").is_err());
        let points = merge([old, new]);
        let series = series(&points);
        let names: Vec<String> = series.iter().map(Series::name).collect();
        // churn left out; the later run's 200-node kubelet start replaces the earlier one's.
        assert_eq!(
            names,
            ["kubelet watches, start", "agents, start", "agents, restart"]
        );
        assert_eq!(
            series[0].points,
            [(100.0, 5.0), (200.0, 7.0), (500.0, 13.0)]
        );
        let f = series[0].fit.expect("a line");
        assert!(close(f.at(TO), 103.0), "{f:?}");
        let t = table(&series);
        assert!(
            t.contains("extrapolated: kubelet watches, start: 103.0 API server CPU-seconds at 5000 nodes (20.00 per 1000 nodes, R2 1.000)"),
            "{t}"
        );
        let at = |s: &Series| s.fit.expect("a line").at(TO);
        let svg = svg(&series, "test");
        for se in &series {
            assert!(svg.contains(&esc(&se.name())), "{} missing", se.name());
            let v = format!("{:.1} s", at(se));
            assert!(
                svg.contains(&format!(">{v}</text>")),
                "{v} not at the line's end"
            );
            assert!(
                svg.contains(&format!("at 5000 nodes: {v} (extrapolated)")),
                "{v} not in the legend"
            );
        }
        assert_eq!(svg.matches("stroke-dasharray=\"7 5\"").count(), 3);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        // Every element closed: as many opening tags as closing ones and self-closed.
        let opens = svg.matches('<').count() - 2 * svg.matches("</").count();
        assert_eq!(opens, svg.matches("/>").count(), "unbalanced tags");
    }
}
