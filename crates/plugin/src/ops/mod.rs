//! The operator commands: `meshnft inspect`, `explain`, `pin` and `unpin`,
//! run by hand on a node against one pod's table.
//!
//! - [`args`]: the subcommands' arguments, as the command line parses them;
//! - [`commands`]: each subcommand, from parsed arguments to the text for
//!   stdout (and the exit code);
//! - [`podns`]: which pod network namespace a command works on
//!   (`--netns`, `--pid`, `--container-id`, or all of them);
//! - [`cgroupid`]: cgroup v2 ids and paths: user paths to ids and levels,
//!   ids back to directories, paths to nft's element form;
//! - [`inspect`]: a pod's redirect state, read back from its table;
//! - [`explain`]: which rule of the table decides a flow, and why;
//! - [`pin`]: one container's explicit verdict in the `init_phase` map;
//! - [`error`]: what these commands report on failure.
//!
//! Below: the table read back ([`crate::table::readback`]), the pod
//! ([`crate::pod`]), the state records and [`crate::nft`]. Above: only the
//! command line ([`crate::cli`]).

pub mod args;
pub mod cgroupid;
pub mod commands;
pub mod error;
pub mod explain;
pub mod inspect;
pub mod pin;
pub mod podns;
pub mod userns;
