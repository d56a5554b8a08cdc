//! The API stand-in's TLS side: a cluster CA and a server certificate for
//! the stand-in's address, made at run time (rcgen), and the rustls server
//! configuration (ring, the provider the plugin's client uses) that serves
//! with them. The kubeconfig then carries the CA as
//! `certificate-authority-data` and an `https://` server, as the
//! installer's does on a node.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::IpAddr;
use std::sync::Arc;

/// The key algorithm of the CA and of the server certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA-2048, signed with SHA-256: kubeadm's default for the cluster CA
    /// and the API server's certificate (the server's TLS 1.3 handshake
    /// signs with RSA-PSS). Key generation takes a second or so in a
    /// release build, much longer in a debug one.
    Rsa2048,
    /// ECDSA P-256 with SHA-256: made at once, for tests.
    EcdsaP256,
}

/// A CA and the server's certificate and key, ready to serve.
pub struct ServerTls {
    /// The CA certificate (PEM): the kubeconfig's `certificate-authority-data`,
    /// base64-encoded.
    pub ca_pem: String,
    /// The rustls server configuration (TLS 1.2 and 1.3, no client auth).
    pub config: Arc<rustls::ServerConfig>,
}

/// A new key pair of `kind`.
fn key_pair(kind: KeyKind) -> Result<KeyPair, String> {
    match kind {
        KeyKind::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("ECDSA key: {e}")),
        KeyKind::Rsa2048 => {
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
                .map_err(|e| format!("RSA key: {e}"))?;
            let der = key
                .to_pkcs8_der()
                .map_err(|e| format!("RSA key as PKCS#8: {e}"))?;
            KeyPair::from_pkcs8_der_and_sign_algo(
                &PrivatePkcs8KeyDer::from(der.as_bytes()),
                &rcgen::PKCS_RSA_SHA256,
            )
            .map_err(|e| format!("RSA key for rcgen: {e}"))
        }
    }
}

impl ServerTls {
    /// A new CA (`kubernetes`, as kubeadm names it) and a server certificate
    /// under it for `ip` (its only subject alternative name), both with
    /// keys of `kind`.
    pub fn new(ip: IpAddr, kind: KeyKind) -> Result<ServerTls, String> {
        let ca_key = key_pair(kind)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca
            .self_signed(&ca_key)
            .map_err(|e| format!("CA certificate: {e}"))?;
        let issuer = Issuer::new(ca, ca_key);

        let server_key = key_pair(kind)?;
        let mut server = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server.subject_alt_names = vec![SanType::IpAddress(ip)];
        server.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .map_err(|e| format!("server certificate: {e}"))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(server_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
            )
            .map_err(|e| format!("TLS server configuration: {e}"))?;
        Ok(ServerTls {
            ca_pem: ca_cert.pem(),
            config: Arc::new(config),
        })
    }
}
