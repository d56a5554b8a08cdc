//! pin and unpin against the in-memory nf_tables client
//! (`nft::fake::Fake`): the table read back over the seam, the checks
//! before a pin, and the one transaction per change (no root, no cgroup2
//! mount: the cgroup is given as found).

use super::*;
use crate::config::{InitPhaseConf, LinkerdConf, Settings};
use crate::error::Code;
use crate::nft::fake::{Call, Fake};
use crate::nft::model::Table;
use crate::nft::{encode, object::RawElem};
use crate::table::ruleset::{self, Levels};
use std::path::PathBuf;

const CONTAINER: u64 = 401;

fn settings() -> Settings {
    let l: LinkerdConf = serde_json::from_value(serde_json::json!({})).expect("linkerd");
    let i: InitPhaseConf = serde_json::from_value(serde_json::json!({})).expect("initPhase");
    l.settings(&i).expect("settings")
}

/// A fake namespace holding the table ADD writes for `levels`.
fn pod(levels: Option<Levels>) -> Fake {
    Fake::with(encode::fresh(&ruleset::build(&settings(), levels, "test")))
}

fn levels() -> Option<Levels> {
    Some(Levels {
        pod: 3,
        container: 4,
    })
}

/// The container cgroup at `level`, as `cgroupid::locate` finds it.
fn at(level: usize) -> impl FnOnce() -> OpResult<(Located, String)> {
    move || {
        let rel = PathBuf::from("kubepods/burstable/pod1/c1");
        Ok((
            Located {
                abs: PathBuf::from("/sys/fs/cgroup").join(&rel),
                rel,
                level,
                id: CONTAINER,
            },
            "kubepods/burstable/pod1/c1".into(),
        ))
    }
}

/// The `init_phase` map's elements in the fake.
fn pins(f: &Fake) -> Vec<RawElem> {
    let t = f.table(TABLE_NAME).expect("table");
    let m = t.sets.iter().find(|s| s.name == "init_phase").expect("map");
    m.elems.clone()
}

fn pinned(v: Verdict) -> RawElem {
    RawElem {
        key: CONTAINER.to_ne_bytes().to_vec(),
        key_end: None,
        end: false,
        verdict: Some(v),
    }
}

#[test]
fn pin_change_and_unpin_are_one_transaction_each() {
    let mut f = pod(levels());
    let c = apply(&mut f, "ns", at(4), Some(PinVerdict::Bypass), false).expect("pin");
    assert_eq!((c.before, c.after.clone()), (None, Some(Verdict::Accept)));
    assert_eq!(
        c.transaction,
        "add element inet meshnft init_phase { \"kubepods/burstable/pod1/c1\" : accept }\n"
    );
    assert_eq!((f.sent.len(), f.refused), (1, 0));
    assert_eq!(pins(&f), vec![pinned(Verdict::Accept)]);

    // The same pin again: nothing to send.
    let c = apply(&mut f, "ns", at(4), Some(PinVerdict::Bypass), false).expect("again");
    assert_eq!(c.before, c.after);
    assert!(c.transaction.is_empty());
    assert_eq!(f.sent.len(), 1);

    // Another verdict: the old element out and the new one in, together.
    let c = apply(&mut f, "ns", at(4), Some(PinVerdict::Redirect), false).expect("change");
    assert_eq!(c.before, Some(Verdict::Accept));
    assert!(
        c.transaction.starts_with("delete element"),
        "{}",
        c.transaction
    );
    assert_eq!(f.sent.len(), 2);
    assert_eq!(f.sent[1].len(), 2, "DELSETELEM and NEWSETELEM in one batch");
    let redirect = Verdict::Goto("outbound_redirect".into());
    assert_eq!(pins(&f), vec![pinned(redirect.clone())]);

    let c = apply(&mut f, "ns", at(4), None, false).expect("unpin");
    assert_eq!((c.before, c.after), (Some(redirect), None));
    assert_eq!(f.sent.len(), 3);
    assert!(pins(&f).is_empty());

    // Unpinning what is not pinned sends nothing.
    let c = apply(&mut f, "ns", at(4), None, false).expect("unpin again");
    assert!(c.transaction.is_empty());
    assert_eq!(f.sent.len(), 3);
}

#[test]
fn pin_refuses_another_level_unless_told() {
    let mut f = pod(levels());
    let e = apply(&mut f, "ns", at(5), Some(PinVerdict::Bypass), false).expect_err("level");
    assert!(
        matches!(&e, OpError::CannotPin(m) if m.contains("level 5") && m.contains("level 4")),
        "{e}"
    );
    assert!(f.sent.is_empty());
    apply(&mut f, "ns", at(5), Some(PinVerdict::Bypass), true).expect("--any-level");
    assert_eq!(pins(&f), vec![pinned(Verdict::Accept)]);
}

#[test]
fn pin_needs_a_table_that_consults_the_map() {
    let e = apply(&mut Fake::new(), "ns", at(4), None, false).expect_err("no table");
    assert!(matches!(&e, OpError::NoTable(w) if w == "ns"), "{e}");

    // Written without the init phase: no map, for a pin and an unpin.
    let mut f = pod(None);
    for verdict in [Some(PinVerdict::Redirect), None] {
        let e = apply(&mut f, "ns", at(4), verdict, false).expect_err("plain");
        assert!(
            matches!(&e, OpError::CannotPin(m) if m.contains("no init_phase map")),
            "{e}"
        );
    }
    assert!(f.sent.is_empty());

    // Written without the init phase by meshnft 0.1.0, which declared the
    // cgroup sets in every table: the map is there, no rule reads it.
    let mut old = ruleset::build(&settings(), None, "test");
    let with = ruleset::build(&settings(), levels(), "test");
    old.sets.extend(
        with.sets
            .into_iter()
            .filter(|s| s.key == ruleset::KeyType::Cgroup),
    );
    let mut f = Fake::with(encode::fresh(&old));
    let e = apply(&mut f, "ns", at(4), Some(PinVerdict::Redirect), false).expect_err("plain");
    assert!(
        matches!(&e, OpError::CannotPin(m) if m.contains("no rule that consults init_phase")),
        "{e}"
    );
    // An unpin there is still allowed (and has nothing to remove).
    assert!(apply(&mut f, "ns", at(4), None, false).is_ok());
    assert!(f.sent.is_empty());

    // No map at all: the cgroup is not even looked up.
    let bare = Table {
        name: TABLE_NAME,
        comment: "bare".into(),
        sets: Vec::new(),
        chains: Vec::new(),
        rules: Vec::new(),
    };
    let mut f = Fake::with(encode::fresh(&bare));
    let never = || -> OpResult<(Located, String)> { panic!("located before the table's check") };
    let e = apply(&mut f, "ns", never, None, false).expect_err("no map");
    assert!(
        matches!(&e, OpError::CannotPin(m) if m.contains("no init_phase map")),
        "{e}"
    );
}

#[test]
fn a_refused_pin_changes_nothing() {
    let mut f = pod(levels());
    apply(&mut f, "ns", at(4), Some(PinVerdict::Bypass), false).expect("pin");
    f.fail_next(Call::Commit, libc::ENOMEM);
    let e = apply(&mut f, "ns", at(4), Some(PinVerdict::Redirect), false).expect_err("refused");
    assert!(
        matches!(&e, OpError::Nft(e) if e.code == Code::NftTransaction),
        "{e}"
    );
    assert_eq!(pins(&f), vec![pinned(Verdict::Accept)]);
    // A read the kernel refuses is an error too, before any transaction.
    f.fail_next(Call::Read, libc::EINTR);
    assert!(matches!(
        apply(&mut f, "ns", at(4), None, false),
        Err(OpError::Nft(_))
    ));
    assert_eq!((f.sent.len(), f.refused), (2, 1));
}
