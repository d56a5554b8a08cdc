//! Kubernetes object names, checked before they are used in an API path
//! or taken from `CNI_ARGS` (the rules of apimachinery's validation).

/// Kubernetes' DNS-1123 label (namespace names): 1-63 of `[a-z0-9-]`,
/// starting and ending with an alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Kubernetes' DNS-1123 subdomain (pod names): at most 253 bytes of
/// DNS-1123 labels joined by `.`.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}
