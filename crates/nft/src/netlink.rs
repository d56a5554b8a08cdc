//! nfnetlink message and attribute encoding for nf_tables.
//!
//! Numbers follow the kernel's UAPI headers
//! (`include/uapi/linux/netfilter/nf_tables.h`, `nfnetlink.h`): every
//! nf_tables message is a `struct nlmsghdr` (16 bytes), a `struct nfgenmsg`
//! (family, version 0, `res_id` big-endian) and netlink attributes (TLVs,
//! 4-byte aligned). Integer attributes of nf_tables are big-endian
//! (`NLA_BE32`/`NLA_BE64`); register contents (`NFTA_DATA_VALUE`) are in the
//! byte order of the field they hold.
//!
//! Framing of the header uses `netlink-packet-core`'s buffer types; the
//! nf_tables objects themselves are ours (see `../mod.rs`).

use netlink_packet_core::{NLA_F_NESTED, NlaBuffer, NlasIterator};

/// `NETLINK_NETFILTER` protocol number (`linux/netlink.h`).
pub const NETLINK_NETFILTER: isize = 12;
/// `NFNL_SUBSYS_NFTABLES`.
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFNL_MSG_BATCH_BEGIN` (= `NLMSG_MIN_TYPE`).
pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
/// `NFNL_MSG_BATCH_END`.
pub const NFNL_MSG_BATCH_END: u16 = 0x11;
/// `NFPROTO_INET`: the `inet` family (IPv4 and IPv6 in one table).
pub const NFPROTO_INET: u8 = 1;

/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_EXCL`: fail if the object exists.
pub const NLM_F_EXCL: u16 = 0x200;
/// `NLM_F_CREATE`: create if it does not exist.
pub const NLM_F_CREATE: u16 = 0x400;
/// `NLM_F_APPEND`: add a rule at the end of the chain.
pub const NLM_F_APPEND: u16 = 0x800;

/// nf_tables message types (`enum nf_tables_msg_types`).
#[allow(missing_docs)]
pub mod msg {
    pub const NEWTABLE: u8 = 0;
    pub const GETTABLE: u8 = 1;
    pub const DELTABLE: u8 = 2;
    pub const NEWCHAIN: u8 = 3;
    pub const GETCHAIN: u8 = 4;
    pub const NEWRULE: u8 = 6;
    pub const DELRULE: u8 = 8;
    pub const GETRULE: u8 = 7;
    pub const NEWSET: u8 = 9;
    pub const GETSET: u8 = 10;
    pub const DELSET: u8 = 11;
    pub const NEWSETELEM: u8 = 12;
    pub const GETSETELEM: u8 = 13;
    pub const DELSETELEM: u8 = 14;
}

/// The attributes shared by every object (`nf_tables.h`): lists, an
/// expression's name and data, data values and verdicts. Each object's own
/// attributes are in its file under [`crate::object`], each expression's in
/// its file under [`crate::expr`].
pub mod attr {
    /// `NFTA_LIST_ELEM` (`enum nft_list_attributes`): one item of a list.
    pub const NFTA_LIST_ELEM: u16 = 1;
    /// `NFTA_EXPR_NAME` (`enum nft_expr_attributes`, `NLA_STRING`).
    pub const NFTA_EXPR_NAME: u16 = 1;
    /// `NFTA_EXPR_DATA` (`NLA_NESTED`: the expression's own attributes).
    pub const NFTA_EXPR_DATA: u16 = 2;
    /// `NFTA_DATA_VALUE` (`enum nft_data_attributes`, `NLA_BINARY`).
    pub const NFTA_DATA_VALUE: u16 = 1;
    /// `NFTA_DATA_VERDICT` (`NLA_NESTED`: `NFTA_VERDICT_*`).
    pub const NFTA_DATA_VERDICT: u16 = 2;
    /// `NFTA_VERDICT_CODE` (`enum nft_verdict_attributes`, `NLA_BE32`).
    pub const NFTA_VERDICT_CODE: u16 = 1;
    /// `NFTA_VERDICT_CHAIN` (`NLA_STRING`: a jump's or goto's chain).
    pub const NFTA_VERDICT_CHAIN: u16 = 2;
}

/// Builds one netlink message: header, `nfgenmsg`, attributes.
#[derive(Debug, Clone)]
pub struct MsgBuilder {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

impl MsgBuilder {
    /// A message of `ty` (full 16-bit netlink type) with `flags`, family
    /// `family` and `res_id` (host order; written big-endian).
    pub fn new(ty: u16, flags: u16, family: u8, res_id: u16) -> MsgBuilder {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, patched in finish()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_seq, set by the batch
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
        buf.push(family);
        buf.push(0); // NFNETLINK_V0
        buf.extend_from_slice(&res_id.to_be_bytes());
        MsgBuilder {
            buf,
            nests: Vec::new(),
        }
    }

    /// An nf_tables message (`NFNL_SUBSYS_NFTABLES << 8 | msg`) of the
    /// `inet` family.
    pub fn nft(msg: u8, flags: u16) -> MsgBuilder {
        MsgBuilder::new(
            (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg),
            NLM_F_REQUEST | flags,
            NFPROTO_INET,
            0,
        )
    }

    /// The message's netlink type (`NFNL_SUBSYS_NFTABLES << 8 | msg` for
    /// an nf_tables message).
    pub fn msg_type(&self) -> u16 {
        u16::from_ne_bytes([self.buf[4], self.buf[5]])
    }

    /// Appends an attribute with a raw value.
    pub fn bytes(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.pad();
        self
    }

    /// Appends a NUL-terminated string attribute (`NLA_STRING`).
    pub fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let len = 4 + s.len() + 1;
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.pad();
        self
    }

    /// Appends a big-endian u32 attribute (`NLA_BE32`).
    pub fn be32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.bytes(ty, &v.to_be_bytes())
    }

    /// Opens a nested attribute (`NLA_F_NESTED`); close it with [`end`](Self::end).
    pub fn begin(&mut self, ty: u16) -> &mut Self {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        self
    }

    /// Closes the innermost nested attribute.
    pub fn end(&mut self) -> &mut Self {
        if let Some(at) = self.nests.pop() {
            let len = (self.buf.len() - at) as u16;
            self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// Bytes written so far (offsets of the finished message).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing but the headers was written.
    pub fn is_empty(&self) -> bool {
        self.buf.len() <= 20
    }

    /// Appends the finished message to `out`: the bytes [`finish`](Self::finish)
    /// gives for `seq`, with `flags` added to `nlmsg_flags`. The builder is
    /// kept (a transaction frames its messages without copying them first).
    pub fn finish_into(&self, out: &mut Vec<u8>, seq: u32, flags: u16) {
        let start = out.len();
        out.extend_from_slice(&self.buf);
        seal(&mut out[start..], &self.nests, seq, flags);
    }

    /// The finished message with `seq` (length patched in).
    pub fn finish(mut self, seq: u32) -> Vec<u8> {
        seal(&mut self.buf, &self.nests, seq, 0);
        self.buf
    }
}

/// Finishes the message bytes `m` in place: the nests still open at offsets
/// `nests` end where the message ends (as [`MsgBuilder::end`] would close
/// them), then its length, `flags` added to its flags, and `seq`.
fn seal(m: &mut [u8], nests: &[usize], seq: u32, flags: u16) {
    let len = m.len();
    for &at in nests {
        m[at..at + 2].copy_from_slice(&((len - at) as u16).to_ne_bytes());
    }
    m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    let f = u16::from_ne_bytes([m[6], m[7]]) | flags;
    m[6..8].copy_from_slice(&f.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
}

/// One decoded attribute: type (flags stripped) and value.
#[derive(Debug, Clone, Copy)]
pub struct Attr<'a> {
    /// Attribute type without `NLA_F_NESTED`/`NLA_F_NET_BYTEORDER`.
    pub ty: u16,
    /// Its value.
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The value as a NUL-terminated string (lossy), without the NUL.
    pub fn str(&self) -> String {
        let v = self.value.split(|b| *b == 0).next().unwrap_or_default();
        String::from_utf8_lossy(v).into_owned()
    }

    /// The value as a big-endian u32, if it is 4 bytes.
    pub fn be32(&self) -> Option<u32> {
        self.value.try_into().ok().map(u32::from_be_bytes)
    }

    /// The value as a big-endian u64, if it is 8 bytes.
    pub fn be64(&self) -> Option<u64> {
        self.value.try_into().ok().map(u64::from_be_bytes)
    }

    /// The nested attributes inside this one.
    pub fn nested(&self) -> Vec<Attr<'a>> {
        attrs(self.value)
    }
}

/// Parses a run of attributes (stops at the first malformed one).
pub fn attrs(buf: &[u8]) -> Vec<Attr<'_>> {
    NlasIterator::new(buf)
        .map_while(|a| a.ok())
        .map(|a: NlaBuffer<&[u8]>| {
            let (ty, len) = (a.kind(), usize::from(a.length()));
            let inner = a.into_inner();
            Attr {
                ty,
                value: inner.get(4..len.min(inner.len())).unwrap_or_default(),
            }
        })
        .collect()
}

/// The first attribute of type `ty` in `list`.
pub fn find<'a>(list: &[Attr<'a>], ty: u16) -> Option<Attr<'a>> {
    list.iter().find(|a| a.ty == ty).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_pads_and_nests() {
        let mut m = MsgBuilder::nft(msg::NEWTABLE, NLM_F_CREATE);
        m.str(1, "meshnft");
        m.begin(4).be32(1, 3).end();
        let b = m.finish(7);
        assert_eq!(b.len() % 4, 0);
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 7);
        let a = attrs(&b[20..]);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].str(), "meshnft");
        assert_eq!(a[1].ty, 4);
        assert_eq!(a[1].nested()[0].be32(), Some(3));
    }

    #[test]
    fn finish_into_appends_what_finish_gives() {
        let mut m = MsgBuilder::nft(msg::NEWRULE, NLM_F_CREATE);
        m.str(1, "t");
        // Two nests left open: both end with the message.
        m.begin(4).begin(1).be32(2, 9);
        let mut out = vec![0xaa; 3];
        m.finish_into(&mut out, 42, NLM_F_ACK);
        let mut want = m.clone().finish(42);
        let flags = u16::from_ne_bytes([want[6], want[7]]) | NLM_F_ACK;
        want[6..8].copy_from_slice(&flags.to_ne_bytes());
        assert_eq!(&out[..3], &[0xaa; 3]);
        assert_eq!(&out[3..], &want[..]);
        let a = attrs(&out[3 + 20..]);
        assert_eq!(a[1].nested()[0].nested()[0].be32(), Some(9));
        assert_eq!(a[0].value, b"t\0");
    }
}
