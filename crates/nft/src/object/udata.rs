//! libnftnl's userdata: type-length-value records (`struct nftnl_udata`: a
//! type byte, a length byte, the value) that nft writes into
//! `NFTA_TABLE_USERDATA`, `NFTA_SET_USERDATA` and `NFTA_RULE_USERDATA`. The
//! kernel stores them without reading them; nft prints comments and a
//! set's byte orders from them.

/// `NFTNL_UDATA_TABLE_COMMENT` and `NFTNL_UDATA_RULE_COMMENT`.
pub const COMMENT: u8 = 0;

/// Appends one TLV: type byte, length byte, value (at most 255 bytes).
pub(crate) fn tlv(out: &mut Vec<u8>, ty: u8, value: &[u8]) {
    out.push(ty);
    out.push(value.len().min(255) as u8);
    out.extend_from_slice(&value[..value.len().min(255)]);
}

/// `s` with its NUL terminator, as libnftnl stores strings.
pub(crate) fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Comment userdata of a table or rule (TLV type [`COMMENT`]).
pub fn comment_udata(comment: &str) -> Vec<u8> {
    let mut u = Vec::new();
    tlv(&mut u, COMMENT, &cstr(comment));
    u
}

/// The string of TLV type `ty` in `udata` (up to its NUL); `None` when
/// there is none or the records are malformed.
pub fn udata_comment(udata: &[u8], ty: u8) -> Option<String> {
    let mut at = 0;
    while at + 2 <= udata.len() {
        let (t, l) = (udata[at], udata[at + 1] as usize);
        let v = udata.get(at + 2..at + 2 + l)?;
        if t == ty {
            let s = v.split(|b| *b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(s).into_owned());
        }
        at += 2 + l;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_tlv() {
        assert_eq!(comment_udata("abc"), b"\x00\x04abc\x00");
        assert_eq!(udata_comment(b"\x00\x04abc\x00", 0).as_deref(), Some("abc"));
        assert_eq!(udata_comment(b"\x00\x04abc\x00", 7), None);
        assert_eq!(udata_comment(b"\x00\x09abc", 0), None);
    }
}
