//! Reading one table back from the kernel: `GETTABLE`, then dumps of its
//! chains, sets (and each set's elements) and rules, decoded by their
//! files in [`crate::object`] into a [`Listing`]: the kernel's objects with
//! their expressions, in the kernel's own terms. `meshnft_core::table::readback`
//! turns a listing into the view the operator commands use; CHECK compares
//! two listings; the fake client keeps its tables as listings.

use super::netlink::attrs;
use super::object::{ChainInfo, RawElem, RuleInfo, SetInfo, chain, rule, set, setelem, table};
use super::sock::{Conn, DumpError};

/// One table as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// The table comment.
    pub comment: Option<String>,
    /// Chains, in the kernel's order (creation order).
    pub chains: Vec<ChainInfo>,
    /// Sets and maps, in the kernel's order.
    pub sets: Vec<SetInfo>,
    /// Rules, chain by chain in the kernel's order.
    pub rules: Vec<RuleInfo>,
}

/// Reading a table failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The socket failed or the kernel answered with an error.
    #[error("reading {what}: {source}")]
    Dump {
        /// What was being read.
        what: String,
        /// Why it failed.
        source: DumpError,
    },
}

fn err(what: &str) -> impl FnOnce(DumpError) -> ReadError + '_ {
    move |source| ReadError::Dump {
        what: what.to_string(),
        source,
    }
}

/// Reads table `inet NAME`: `Ok(None)` when it does not exist.
pub fn read(conn: &mut Conn, name: &str) -> Result<Option<Listing>, ReadError> {
    let tables = match conn.dump(table::get_msg(name)) {
        Ok(t) => t,
        Err(DumpError::Kernel(libc::ENOENT)) => return Ok(None),
        Err(e) => return Err(err("the table")(e)),
    };
    let Some(t) = tables.first() else {
        return Ok(None);
    };
    let mut l = Listing {
        comment: table::decode_comment(&attrs(t)),
        ..Default::default()
    };

    for c in conn.dump(chain::dump_msg(name)).map_err(err("chains"))? {
        let a = attrs(&c);
        if chain::decode_table(&a).as_deref() == Some(name) {
            l.chains.push(chain::decode(&a));
        }
    }

    for s in conn.dump(set::dump_msg(name)).map_err(err("sets"))? {
        let a = attrs(&s);
        if set::decode_table(&a).as_deref() == Some(name) {
            l.sets.push(set::decode(&a));
        }
    }
    for s in &mut l.sets {
        s.elems = read_elems(conn, name, &s.name)?;
    }

    for r in conn.dump(rule::dump_msg(name)).map_err(err("rules"))? {
        let a = attrs(&r);
        if rule::decode_table(&a).as_deref() == Some(name) {
            l.rules.push(rule::decode(&a));
        }
    }
    Ok(Some(l))
}

/// Dumps the elements of set `set` in table `inet TABLE`.
pub fn read_elems(conn: &mut Conn, table: &str, set: &str) -> Result<Vec<RawElem>, ReadError> {
    let what = format!("elements of set {set}");
    let mut out = Vec::new();
    for m in conn
        .dump(setelem::dump_msg(table, set))
        .map_err(err(&what))?
    {
        out.extend(setelem::decode(&attrs(&m)).unwrap_or_default());
    }
    Ok(out)
}
