//! A [`Table`] lowered to one nf_tables transaction (a netlink batch): the
//! table, its chains, its sets, their elements and its rules, each object's
//! message from its file in [`crate::object`].
//!
//! Message flags, attribute order and userdata follow what nft 1.0.6 sends
//! for the same text (`nft --debug=mnl -f`), so that a node with `nft`
//! lists a table written by meshnft exactly like one written by nft. A
//! first ADD's transaction ([`fresh`]) creates the table (`NLM_F_EXCL`);
//! a re-ADD's ([`replace`]) declares every object, flushes the chains and
//! static sets, and refills them.

use super::model::Table;
use super::object::raw_elems;
use super::transaction::Transaction;

/// The transaction of a first ADD: `create table` (fails with `EEXIST`,
/// atomically, when the table exists) and every object, with no flushes.
pub fn fresh(t: &Table) -> Transaction {
    build(t, true)
}

/// The idempotent transaction of a re-ADD: declares every object (a no-op
/// for existing ones), flushes every chain and static set, then refills
/// them. The dynamic sets and the verdict map keep their elements, so a
/// closed init phase stays closed and pins stay.
pub fn replace(t: &Table) -> Transaction {
    build(t, false)
}

/// The transaction-local id of each set of `t` (`NFTA_SET_ID`): its
/// position, from 1.
pub fn set_id(t: &Table, name: &str) -> Option<u32> {
    t.sets
        .iter()
        .position(|s| s.name == name)
        .map(|i| i as u32 + 1)
}

fn build(t: &Table, fresh: bool) -> Transaction {
    let mut tx = Transaction::new();
    if fresh {
        tx.create_table(t);
    } else {
        tx.add_table(t);
    }
    for c in &t.chains {
        tx.add_chain(t.name, c);
    }
    for (i, s) in t.sets.iter().enumerate() {
        tx.add_set(t.name, s, i as u32 + 1);
    }
    if !fresh {
        for c in &t.chains {
            tx.flush_chain(t.name, c.name);
        }
        for s in t.sets.iter().filter(|s| s.elements.is_some()) {
            tx.flush_set(t.name, s.name);
        }
    }
    let set_id = |n: &str| set_id(t, n);
    for s in &t.sets {
        if let Some(e) = s.elements.as_ref().filter(|e| !e.is_empty()) {
            let what = format!("elements of set {}", s.name);
            tx.add_elements(t.name, s.name, set_id(s.name), &raw_elems(e), &what);
        }
    }
    for r in &t.rules {
        tx.add_rule(t.name, r, &set_id);
    }
    tx
}

/// `DELTABLE inet NAME`.
pub fn delete_table(name: &str) -> Transaction {
    let mut tx = Transaction::new();
    tx.delete_table(name);
    tx
}
