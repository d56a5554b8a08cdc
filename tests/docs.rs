//! The documentation's links (no root needed, no network).
//!
//! In `README.md` and `docs/*.md`, every relative markdown link (inline
//! `[text](target)`, reference definitions `[label]: target`, HTML `href`/`src`)
//! must name a file or directory of the repository, and every `#anchor` must
//! be the GitHub slug of a heading of the page it points into (the same page
//! or another one), or `#L<n>` / `#L<n>-L<m>` a line of a non-markdown file.
//! Links with a scheme (`https://`, `mailto:`) are not followed.
//!
//! The rest of the repository (sources, tests, scripts, manifests, CI files)
//! refers to the documentation in comments and messages as plain text:
//! `docs/<page>.md`, `docs/<page>.md#anchor`, `README.md#anchor` and
//! `README "Heading"`. Those references must resolve the same way.
//!
//! Slugs follow GitHub's rendering of headings: the heading's text (code spans,
//! emphasis and links reduced to their text), lowercased, every character that
//! is not a letter, digit, `-`, `_` or space dropped, spaces turned into `-`;
//! the second heading with the same slug gets `-1`, the third `-2`, ...

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Pages being written on other branches at the same time as this test: links
/// to them are accepted while the file does not exist (anchors into them are
/// not). The lead empties this list (`&[]`) once those branches are merged.
const PENDING: &[&str] = &[];

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A link found in a page: its 1-based line and its target as written.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The page's lines with those inside fenced code blocks (```` ``` ````,
/// `~~~`) blanked, so that line numbers are kept.
fn prose(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        let run = |c: char| t.chars().take_while(|&x| x == c).count();
        let opening = ['`', '~'].into_iter().find(|&c| run(c) >= 3);
        match (fence, opening) {
            (None, Some(c)) => {
                fence = Some((c, run(c)));
                out.push(String::new());
            }
            (Some((c, n)), _) => {
                if run(c) >= n && t.trim_start_matches(c).trim().is_empty() {
                    fence = None;
                }
                out.push(String::new());
            }
            (None, None) => out.push(line.to_string()),
        }
    }
    out
}

/// `text` with every inline code span (a run of N backticks up to the next
/// run of exactly N) turned into spaces, newlines kept: a span may cross
/// lines, and `[a](b)` inside one is no link.
fn strip_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run: exactly n backticks.
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for &c in &chars[i..j + n] {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = j + n;
            }
            None => {
                for _ in 0..n {
                    out.push('`');
                }
                i += n;
            }
        }
    }
    out
}

/// The target that starts at `s` (just after `](`): `<...>`, or up to
/// whitespace or the `)` that closes the link (parentheses balanced).
fn inline_target(s: &str) -> String {
    let s = s.trim_start_matches(' ');
    if let Some(rest) = s.strip_prefix('<') {
        return rest.split('>').next().unwrap_or_default().to_string();
    }
    let mut depth = 0usize;
    let mut end = s.len();
    for (k, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                end = k;
                break;
            }
            ')' => depth -= 1,
            c if c.is_whitespace() => {
                end = k;
                break;
            }
            _ => {}
        }
    }
    s[..end].to_string()
}

/// Every link of a markdown page.
fn links(text: &str) -> Vec<Link> {
    let prose = strip_code_spans(&prose(text).join("\n"));
    let mut out = Vec::new();
    for (k, line) in prose.lines().enumerate() {
        let n = k + 1;
        // Inline links and images: [text](target), ![alt](target).
        let mut from = 0;
        while let Some(p) = line[from..].find("](") {
            let at = from + p + 2;
            out.push(Link {
                line: n,
                target: inline_target(&line[at..]),
            });
            from = at;
        }
        // Reference definitions: [label]: target.
        let t = line.trim_start();
        if t.starts_with('[')
            && line.len() - t.len() <= 3
            && let Some(p) = t.find("]:").filter(|&p| !t[..p].contains("]("))
            && let Some(target) = t[p + 2..].split_whitespace().next()
        {
            out.push(Link {
                line: n,
                target: target.trim_matches(['<', '>']).to_string(),
            });
        }
        // HTML: href="..." and src="...".
        for attr in ["href=\"", "src=\""] {
            let mut from = 0;
            while let Some(p) = line[from..].find(attr) {
                let at = from + p + attr.len();
                let target = line[at..].split('"').next().unwrap_or_default();
                out.push(Link {
                    line: n,
                    target: target.to_string(),
                });
                from = at;
            }
        }
    }
    out
}

/// A heading's text as GitHub renders it: closing `#`s, code-span backticks,
/// `*` emphasis and link syntax removed.
fn heading_text(raw: &str) -> String {
    let mut t = raw.trim().trim_end_matches('#').trim_end().to_string();
    // [text](url) -> text
    while let Some(p) = t.find("](") {
        let Some(open) = t[..p].rfind('[') else { break };
        let close = t[p..].find(')').map_or(t.len(), |c| p + c + 1);
        let text = t[open + 1..p].to_string();
        t.replace_range(open..close, &text);
    }
    t.replace(['`', '*'], "")
}

/// GitHub's slug of a heading's text.
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The ATX headings of a page (outside code blocks), as rendered text.
fn headings(text: &str) -> Vec<String> {
    prose(text)
        .iter()
        .filter_map(|l| {
            let t = l.trim_start();
            let level = t.chars().take_while(|&c| c == '#').count();
            let rest = &t[level..];
            let indent = l.len() - t.len();
            ((1..=6).contains(&level) && indent <= 3 && (rest.is_empty() || rest.starts_with(' ')))
                .then(|| heading_text(rest))
        })
        .collect()
}

/// Every anchor of a page: its headings' slugs, duplicates numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for h in headings(text) {
        let s = slug(&h);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// `rel` (a path relative to the directory `dir`, both relative to the
/// repository root) as a path relative to the root, or why not.
fn resolve(dir: &Path, rel: &str) -> Result<PathBuf, String> {
    if rel.starts_with('/') {
        return Err("absolute path: use a path relative to the page".into());
    }
    let mut out = PathBuf::new();
    for c in dir.join(rel).components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err("leaves the repository".into());
                }
            }
            _ => return Err("not a relative path".into()),
        }
    }
    if out.starts_with("target") || out.starts_with(".git") {
        return Err("points into a build or git directory".into());
    }
    Ok(out)
}

/// What is wrong with a reference to `path` (relative to `root`) with
/// `anchor` (may be empty), or None when it resolves.
fn check_target(root: &Path, path: &Path, anchor: &str) -> Option<String> {
    let full = root.join(path);
    let shown = path.display();
    if !full.exists() {
        let pending = PENDING.iter().any(|p| Path::new(p) == path);
        return match (pending, anchor.is_empty()) {
            (true, true) => None,
            (true, false) => Some(format!(
                "{shown} is still pending (PENDING): no anchor into it yet"
            )),
            (false, _) => Some(format!("{shown} does not exist")),
        };
    }
    if anchor.is_empty() {
        return None;
    }
    if full.is_dir() {
        return Some(format!("{shown} is a directory: #{anchor} cannot resolve"));
    }
    let text = match std::fs::read_to_string(&full) {
        Ok(t) => t,
        Err(e) => return Some(format!("{shown}: {e}")),
    };
    if path.extension().is_some_and(|e| e == "md") {
        let a = anchors(&text);
        if a.contains(anchor) {
            return None;
        }
        return Some(format!(
            "{shown} has no heading with anchor #{anchor} (anchors: {})",
            a.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    // #L12 or #L12-L20 on any other file.
    let lines: Option<Vec<usize>> = anchor
        .split('-')
        .map(|p| p.strip_prefix('L').and_then(|n| n.parse().ok()))
        .collect();
    match lines {
        Some(ls) if !ls.is_empty() && ls.len() <= 2 => {
            let have = text.lines().count();
            let want = ls.iter().copied().max().unwrap_or(0);
            (want == 0 || want > have)
                .then(|| format!("{shown}#{anchor}: the file has {have} lines"))
        }
        _ => Some(format!(
            "{shown} is not markdown: #{anchor} is not a line anchor (#L<n>)"
        )),
    }
}

/// Every broken link of the page `page` (relative to `root`) whose text is
/// `text`, as `page:line: target: what is wrong`; and how many links it has.
fn check_page(root: &Path, page: &Path, text: &str) -> (Vec<String>, usize) {
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut errors = Vec::new();
    let all = links(text);
    for l in &all {
        let t = l.target.as_str();
        let external = t.contains("://") || t.starts_with("mailto:");
        if external {
            continue;
        }
        let (path, anchor) = t.split_once('#').unwrap_or((t, ""));
        let problem = if t.is_empty() {
            Some("empty link target".to_string())
        } else if path.is_empty() {
            // The same page: its own headings (it may not be on disk yet).
            (!anchors(text).contains(anchor))
                .then(|| format!("no heading of this page has anchor #{anchor}"))
        } else {
            match resolve(dir, path) {
                Ok(p) => check_target(root, &p, anchor),
                Err(e) => Some(e),
            }
        };
        if let Some(e) = problem {
            errors.push(format!("{}:{}: ({t}): {e}", page.display(), l.line));
        }
    }
    (errors, all.len())
}

/// README.md and docs/*.md, relative to the root.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| Path::new("docs").join(p.file_name().expect("a file name")))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

#[test]
fn readme_and_docs_links_resolve() {
    let root = root();
    let mut errors = Vec::new();
    let mut count = 0;
    let pages = pages(&root);
    for page in &pages {
        let text = std::fs::read_to_string(root.join(page)).expect("page readable");
        let (e, n) = check_page(&root, page, &text);
        errors.extend(e);
        count += n;
    }
    assert!(
        errors.is_empty(),
        "{} broken link(s):\n{}",
        errors.len(),
        errors.join("\n")
    );
    // Not vacuous: the README and its pages are there, and full of links.
    assert!(pages.len() >= 10, "{pages:?}");
    assert!(count >= 100, "only {count} links found");
    // Every page is reachable from the README.
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let linked: BTreeSet<String> = links(&readme).into_iter().map(|l| l.target).collect();
    for page in &pages[1..] {
        let want = page.display().to_string();
        assert!(
            linked
                .iter()
                .any(|t| t.split('#').next() == Some(want.as_str())),
            "README.md does not link to {want}"
        );
    }
}

/// References to the documentation as plain text in one file: `(line,
/// path, anchor)` for `README.md[#a]` and `docs/<page>.md[#a]`, and `(line,
/// "README \"Heading\"", heading)` for a README section named in quotes.
fn text_references(text: &str) -> Vec<(usize, String, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./-#".contains(c);
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate() {
        for prefix in ["README.md", "docs/"] {
            let mut from = 0;
            while let Some(p) = line[from..].find(prefix) {
                let at = from + p;
                from = at + prefix.len();
                let before = line[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-".contains(c)) {
                    continue;
                }
                let token: String = line[at..].chars().take_while(|&c| path_char(c)).collect();
                let token = token.trim_end_matches(['.', '#', '-']);
                let (path, anchor) = token.split_once('#').unwrap_or((token, ""));
                if path == "README.md" || (path.starts_with("docs/") && path.ends_with(".md")) {
                    out.push((k + 1, path.to_string(), anchor.to_string()));
                }
            }
        }
        let mut from = 0;
        while let Some(p) = line[from..].find("README \"") {
            let at = from + p + "README \"".len();
            from = at;
            if let Some(end) = line[at..].find('"') {
                out.push((k + 1, "README \"\"".into(), line[at..at + end].to_string()));
            }
        }
    }
    out
}

/// Every text file of the repository outside README.md, docs/, build and VCS
/// directories, and this file (whose examples are broken on purpose).
fn other_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = rel.join(&name);
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                let skip = ["target", ".git", ".vagrant", "node_modules"].contains(&name.as_str())
                    || (name.starts_with('.') && name != ".ci")
                    || p == Path::new("docs");
                if !skip {
                    stack.push(p);
                }
            } else if ft.is_file() && p != Path::new("README.md") && p != Path::new("tests/docs.rs")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn references_from_other_files_resolve() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let readme_headings = headings(&readme);
    let mut errors = Vec::new();
    let mut count = 0;
    for f in other_files(&root) {
        let Ok(bytes) = std::fs::read(root.join(&f)) else {
            continue;
        };
        if bytes.len() > 4 << 20 {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // not text
        };
        for (line, path, anchor) in text_references(&text) {
            count += 1;
            let problem = if path == "README \"\"" {
                (!readme_headings.contains(&anchor))
                    .then(|| format!("README.md has no heading \"{anchor}\""))
            } else {
                check_target(&root, Path::new(&path), &anchor)
            };
            if let Some(e) = problem {
                errors.push(format!("{}:{line}: {e}", f.display()));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "{} broken reference(s):\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(count >= 10, "only {count} references found");
}

#[test]
fn slugs_follow_github() {
    let cases = [
        (
            "Security: what meshnft refuses, and why",
            "security-what-meshnft-refuses-and-why",
        ),
        ("`inspect --json`", "inspect---json"),
        ("inspect --json", "inspect---json"),
        (
            "Kernels without `socket cgroupv2`",
            "kernels-without-socket-cgroupv2",
        ),
        (
            "Why nf_tables netlink, spoken by meshnft itself",
            "why-nf_tables-netlink-spoken-by-meshnft-itself",
        ),
        (
            "One transaction, in the pod's namespace",
            "one-transaction-in-the-pods-namespace",
        ),
        (
            "Nested cgroup namespaces (kind)",
            "nested-cgroup-namespaces-kind",
        ),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
        ("Kernel ≥ 5.13", "kernel--513"),
    ];
    for (h, want) in cases {
        assert_eq!(slug(&heading_text(h)), want, "{h}");
    }
    let a = anchors("# A\n## Same\n```\n# not a heading\n```\n### Same\n#nospace\n");
    let want: BTreeSet<String> = ["a", "same", "same-1"].map(String::from).into();
    assert_eq!(a, want);
}

/// The checker itself fails on what it must catch, on a page made here.
#[test]
fn checker_catches_broken_links() {
    let root = root();
    let page = Path::new("docs/example.md");
    let text = "\
# Example

## Here

[ok](#here) [ok](../README.md) [ok](install.md) [ok](../src) [ok](https://example.com/x#y)
[gone](missing.md) [bad anchor](#nowhere) [bad anchor](install.md#nowhere)
`[in code](missing.md)` and ``a `[b](missing.md)` c``
[escapes](../../etc/passwd) [line](../Cargo.toml#L1) [line](../Cargo.toml#L999999)
[dir anchor](../src#x) [pending](meshes.md) [pending anchor](peers.md#x)

```
[in a fence](missing.md)
```

[ref]: nothere.md
<a href=\"gone.md\">x</a>
";
    let (errors, n) = check_page(&root, page, text);
    let lines: Vec<&str> = errors
        .iter()
        .map(|e| e.split(": (").next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        [
            "docs/example.md:6",
            "docs/example.md:6",
            "docs/example.md:6",
            "docs/example.md:8",
            "docs/example.md:8",
            "docs/example.md:9",
            "docs/example.md:9",
            "docs/example.md:15",
            "docs/example.md:16",
        ],
        "{errors:#?}"
    );
    assert_eq!(n, 16, "{errors:#?}");
    // Plain-text references in other files.
    let refs = text_references(
        "see docs/install.md#node-agent. and README.md, README \"Testing\", x/docs/y.md, docs.rs/z",
    );
    assert_eq!(
        refs,
        [
            (1, "README.md".into(), String::new()),
            (1, "docs/install.md".into(), "node-agent".into()),
            (1, "README \"\"".into(), "Testing".into()),
        ]
    );
}
