//! Errors and their CNI error codes.
//!
//! Every failure of a CNI verb becomes one CNI error result on stdout
//! (CNI spec 1.1, section "Error"): `{"cniVersion", "code", "msg", "details"}`.
//! Codes 1-99 are the spec's well-known codes; meshnft's own codes start at 100
//! and are listed in [`Code`] and in docs/cni.md#error-codes.

use crate::nft::NftError;
use crate::nft::dump::ReadError;
use crate::nft::sock::{DumpError, SockError};
use std::fmt;

/// A CNI error code.
///
/// Codes below 100 follow CNI spec 1.1, section "Error" (well-known error
/// codes); codes from 100 up are meshnft's own and are stable interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    /// 1: incompatible CNI version.
    IncompatibleVersion = 1,
    /// 2: unsupported field in the network configuration.
    UnsupportedField = 2,
    /// 4: invalid or missing `CNI_*` environment variable.
    InvalidEnv = 4,
    /// 5: I/O failure (e.g. reading stdin).
    Io = 5,
    /// 6: failed to decode content (stdin is not JSON of the expected shape).
    Decode = 6,
    /// 7: invalid network configuration (a field has a bad value).
    InvalidConfig = 7,
    /// 11: try again later (a transient condition).
    TryAgainLater = 11,
    /// 50: STATUS: the plugin is not available (ADD would fail on this host).
    NotAvailable = 50,
    /// 100: the kernel refused the nf_tables transaction (nothing was
    /// applied); `details` carries the kernel's reason.
    NftTransaction = 100,
    /// 101: nf_tables netlink is not available (no `nf_tables` in the
    /// kernel, or the socket cannot be opened).
    NftUnavailable = 101,
    /// 102: `CNI_NETNS` could not be opened or entered.
    Netns = 102,
    /// 103: `CNI_NETNS` is the plugin's own (host) network namespace.
    HostNetns = 103,
    /// 104: CHECK found the table missing or different from what ADD writes.
    CheckMismatch = 104,
    /// 105: internal error (a bug): please report it.
    Internal = 105,
    /// 106: the pod could not be read from the Kubernetes API (credentials,
    /// RBAC, not found, unusable kubeconfig); transient failures are 11.
    KubernetesApi = 106,
}

impl Code {
    /// The numeric code as written in the CNI error JSON.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

/// Error of a meshnft operation, carrying the CNI code it maps to.
///
/// `msg` is a short sentence naming the field or object at fault; `details`
/// carries the underlying cause verbatim (the kernel's reason, an OS
/// error, ...).
#[derive(Debug, Clone, thiserror::Error)]
pub struct Error {
    /// CNI error code.
    pub code: Code,
    /// Short human-readable message.
    pub msg: String,
    /// Longer detail (may be empty).
    pub details: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}: {}", self.msg, self.details)
        }
    }
}

impl Error {
    /// Builds an error with `code`, `msg` and no details.
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Builds an error with `code`, `msg` and `details`.
    pub fn with_details(code: Code, msg: impl Into<String>, details: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// Error code 7 for a bad value in the network configuration, naming the
    /// field (dotted path, e.g. `linkerd.inbound-ports-to-ignore`) and token.
    pub fn config(field: &str, token: &str, reason: impl fmt::Display) -> Self {
        Error::new(
            Code::InvalidConfig,
            format!("invalid network config: {field}: {token:?}: {reason}"),
        )
    }

    /// Error code 4 for a missing or malformed `CNI_*` environment variable.
    pub fn env(var: &str, reason: impl fmt::Display) -> Self {
        Error::new(Code::InvalidEnv, format!("{var}: {reason}"))
    }
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

// The nf_tables client's errors, in CNI terms (the client knows nothing of CNI).
impl From<NftError> for Error {
    /// Codes: 100 (the kernel refused the transaction), 101 (no nf_tables
    /// netlink in this kernel), 102 (the namespace could not be entered), 11
    /// (the kernel did not answer within [`crate::nft::sock::RECV_TIMEOUT`]).
    fn from(e: NftError) -> Error {
        let code = match &e {
            NftError::Refused { .. } => Code::NftTransaction,
            NftError::Sock(SockError::Setns(_)) => Code::Netns,
            NftError::Sock(SockError::Open(_)) => Code::NftUnavailable,
            NftError::Sock(SockError::Recv(io))
            | NftError::Read(ReadError::Dump {
                source: DumpError::Sock(SockError::Recv(io)),
                ..
            }) if matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
            {
                Code::TryAgainLater
            }
            _ => Code::NftTransaction,
        };
        match e {
            NftError::Refused {
                what, reason, hint, ..
            } => Error::with_details(
                code,
                format!("the kernel refused {what}"),
                format!("{reason}{hint}"),
            ),
            e => Error::new(code, e.to_string()),
        }
    }
}
