//! The kernel a node reports (`status.nodeInfo.kernelVersion`, kubelet's `uname -r`) against
//! the init phase's need: `socket cgroupv2` in nf_tables, Linux 5.13 and later.

/// The first kernel with nf_tables' `socket cgroupv2` (the init phase's key).
pub const INIT_PHASE: (u32, u32) = (5, 13);

/// `major.minor` of a `uname -r` text (`5.10.0-23-amd64` is (5, 10)); `None` when it does not
/// start with two numbers.
pub fn parse(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases() {
        assert_eq!(parse("5.10.0-23-amd64"), Some((5, 10)));
        assert_eq!(parse("6.1.0"), Some((6, 1)));
        assert_eq!(parse("5.15.0-1034-aws"), Some((5, 15)));
        assert_eq!(parse("5.13"), Some((5, 13)));
        assert_eq!(parse("4.19.0+"), Some((4, 19)));
        assert_eq!(parse("6.12rc1"), Some((6, 12)));
        assert_eq!(parse("linux"), None);
        assert_eq!(parse("6"), None);
        assert!(parse("5.12.19").unwrap() < INIT_PHASE);
        assert!(parse("5.13.0").unwrap() >= INIT_PHASE);
    }
}
