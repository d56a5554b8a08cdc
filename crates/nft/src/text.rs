//! The nft text rendering of a [`Table`]: the human-readable form of
//! exactly what [`super::encode`] sends (`meshnft render`, the golden files,
//! docs/table.md). `nft -f` of this text and the netlink batch give the same
//! `nft list table` (tests/nft_oracle.rs checks it).

use super::model::{Set, Table};
use std::fmt::Write as _;

impl Set {
    /// The declaration body, e.g. `type inet_service; flags interval;`.
    pub fn spec(&self) -> String {
        let mut s = format!("type {}", self.key.nft_name());
        if self.verdict_map {
            s.push_str(" : verdict");
        }
        s.push(';');
        match (self.interval, self.dynamic) {
            (true, true) => s.push_str(" flags interval,dynamic;"),
            (true, false) => s.push_str(" flags interval;"),
            (false, true) => s.push_str(" flags dynamic;"),
            (false, false) => {}
        }
        s
    }

    /// `set` or `map`.
    pub fn kind(&self) -> &'static str {
        if self.verdict_map { "map" } else { "set" }
    }
}

impl Table {
    /// `inet NAME`.
    pub fn family_name(&self) -> String {
        format!("inet {}", self.name)
    }

    /// Renders the table as one idempotent nft transaction (input for
    /// `nft -f -`), for a netns that may already hold the table (re-ADD).
    ///
    /// Shape: a `table inet meshnft { ... }` block declaring every object
    /// (a no-op for objects that exist), then `flush chain` for every chain
    /// and `flush set` for static sets, then `add element` and `add rule`
    /// lines. Applied as one atomic transaction: all of it or none of it.
    pub fn render(&self) -> String {
        let mut t = String::new();
        let tn = self.family_name();
        self.declare(&mut t, true);
        for c in &self.chains {
            let _ = writeln!(t, "flush chain {tn} {}", c.name);
        }
        for s in self.sets.iter().filter(|s| s.elements.is_some()) {
            let _ = writeln!(t, "flush set {tn} {}", s.name);
        }
        self.fill(&mut t);
        t
    }

    /// Renders the transaction for a netns without the table (first ADD):
    /// `create table` (which fails the whole transaction, atomically, when
    /// the table exists), the declarations, elements and rules, and no
    /// flushes. Flushing frees kernel objects, and a transaction that frees
    /// any makes the last close of the netlink socket wait for an RCU grace
    /// period (about 10 ms here); this one does not.
    pub fn render_fresh(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "create table {} {{ comment \"{}\"; }}",
            self.family_name(),
            self.comment
        );
        self.declare(&mut t, false);
        self.fill(&mut t);
        t
    }

    fn declare(&self, t: &mut String, with_comment: bool) {
        let _ = writeln!(t, "table {} {{", self.family_name());
        if with_comment {
            let _ = writeln!(t, "\tcomment \"{}\"", self.comment);
        }
        for s in &self.sets {
            let _ = writeln!(
                t,
                "\t{} {} {{ {} comment \"{}\"; }}",
                s.kind(),
                s.name,
                s.spec(),
                s.comment
            );
        }
        for c in &self.chains {
            match c.hook {
                Some(h) => {
                    let _ = writeln!(t, "\tchain {} {{ {} }}", c.name, h.text());
                }
                None => {
                    let _ = writeln!(t, "\tchain {} {{ }}", c.name);
                }
            }
        }
        let _ = writeln!(t, "}}");
    }

    fn fill(&self, t: &mut String) {
        let tn = self.family_name();
        for s in &self.sets {
            if let Some(e) = s.elements.as_ref().filter(|e| !e.is_empty()) {
                let list: Vec<String> = e.iter().map(|x| x.to_string()).collect();
                let _ = writeln!(t, "add element {tn} {} {{ {} }}", s.name, list.join(", "));
            }
        }
        for r in &self.rules {
            let _ = writeln!(
                t,
                "add rule {tn} {} {} comment \"{}\"",
                r.chain,
                r.body(),
                r.comment
            );
        }
    }
}

/// The transaction that removes table `inet NAME` whether or not it exists
/// (`add` then `delete` in one batch; nft 1.0.6 has no `destroy`).
pub fn render_delete(name: &str) -> String {
    format!("add table inet {name}\ndelete table inet {name}\n")
}
