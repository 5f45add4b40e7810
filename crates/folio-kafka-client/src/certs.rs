//! Certificates for TLS tests, made by the test itself: a CA, a server certificate for
//! `localhost` and `127.0.0.1`, and a client certificate, all as PEM files in a directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files [`write`] made.
#[derive(Debug, Clone)]
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Subject `CN=client-1,O=Folio tests`.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Makes a new CA and certificates signed by it in `dir`, files named with `prefix`
/// (`<prefix>ca.pem`, ...). A second call with another prefix makes an unrelated CA.
pub fn write(dir: &Path, prefix: &str) -> Certs {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, format!("Folio test CA {prefix}"));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::new(names).expect("params");
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::OrganizationName, "Folio tests");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca_cert, &ca_key).expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        "localhost",
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client, client_key) = leaf(vec![], "client-1", ExtendedKeyUsagePurpose::ClientAuth);
    let file = |name: &str, pem: &str| {
        let p = dir.join(format!("{prefix}{name}"));
        std::fs::write(&p, pem).expect("write PEM");
        p
    };
    Certs {
        ca: file("ca.pem", &ca_cert.pem()),
        server_cert: file("server.pem", &server),
        server_key: file("server-key.pem", &server_key),
        client_cert: file("client.pem", &client),
        client_key: file("client-key.pem", &client_key),
    }
}
