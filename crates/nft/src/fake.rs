//! An in-memory [`NftClient`] for tests without root (knftables' `Fake`,
//! in shape): it keeps tables as [`Listing`]s, applies each committed
//! transaction by decoding its messages with the same decoders a read-back
//! uses, all or nothing, and records every transaction it was sent. It can
//! be told to fail a call with an errno.
//!
//! Built for this crate's tests and with the feature `fake` (the plugin's
//! unit tests turn it on as a dev-dependency), never in the release plugin.
//!
//! What it checks, as nf_tables does: `create table` of an existing table
//! (`EEXIST`), objects in a table, chain or set that does not exist, and
//! deleting a table, a set or an element that is not there (`ENOENT`). It does not
//! check expressions or set lookups.

use super::dump::Listing;
use super::netlink::{NLM_F_EXCL, attrs, msg};
use super::object::{chain, rule, set, setelem, table};
use super::{NftClient, NftError, Transaction};
use std::collections::{BTreeMap, VecDeque};

/// A call of [`NftClient`], to make fail with [`Fake::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// [`NftClient::commit`].
    Commit,
    /// [`NftClient::read`].
    Read,
    /// [`NftClient::table_exists`].
    Exists,
}

/// The fake client of one network namespace.
#[derive(Debug, Default)]
pub struct Fake {
    /// Tables by name (family `inet`).
    pub tables: BTreeMap<String, Listing>,
    /// Every transaction committed, in order (also the refused ones:
    /// `refused` counts those).
    pub sent: Vec<Transaction>,
    /// Transactions refused (by an injected failure or a check).
    pub refused: usize,
    /// Failures to inject, in order: the next call of that kind fails.
    fail: VecDeque<(Call, i32)>,
    /// Next rule handle.
    handle: u64,
}

impl Fake {
    /// No tables.
    pub fn new() -> Fake {
        Fake::default()
    }

    /// A namespace holding what `tx` writes (panics if it does not apply:
    /// for setting up tests).
    pub fn with(tx: Transaction) -> Fake {
        let mut f = Fake::new();
        if let Err(e) = f.commit(tx) {
            panic!("the fake refused the setup transaction: {e}");
        }
        f.sent.clear();
        f
    }

    /// Makes the next `call` fail with `errno` (the kernel's refusal).
    pub fn fail_next(&mut self, call: Call, errno: i32) -> &mut Self {
        self.fail.push_back((call, errno));
        self
    }

    /// Table `inet NAME`, if there is one.
    pub fn table(&self, name: &str) -> Option<&Listing> {
        self.tables.get(name)
    }

    fn injected(&mut self, call: Call) -> Option<i32> {
        let i = self.fail.iter().position(|(c, _)| *c == call)?;
        self.fail.remove(i).map(|(_, e)| e)
    }

    /// Applies `tx` to `tables`: the first refused message's (what, errno).
    fn apply(
        &mut self,
        tables: &mut BTreeMap<String, Listing>,
        tx: &Transaction,
    ) -> Result<(), (String, i32)> {
        for m in tx.msgs() {
            let mut bytes = Vec::new();
            m.msg.finish_into(&mut bytes, 0, 0);
            let flags = u16::from_ne_bytes([bytes[6], bytes[7]]);
            let a = attrs(bytes.get(20..).unwrap_or_default());
            let refuse = |errno| (m.what.clone(), errno);
            let ty = (m.msg.msg_type() & 0xff) as u8;
            // Every message but NEWTABLE names an existing table.
            let tname = match ty {
                msg::NEWTABLE | msg::DELTABLE => table::decode_name(&a),
                msg::NEWCHAIN => chain::decode_table(&a).unwrap_or_default(),
                msg::NEWSET | msg::DELSET => set::decode_table(&a).unwrap_or_default(),
                msg::NEWRULE | msg::DELRULE => rule::decode_table(&a).unwrap_or_default(),
                _ => setelem::decode_names(&a).0,
            };
            if ty == msg::NEWTABLE {
                match tables.get(&tname) {
                    Some(_) if flags & NLM_F_EXCL != 0 => return Err(refuse(libc::EEXIST)),
                    Some(_) => {}
                    None => {
                        let t = Listing {
                            comment: table::decode_comment(&a),
                            ..Default::default()
                        };
                        tables.insert(tname, t);
                    }
                }
                continue;
            }
            if ty == msg::DELTABLE {
                tables.remove(&tname).ok_or(refuse(libc::ENOENT))?;
                continue;
            }
            let t = tables.get_mut(&tname).ok_or(refuse(libc::ENOENT))?;
            match ty {
                msg::NEWCHAIN => {
                    let c = chain::decode(&a);
                    if !t.chains.iter().any(|x| x.name == c.name) {
                        t.chains.push(c);
                    }
                }
                msg::NEWSET => {
                    let set = set::decode(&a);
                    if !t.sets.iter().any(|x| x.name == set.name) {
                        t.sets.push(set);
                    }
                }
                msg::DELSET => {
                    let name = set::decode(&a).name;
                    let at = t.sets.iter().position(|x| x.name == name);
                    t.sets.remove(at.ok_or(refuse(libc::ENOENT))?);
                }
                msg::NEWRULE => {
                    let mut r = rule::decode(&a);
                    if !t.chains.iter().any(|c| c.name == r.chain) {
                        return Err(refuse(libc::ENOENT));
                    }
                    self.handle += 1;
                    r.handle = self.handle;
                    // Chain by chain in the chains' order, each chain's
                    // in the order they were added, as the kernel lists
                    // them: after the last rule of this chain or of one
                    // before it.
                    let chain_at = |name: &str| t.chains.iter().position(|c| c.name == name);
                    let own = chain_at(&r.chain);
                    let at = t
                        .rules
                        .iter()
                        .rposition(|x| chain_at(&x.chain) <= own)
                        .map(|i| i + 1)
                        .unwrap_or(0);
                    t.rules.insert(at, r);
                }
                msg::DELRULE => {
                    let chain = rule::decode(&a).chain;
                    if !t.chains.iter().any(|c| c.name == chain) {
                        return Err(refuse(libc::ENOENT));
                    }
                    t.rules.retain(|r| r.chain != chain);
                }
                msg::NEWSETELEM | msg::DELSETELEM => {
                    let name = setelem::decode_names(&a).1;
                    let set = t
                        .sets
                        .iter_mut()
                        .find(|x| x.name == name)
                        .ok_or(refuse(libc::ENOENT))?;
                    let elems = setelem::decode(&a);
                    match (ty, elems) {
                        (msg::DELSETELEM, None) => set.elems.clear(),
                        (msg::DELSETELEM, Some(del)) => {
                            for e in del {
                                let i = set
                                    .elems
                                    .iter()
                                    .position(|x| x.key == e.key && x.end == e.end)
                                    .ok_or(refuse(libc::ENOENT))?;
                                set.elems.remove(i);
                            }
                        }
                        (_, add) => {
                            for e in add.unwrap_or_default() {
                                if !set.elems.iter().any(|x| x.key == e.key && x.end == e.end) {
                                    set.elems.push(e);
                                }
                            }
                        }
                    }
                }
                _ => return Err(refuse(libc::EOPNOTSUPP)),
            }
        }
        Ok(())
    }
}

fn refused(what: String, errno: i32) -> NftError {
    NftError::Refused {
        hint: super::hint(errno, None, &what),
        what,
        errno,
        reason: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

impl NftClient for Fake {
    fn commit(&mut self, tx: Transaction) -> Result<(), NftError> {
        if tx.is_empty() {
            return Ok(());
        }
        let outcome = match self.injected(Call::Commit) {
            Some(errno) => Err(("the transaction".to_string(), errno)),
            None => {
                let mut tables = self.tables.clone();
                self.apply(&mut tables, &tx).map(|()| tables)
            }
        };
        self.sent.push(tx);
        match outcome {
            Ok(tables) => {
                self.tables = tables;
                Ok(())
            }
            Err((what, errno)) => {
                self.refused += 1;
                Err(refused(what, errno))
            }
        }
    }

    fn read(&mut self, table: &str) -> Result<Option<Listing>, NftError> {
        if let Some(errno) = self.injected(Call::Read) {
            return Err(refused(format!("reading table inet {table}"), errno));
        }
        Ok(self.tables.get(table).cloned())
    }

    fn table_exists(&mut self, table: &str) -> Result<bool, NftError> {
        if let Some(errno) = self.injected(Call::Exists) {
            return Err(refused(format!("reading table inet {table}"), errno));
        }
        Ok(self.tables.contains_key(table))
    }
}

/// A fake shared between a test and the code under test (which opens a
/// client per namespace and drops it).
impl NftClient for std::rc::Rc<std::cell::RefCell<Fake>> {
    fn commit(&mut self, tx: Transaction) -> Result<(), NftError> {
        self.borrow_mut().commit(tx)
    }

    fn read(&mut self, table: &str) -> Result<Option<Listing>, NftError> {
        self.borrow_mut().read(table)
    }

    fn table_exists(&mut self, table: &str) -> Result<bool, NftError> {
        self.borrow_mut().table_exists(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;
    use crate::model::{Chain, Hook, KeyType, Set, Table};
    use crate::object::RawElem;

    fn table() -> Table {
        Table {
            name: "meshnft",
            comment: "a comment".into(),
            chains: vec![Chain {
                name: "output",
                hook: Some(Hook::NatOutput),
            }],
            sets: vec![Set {
                name: "proxy_started",
                key: KeyType::Cgroup,
                interval: false,
                verdict_map: false,
                dynamic: false,
                comment: "started",
                elements: None,
            }],
            rules: Vec::new(),
        }
    }

    fn cg(id: u64) -> RawElem {
        RawElem {
            key: id.to_ne_bytes().to_vec(),
            key_end: None,
            end: false,
            verdict: None,
        }
    }

    #[test]
    fn lists_rules_chain_by_chain_as_the_kernel_does() {
        let mut t = table();
        t.chains.insert(
            0,
            Chain {
                name: "first",
                hook: None,
            },
        );
        let rule = |chain, comment: &str| crate::model::Rule {
            chain,
            stmts: Vec::new(),
            comment: comment.into(),
        };
        t.rules = vec![
            rule("output", "o1"),
            rule("first", "f1"),
            rule("output", "o2"),
            rule("first", "f2"),
        ];
        let f = Fake::with(encode::fresh(&t));
        let l = f.table("meshnft").expect("table");
        let got: Vec<&str> = l.rules.iter().map(|r| r.comment.as_str()).collect();
        assert_eq!(got, ["f1", "f2", "o1", "o2"]);
        let handles: Vec<u64> = l.rules.iter().map(|r| r.handle).collect();
        assert_eq!(handles, [2, 4, 1, 3], "handles in the order of adding");
    }

    #[test]
    fn applies_whole_transactions_or_nothing() {
        let t = table();
        let mut f = Fake::new();
        f.commit(encode::fresh(&t)).expect("fresh");
        let l = f.table("meshnft").expect("table");
        assert_eq!(l.comment.as_deref(), Some("a comment"));
        assert_eq!(l.chains.len(), 1);
        assert_eq!(l.sets.len(), 1);
        // create table again: EEXIST, nothing changes.
        let e = f.commit(encode::fresh(&t)).expect_err("exists");
        assert_eq!(e.errno(), Some(libc::EEXIST));
        // An element, then a refused deletion in the same transaction.
        let mut tx = Transaction::new();
        tx.add_elements("meshnft", "proxy_started", None, &[cg(7)], "mark")
            .delete_elements("meshnft", "proxy_started", &[cg(8)], "unmark");
        assert_eq!(
            f.commit(tx).expect_err("absent").errno(),
            Some(libc::ENOENT)
        );
        assert!(f.table("meshnft").expect("table").sets[0].elems.is_empty());
        assert_eq!((f.sent.len(), f.refused), (3, 2));
        f.fail_next(Call::Exists, libc::EPERM);
        assert_eq!(
            f.delete_table("meshnft").expect_err("injected").errno(),
            Some(libc::EPERM)
        );
        assert!(f.delete_table("meshnft").expect("delete"));
        assert!(!f.delete_table("meshnft").expect("absent"));
        assert!(f.tables.is_empty());
    }
}
