//! A throwaway CA and a server certificate for `localhost`, `127.0.0.1`, `::1` and the address
//! the server listens on, generated at
//! start with rcgen (ring), and the rustls server configuration using them.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Generates the CA and a server certificate also naming `ip`; returns the server config and
/// the CA PEM.
pub fn generate(ip: std::net::IpAddr) -> std::io::Result<(Arc<rustls::ServerConfig>, String)> {
    let ca_key = KeyPair::generate().map_err(io_err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tern-apiserver-standin-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).map_err(io_err)?;

    let key = KeyPair::generate().map_err(io_err)?;
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !ip.is_loopback() && !ip.is_unspecified() {
        names.push(ip.to_string());
    }
    let mut params = CertificateParams::new(names).map_err(io_err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(io_err)?;

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(io_err)?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .map_err(io_err)?;
    Ok((Arc::new(config), ca.pem()))
}
