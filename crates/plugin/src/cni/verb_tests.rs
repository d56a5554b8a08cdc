//! The verbs' decisions about the pod's table, against the in-memory
//! nf_tables client (`nft::fake::Fake`): no root, no namespace, no kernel.
//! ADD's first write, re-ADD and failure; DEL of a present, absent or
//! unremovable table; CHECK of a missing, equal or altered table; GC's
//! choice of the stale tables; STATUS's dry run.

use super::podtable::{self, Phase};
use super::{PodCgroup, check, gc, status};
use crate::config::{self, Settings};
use crate::error::Code;
use crate::nft::fake::{Call, Fake};
use crate::nft::{NftClient, NftError, TABLE_NAME, Transaction, encode};
use crate::state::Record;
use crate::table::ruleset::{self, Levels};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A fake that the test keeps while the code under test opens it.
type Shared = Rc<RefCell<Fake>>;

fn settings() -> Settings {
    let conf = br#"{"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft"}"#;
    config::decode(conf)
        .and_then(|c| c.settings())
        .expect("settings")
}

/// A pod whose cgroup is a directory every user can stat (its inode is
/// the cgroup id the init phase is closed with).
fn pod() -> PodCgroup {
    PodCgroup {
        rel: Some(PathBuf::from("kubepods/pod1")),
        abs: Some(std::env::temp_dir()),
        levels: Some(Levels {
            pod: 3,
            container: 4,
        }),
        ..Default::default()
    }
}

fn cgroup_id(p: &Path) -> Vec<u8> {
    crate::pod::cgroup::id_of(p)
        .expect("a directory")
        .to_ne_bytes()
        .to_vec()
}

fn started(f: &Fake) -> Vec<Vec<u8>> {
    let t = f.table(TABLE_NAME).expect("table");
    let s = t.sets.iter().find(|s| s.name == "proxy_started");
    s.map(|s| s.elems.iter().map(|e| e.key.clone()).collect())
        .unwrap_or_default()
}

/// The table as `settings` gives it, in a fake of its own.
fn written(settings: &Settings, comment: &str) -> Fake {
    Fake::with(encode::fresh(&ruleset::build(
        settings,
        pod().levels,
        comment,
    )))
}

#[test]
fn add_writes_the_table_in_one_transaction() {
    let mut f = Fake::new();
    let mut s = settings();
    let re_add = podtable::write(&mut f, &mut s, &pod(), "meshnft test", "ns/pod");
    assert!(!re_add.expect("ADD"));
    assert_eq!((f.sent.len(), f.refused), (1, 0));
    assert_eq!(f.tables, written(&settings(), "meshnft test").tables);
    assert_eq!(
        podtable::existing_phase(&mut f).expect("read"),
        Some(Phase::Open)
    );
}

#[test]
fn re_add_keeps_a_closed_init_phase_closed() {
    let mut f = written(&settings(), "first ADD");
    // The proxy of the running pod has started: its cgroup is in the set.
    let mut tx = Transaction::new();
    let proxy = crate::nft::object::raw_elems(&[ruleset::Elem::Cgroup(42)]);
    tx.add_elements(TABLE_NAME, "proxy_started", None, &proxy, "proxy");
    f.commit(tx).expect("proxy started");
    let mut s = settings();
    assert!(podtable::write(&mut f, &mut s, &pod(), "second ADD", "ns/pod").expect("re-ADD"));
    assert!(s.init_phase.enabled);
    let keys = started(&f);
    assert!(keys.contains(&proxy[0].key), "{keys:?}");
    assert!(keys.contains(&cgroup_id(&std::env::temp_dir())), "{keys:?}");
    // The comment of the first ADD stays (nf_tables keeps it).
    let t = f.table(TABLE_NAME).expect("table");
    assert_eq!(t.comment.as_deref(), Some("first ADD"));
    assert_eq!(
        podtable::existing_phase(&mut f).expect("read"),
        Some(Phase::Closed)
    );
}

#[test]
fn re_add_of_an_open_phase_leaves_it_open() {
    let mut f = written(&settings(), "first ADD");
    let mut s = settings();
    assert!(podtable::write(&mut f, &mut s, &pod(), "second ADD", "ns/pod").expect("re-ADD"));
    assert!(started(&f).is_empty());
    assert_eq!(
        podtable::existing_phase(&mut f).expect("read"),
        Some(Phase::Open)
    );
}

#[test]
fn re_add_without_the_cgroup_id_writes_no_init_phase() {
    let mut f = written(&settings(), "first ADD");
    let mut tx = Transaction::new();
    let proxy = crate::nft::object::raw_elems(&[ruleset::Elem::Cgroup(42)]);
    tx.add_elements(TABLE_NAME, "proxy_started", None, &proxy, "proxy");
    f.commit(tx).expect("proxy started");
    let mut s = settings();
    let gone = PodCgroup { abs: None, ..pod() };
    assert!(podtable::write(&mut f, &mut s, &gone, "second ADD", "ns/pod").expect("re-ADD"));
    assert!(!s.init_phase.enabled, "the record must say: no init phase");
    let t = f.table(TABLE_NAME).expect("table");
    assert!(
        !t.rules.iter().any(|r| r.comment.starts_with("init phase")),
        "a re-ADD reopened the init phase"
    );
}

/// The names of the sets of the table in `f`.
fn set_names(f: &Fake) -> Vec<String> {
    let t = f.table(TABLE_NAME).expect("table");
    t.sets.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn re_add_without_the_init_phase_removes_the_cgroup_sets() {
    // A table with the init phase (or one meshnft 0.1.0 wrote without it,
    // which has the same sets) re-ADDed without a pod cgroup: its table is
    // then the one a first ADD writes without the init phase.
    let mut f = written(&settings(), "first ADD");
    assert!(set_names(&f).contains(&"proxy_started".to_string()));
    let plain = PodCgroup {
        levels: None,
        ..pod()
    };
    let mut s = settings();
    assert!(podtable::write(&mut f, &mut s, &plain, "second ADD", "ns/pod").expect("re-ADD"));
    let first_add = Fake::with(encode::fresh(&ruleset::build(&settings(), None, "x")));
    assert_eq!(set_names(&f), set_names(&first_add));
    for gone in ["proxy_started", "init_containers", "init_phase"] {
        assert!(!set_names(&f).contains(&gone.to_string()), "{gone} is left");
    }
    // Nothing left to remove: the next re-ADD deletes nothing.
    assert!(podtable::write(&mut f, &mut s, &plain, "third ADD", "ns/pod").expect("re-ADD"));
    assert_eq!(f.refused, 0);
    // With the init phase again, the sets come back, the phase closed (it
    // was never open in the table without it).
    assert!(podtable::write(&mut f, &mut s, &pod(), "fourth ADD", "ns/pod").expect("re-ADD"));
    assert_eq!(
        podtable::existing_phase(&mut f).expect("read"),
        Some(Phase::Closed)
    );
}

#[test]
fn add_fails_closed_when_the_kernel_refuses() {
    let mut f = Fake::new();
    f.fail_next(Call::Commit, libc::EOPNOTSUPP);
    let e = podtable::write(&mut f, &mut settings(), &pod(), "c", "ns/pod").expect_err("refused");
    assert_eq!(e.code, Code::NftTransaction);
    assert!(f.tables.is_empty(), "a half table was left");
    assert_eq!(f.sent.len(), 1, "no second attempt");
}

#[test]
fn add_that_loses_the_race_to_another_add_rewrites_the_table() {
    let mut f = Fake::new();
    // Created by someone else between the GETTABLE and the commit.
    f.fail_next(Call::Commit, libc::EEXIST);
    let re_add = podtable::write(&mut f, &mut settings(), &pod(), "c", "ns/pod");
    assert!(re_add.expect("re-ADD"));
    assert_eq!(f.sent.len(), 2);
    assert!(f.table(TABLE_NAME).is_some());
}

#[test]
fn del_of_an_absent_table_succeeds_without_a_transaction() {
    let mut f = Fake::new();
    assert!(!podtable::remove(&mut f).expect("DEL"));
    assert!(f.sent.is_empty());
    let mut f = written(&settings(), "c");
    assert!(podtable::remove(&mut f).expect("DEL"));
    assert!(f.tables.is_empty());
}

#[test]
fn del_that_the_kernel_refuses_fails_and_keeps_the_table() {
    let mut f = written(&settings(), "c");
    f.fail_next(Call::Commit, libc::EBUSY);
    let e = podtable::remove(&mut f).expect_err("refused");
    assert_eq!(e.code, Code::NftTransaction);
    assert!(f.table(TABLE_NAME).is_some());
}

fn scratch() -> Result<Fake, NftError> {
    Ok(Fake::new())
}

#[test]
fn check_reports_a_missing_or_altered_table() {
    let table = ruleset::build(&settings(), pod().levels, "");
    let ns = Path::new("/run/netns/pod");
    let e = check::verify(&mut Fake::new(), scratch, &table, ns).expect_err("missing");
    assert_eq!(e.code, Code::CheckMismatch);
    assert!(e.msg.contains("missing"), "{}", e.msg);

    let mut f = written(&settings(), "meshnft 1.0 pod uid u ns/pod");
    check::verify(&mut f, scratch, &table, ns).expect("the table ADD wrote");

    let mut tx = Transaction::new();
    tx.flush_chain(TABLE_NAME, "output");
    f.commit(tx).expect("flush");
    let e = check::verify(&mut f, scratch, &table, ns).expect_err("altered");
    assert_eq!(e.code, Code::CheckMismatch);
    assert!(e.details.contains("output"), "{}", e.details);
}

fn record(id: &str, netns: &str, ino: u64) -> Record {
    Record {
        container_id: id.into(),
        ifname: "eth0".into(),
        netns: netns.into(),
        netns_id: (4, ino),
        pod: None,
        pod_uid: None,
        pod_cgroup: None,
        levels: None,
        created: 0,
        meshed: true,
        settings: None,
        network: None,
    }
}

#[test]
fn gc_removes_only_the_stale_tables() {
    let s = settings();
    // a: stale; b: stale but its netns is a live attachment's; c: live;
    // d: stale, its netns gone; e: stale, its table cannot be removed.
    let fakes: std::collections::BTreeMap<&str, Shared> = ["a", "b", "e"]
        .into_iter()
        .map(|n| (n, Rc::new(RefCell::new(written(&s, n)))))
        .collect();
    fakes["e"].borrow_mut().fail_next(Call::Commit, libc::EBUSY);
    let stale = [
        record("a", "a", 1),
        record("b", "b", 2),
        record("d", "d", 4),
        record("e", "e", 5),
    ];
    let live = [record("c", "b", 2)];
    let dir = std::env::temp_dir().join("meshnft-gc-unit-test-no-such-dir");
    let failures = gc::sweep(&dir, &stale, &live, |rec| {
        let name = rec.netns.to_str().unwrap_or_default();
        fakes.get(name).map(|f| Ok::<Shared, NftError>(f.clone()))
    });
    let fakes: std::collections::BTreeMap<&str, Fake> =
        fakes.into_iter().map(|(n, f)| (n, f.take())).collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].starts_with("e/eth0: "), "{failures:?}");
    assert!(fakes["a"].tables.is_empty(), "the stale table stays");
    assert!(
        fakes["b"].table(TABLE_NAME).is_some(),
        "a shared table went"
    );
    assert!(fakes["b"].sent.is_empty());
    assert!(fakes["e"].table(TABLE_NAME).is_some());
}

#[test]
fn status_dry_run_passes_or_names_the_refusal() {
    let table = ruleset::build(&settings(), pod().levels, "meshnft status dry run");
    assert_eq!(status::dry_run(scratch, &table), Ok("ok".to_string()));
    let refusing = || {
        let mut f = Fake::new();
        f.fail_next(Call::Commit, libc::EOPNOTSUPP);
        Ok::<Fake, NftError>(f)
    };
    let e = status::dry_run(refusing, &table).expect_err("refused");
    assert!(e.contains("the kernel refused"), "{e}");
}
