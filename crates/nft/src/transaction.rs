//! A transaction: typed verbs (add a table, chain, set, rule or elements;
//! flush a chain or set; delete elements or a table) that each append the
//! nf_tables message(s) of one object to a netlink batch, in order. The
//! batch is applied whole or not at all ([`crate::NftClient::commit`]).
//!
//! The shape follows knftables' `Transaction` (verbs on objects) and
//! nft's batches: `BATCH_BEGIN`, the messages, `BATCH_END`
//! ([`Transaction::frame`]). The bytes of each message are those of its
//! object's file in [`crate::object`] (what nft 1.0.6 sends for the same
//! text).

use super::model::{Chain, Rule, Set, Table};
use super::netlink::{MsgBuilder, NLM_F_CREATE, NLM_F_EXCL, msg};
use super::object::{RawElem, chain, rule, set, setelem, table};

/// One message of a transaction and what it is about (for error messages).
#[derive(Debug, Clone)]
pub struct Msg {
    /// The message, without its sequence number.
    pub msg: MsgBuilder,
    /// The object it creates or changes, e.g. `set skip_outbound_ports`.
    pub what: String,
    /// (offset in the message, expression name) of each rule expression.
    pub exprs: Vec<(usize, String)>,
}

/// The messages of one transaction, without `BATCH_BEGIN`/`BATCH_END`.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    msgs: Vec<Msg>,
}

/// A transaction framed for one `sendmsg`.
#[derive(Debug)]
pub struct Framed {
    /// `BATCH_BEGIN`, the messages (the last one with `NLM_F_ACK`),
    /// `BATCH_END`.
    pub bytes: Vec<u8>,
    /// Sequence number of `BATCH_BEGIN` (errors about the whole batch).
    pub begin_seq: u32,
    /// Sequence numbers of the messages, in order.
    pub seqs: Vec<u32>,
    /// Sequence number of the last message, the only one that asks for an
    /// acknowledgement: its answer is the last one the kernel sends for
    /// the batch's messages.
    pub ack_seq: u32,
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Transaction {
        Transaction::default()
    }

    /// `create table inet NAME` (`NEWTABLE` with `NLM_F_EXCL`): the whole
    /// transaction fails with `EEXIST` when the table exists.
    pub fn create_table(&mut self, t: &Table) -> &mut Self {
        self.table(t, NLM_F_EXCL)
    }

    /// `add table inet NAME` (`NEWTABLE` with `NLM_F_CREATE`): a no-op for
    /// an existing table (which keeps its comment).
    pub fn add_table(&mut self, t: &Table) -> &mut Self {
        self.table(t, NLM_F_CREATE)
    }

    fn table(&mut self, t: &Table, flags: u16) -> &mut Self {
        let what = format!("table inet {}", t.name);
        self.push(table::new_msg(t, flags), what)
    }

    /// `add chain` (`NEWCHAIN`, `NLM_F_CREATE`): a base chain when it has a
    /// hook.
    pub fn add_chain(&mut self, table: &str, c: &Chain) -> &mut Self {
        let what = format!("chain {}", c.name);
        self.push(chain::new_msg(table, c.name, c.hook), what)
    }

    /// `add set` or `add map` (`NEWSET`, `NLM_F_CREATE`) with the
    /// transaction-local id `id` (`NFTA_SET_ID`), by which later messages
    /// of this transaction name it.
    pub fn add_set(&mut self, table: &str, s: &Set, id: u32) -> &mut Self {
        let what = format!("{} {}", s.kind(), s.name);
        self.push(set::new_msg(table, s, id), what)
    }

    /// `add rule` (`NEWRULE`, appended to its chain); `set_id` gives the
    /// transaction-local id of a set created in this transaction (`None`
    /// for one that exists).
    pub fn add_rule(
        &mut self,
        table: &str,
        r: &Rule,
        set_id: &dyn Fn(&str) -> Option<u32>,
    ) -> &mut Self {
        let (m, exprs) = rule::new_msg(table, r, set_id);
        self.msgs.push(Msg {
            msg: m,
            what: format!("rule \"{}\" in chain {}", r.comment, r.chain),
            exprs,
        });
        self
    }

    /// `add element` (`NEWSETELEM`, at most [`setelem::ELEMS_PER_MSG`]
    /// elements a message) to set `set` (`set_id`: the transaction-local id
    /// when the set is created in this transaction), each message named
    /// `what` in errors.
    pub fn add_elements(
        &mut self,
        table: &str,
        set: &str,
        set_id: Option<u32>,
        elems: &[RawElem],
        what: &str,
    ) -> &mut Self {
        for m in setelem::new_msgs(table, set, set_id, elems) {
            self.push(m, what);
        }
        self
    }

    /// `delete element` (`DELSETELEM`) from an existing set; the
    /// transaction fails with `ENOENT` when one is not there.
    pub fn delete_elements(
        &mut self,
        table: &str,
        set: &str,
        elems: &[RawElem],
        what: &str,
    ) -> &mut Self {
        for m in setelem::del_msgs(table, set, elems) {
            self.push(m, what);
        }
        self
    }

    /// `flush chain` (`DELRULE` without a handle: every rule of it).
    pub fn flush_chain(&mut self, table: &str, chain: &str) -> &mut Self {
        self.push(
            rule::flush_msg(table, chain),
            format!("flush of chain {chain}"),
        )
    }

    /// `flush set` (`DELSETELEM` without elements: every element of it).
    pub fn flush_set(&mut self, table: &str, set: &str) -> &mut Self {
        self.push(
            setelem::flush_msg(table, set),
            format!("flush of set {set}"),
        )
    }

    /// `delete set` (`DELSET`) of an existing set: fails with `ENOENT` when
    /// there is none, `EBUSY` while a rule uses it.
    pub fn delete_set(&mut self, table: &str, set: &str) -> &mut Self {
        self.push(set::del_msg(table, set), format!("set {set}"))
    }

    /// `delete table inet NAME` (`DELTABLE`): fails with `ENOENT` when
    /// there is none.
    pub fn delete_table(&mut self, name: &str) -> &mut Self {
        self.push(table::del_msg(name), format!("table inet {name}"))
    }

    /// Appends the messages of `other`, in order.
    pub fn append(&mut self, other: Transaction) -> &mut Self {
        self.msgs.extend(other.msgs);
        self
    }

    /// The messages, in order.
    pub fn msgs(&self) -> &[Msg] {
        &self.msgs
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// True when the transaction has no message (committing it sends
    /// nothing).
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    fn push(&mut self, msg: MsgBuilder, what: impl Into<String>) -> &mut Self {
        self.msgs.push(Msg {
            msg,
            what: what.into(),
            exprs: Vec::new(),
        });
        self
    }

    /// Frames the transaction with sequence numbers from `first_seq` on:
    /// `NFNL_MSG_BATCH_BEGIN` (`res_id` = `NFNL_SUBSYS_NFTABLES`), the
    /// messages, then `NFNL_MSG_BATCH_END`. Only the last message carries
    /// `NLM_F_ACK`: nfnetlink (`nfnetlink_rcv_batch`) queues an error for
    /// every message that fails, whatever its flags, and an acknowledgement
    /// for every message with `NLM_F_ACK`, in the order it processed them,
    /// and sends the queue once the batch is committed or aborted; so the
    /// last message's answer comes after every error of the batch. (Errors
    /// about the batch as a whole answer `BATCH_BEGIN`.) One answer per
    /// transaction instead of one per message: ~50 fewer `recvfrom` pairs
    /// for a pod's table.
    pub fn frame(&self, first_seq: u32) -> Framed {
        use super::netlink::{
            NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFNL_SUBSYS_NFTABLES, NLM_F_ACK,
            NLM_F_REQUEST,
        };
        let begin_seq = first_seq;
        let begin = MsgBuilder::new(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES);
        let end = MsgBuilder::new(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES);
        // One buffer of the batch's exact size: no growth, no copy per message.
        let size = begin.len() + end.len() + self.msgs.iter().map(|m| m.msg.len()).sum::<usize>();
        let mut bytes = Vec::with_capacity(size);
        begin.finish_into(&mut bytes, begin_seq, 0);
        let mut seqs = Vec::with_capacity(self.msgs.len());
        let last = self.msgs.len().saturating_sub(1);
        for (i, m) in self.msgs.iter().enumerate() {
            let seq = begin_seq.wrapping_add(1 + i as u32);
            seqs.push(seq);
            let ack = if i == last { NLM_F_ACK } else { 0 };
            m.msg.finish_into(&mut bytes, seq, ack);
        }
        let end_seq = begin_seq.wrapping_add(1 + self.msgs.len() as u32);
        end.finish_into(&mut bytes, end_seq, 0);
        Framed {
            bytes,
            begin_seq,
            ack_seq: seqs.last().copied().unwrap_or(begin_seq),
            seqs,
        }
    }

    /// Whether committing the transaction frees kernel objects: it deletes
    /// a table, flushes a chain (`DELRULE`) or a set (`DELSETELEM`). Only
    /// then does nf_tables queue destroy work, which the last close of the
    /// socket waits for (see [`super::close_detached`]).
    pub fn frees(&self) -> bool {
        use super::netlink::NFNL_SUBSYS_NFTABLES;
        self.msgs.iter().any(|m| {
            let ty = m.msg.msg_type();
            ty >> 8 == NFNL_SUBSYS_NFTABLES
                && matches!(
                    (ty & 0xff) as u8,
                    msg::DELTABLE | msg::DELRULE | msg::DELSETELEM
                )
        })
    }
}
