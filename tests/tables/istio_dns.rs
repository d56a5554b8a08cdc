//! A table that no entry of crates/testkit/testdata/entries.json gives alone: Istio's DNS
//! capture comes from the pod (its proxy's `ISTIO_META_DNS_CAPTURE=true`), not the entry.
//! Shared by tests/golden.rs (its golden files) and tests/nft_builds.rs (nft's listing of it).

use meshnft::config::{self, NetConf};
use meshnft::pod::info::{Container, PodInfo, PodSource};
use meshnft::table::ruleset::{self, Levels, Table};
use meshnft_testkit as support;

/// Istio's default entry for a pod whose proxy has
/// `ISTIO_META_DNS_CAPTURE=true` (DNS capture comes from the pod, not the
/// entry).
pub fn istio_dns(pod: Option<u8>) -> Table {
    let conf: NetConf =
        config::decode(support::entry("istio-defaults").to_string().as_bytes()).expect("config");
    let mut proxy = Container {
        name: "istio-proxy".into(),
        ..Default::default()
    };
    proxy
        .env
        .insert("ISTIO_META_DNS_CAPTURE".into(), "true".into());
    let mut info = PodInfo::from_annotations(
        [(
            "sidecar.istio.io/status".to_string(),
            "{\"containers\":[\"istio-proxy\"]}".to_string(),
        )]
        .into_iter()
        .collect(),
    );
    info.source = PodSource::Api;
    info.containers = vec![proxy];
    let s = info
        .apply(&conf.settings().expect("settings"))
        .expect("the pod's settings");
    let levels = pod.map(|pod| Levels {
        pod,
        container: pod + 1,
    });
    ruleset::build(&s, levels, "meshnft golden")
}
