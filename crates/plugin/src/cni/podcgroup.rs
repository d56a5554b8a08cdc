//! The pod cgroup a verb keys the init phase on: the one the runtime named
//! or the one found by `K8S_POD_UID`, and its cgroup levels.

use super::env::K8sArgs;
use crate::config::Settings;
use crate::error::Result;
use crate::pod::cgroup;
use crate::table::ruleset::Levels;
use std::path::PathBuf;

/// Where the init phase can key on: the pod cgroup and its levels.
#[derive(Debug, Clone, Default)]
pub struct PodCgroup {
    /// Pod cgroup relative to the cgroup2 mount.
    pub rel: Option<PathBuf>,
    /// Pod cgroup as an absolute path.
    pub abs: Option<PathBuf>,
    /// Levels P and C.
    pub levels: Option<Levels>,
    /// Why there are no levels (for the warning).
    pub why_not: Option<String>,
    /// The pod cgroup is the one the runtime named (`runtimeConfig.cgroupPath`),
    /// not one found by searching.
    pub from_runtime: bool,
}

/// Finds the pod cgroup of `K8S_POD_UID` (docs/design.md#where-a-pods-data-comes-from): the one the runtime
/// named (`runtime`, from [`cgroup::runtime_cgroup_path`]) when it is that
/// pod's directory inside the search root (see
/// [`cgroup::runtime_path_fits`]) and the cgroup2 mount shows the
/// hierarchy's root, else found by [`cgroup::find_pod`]. Never fails:
/// without it the table is written without the init phase (docs/design.md#7-unknown-pod-cgroup-the-plain-table);
/// `why_not` says why (also when the kernel lacks `socket cgroupv2`, see
/// [`crate::cni::kernel`]). With the init phase off, `levels` is `None` and no
/// level probe runs. A bad `levelOffset` is the only error (code 7).
pub fn pod_cgroup(
    settings: &Settings,
    k8s: &K8sArgs,
    runtime: Option<&std::path::Path>,
    state_dir: &std::path::Path,
) -> Result<PodCgroup> {
    let Some(uid) = &k8s.pod_uid else {
        return Ok(PodCgroup {
            why_not: Some("the runtime gave no K8S_POD_UID in CNI_ARGS".into()),
            ..Default::default()
        });
    };
    if !cgroup::valid_pod_uid(uid) {
        return Ok(PodCgroup {
            why_not: Some(format!("K8S_POD_UID {uid:?} is not a pod UID")),
            ..Default::default()
        });
    }
    let mount = match cgroup::cgroup2_mount() {
        Ok(Some(m)) => m,
        Ok(None) => {
            return Ok(PodCgroup {
                why_not: Some("no cgroup2 mount in /proc/self/mountinfo".into()),
                ..Default::default()
            });
        }
        Err(e) => {
            return Ok(PodCgroup {
                why_not: Some(e.to_string()),
                ..Default::default()
            });
        }
    };
    let root = &settings.init_phase.cgroup_root;
    let named = runtime.filter(|rel| {
        let fits = mount.root == std::path::Path::new("/")
            && cgroup::runtime_path_fits(&mount.mount_point, root, rel, uid);
        if !fits {
            tracing::debug!(
                cgroup_path = %rel.display(),
                "runtimeConfig.cgroupPath is not pod {uid}'s cgroup below {}: searching",
                mount.mount_point.join(root).display()
            );
        }
        fits
    });
    let from_runtime = named.is_some();
    let Some(rel) = named
        .map(std::path::Path::to_path_buf)
        .or_else(|| cgroup::find_pod(&mount.mount_point, root, uid))
    else {
        return Ok(PodCgroup {
            why_not: Some(format!(
                "no cgroup for pod UID {uid} under {}",
                mount.mount_point.join(root).display()
            )),
            ..Default::default()
        });
    };
    // Without the init phase no rule keys on cgroup levels (the plain
    // redirect table): no level probe, nothing that needs `socket cgroupv2`.
    if !settings.init_phase.enabled {
        return Ok(PodCgroup {
            abs: Some(mount.mount_point.join(&rel)),
            rel: Some(rel),
            levels: None,
            why_not: None,
            from_runtime,
        });
    }
    // Without `socket cgroupv2` (Linux < 5.13) no level can be used: the
    // plain redirect table, with the one warning ADD logs for `why_not`.
    if let Ok(false) = crate::cni::kernel::socket_cgroupv2(state_dir) {
        return Ok(PodCgroup {
            why_not: Some(crate::cni::kernel::MISSING.into()),
            ..Default::default()
        });
    }
    let offset = match settings.init_phase.level_offset {
        Some(o) => o,
        None => match crate::pod::levelprobe::offset(state_dir, &mount, root) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(
                    "{e}; assuming cgroup levels need no offset (set initPhase.levelOffset to override)"
                );
                0
            }
        },
    };
    let levels = cgroup::levels(&mount.root, &rel, offset)?;
    Ok(PodCgroup {
        abs: Some(mount.mount_point.join(&rel)),
        rel: Some(rel),
        levels: Some(levels),
        why_not: None,
        from_runtime,
    })
}
