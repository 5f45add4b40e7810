//! TLS for the `SSL` and `SASL_SSL` listeners (rustls): the broker's certificate chain and
//! key from PEM files, client certificates checked against a CA file when asked
//! (`ssl.client.auth`), and reloads: on SIGHUP, and when a file's modification time or
//! size changes (checked every `RELOAD_POLL`). A reload that fails (a half-written file,
//! a key that does not match) keeps the running configuration and says why in the log;
//! connections already open keep theirs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use folio_proto::InvalidConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::sync::watch;

pub use crate::limits::PEM_CERTIFICATES_MAX;

/// How often the PEM files are checked for changes.
pub const RELOAD_POLL: Duration = Duration::from_secs(5);

/// Whether clients must show a certificate (`ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificates are asked for.
    None,
    /// Asked for; a client without one is still served (as `User:ANONYMOUS`).
    Requested,
    /// A client without a certificate signed by the CA is refused.
    Required,
}

impl ClientAuth {
    /// Reads Kafka's values: `none`, `requested`, `required`.
    pub fn parse(s: &str) -> Result<ClientAuth, InvalidConfig> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(InvalidConfig(format!(
                "ssl.client.auth = {s:?}: expected none, requested or required"
            ))),
        }
    }
}

/// The TLS settings of the broker's TLS listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain, PEM, the broker's own first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates client certificates must chain to, PEM.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

impl TlsConfig {
    fn files(&self) -> Vec<&PathBuf> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()].into_iter().flatten().collect()
    }

    /// Reads the files into a rustls configuration.
    pub fn load(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|source| TlsError::NoKey { path: self.key.clone(), source })?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls { what: "TLS versions".into(), source })?;
        let builder = match (self.client_auth, &self.client_ca) {
            (ClientAuth::None, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(TlsError::Config(InvalidConfig::new(
                    "client certificates are asked for (ssl.client.auth) but no CA file is given \
                     (--ssl-client-ca)",
                )));
            }
            (auth, Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in read_certs(ca)? {
                    let what = || ca.display().to_string();
                    roots.add(c).map_err(|source| TlsError::Rustls { what: what(), source })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == ClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|source| TlsError::Verifier { path: ca.clone(), source })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config =
            builder.with_single_cert(certs, key).map_err(|source| TlsError::Rustls {
                what: format!("{} and {}", self.cert.display(), self.key.display()),
                source,
            })?;
        config.alpn_protocols.clear();
        Ok(config)
    }

    fn stamps(&self) -> Vec<Option<(SystemTime, u64)>> {
        self.files()
            .into_iter()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
            .collect()
    }
}

fn read_certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut out = Vec::new();
    let pem = |source| TlsError::Pem { path: path.clone(), source };
    for c in CertificateDer::pem_file_iter(path).map_err(pem)? {
        out.push(c.map_err(pem)?);
        if out.len() > PEM_CERTIFICATES_MAX {
            let detail = format!("above {PEM_CERTIFICATES_MAX} certificates");
            return Err(TlsError::File { path: path.clone(), detail });
        }
    }
    if out.is_empty() {
        let detail = "no PEM certificate in it".to_string();
        return Err(TlsError::File { path: path.clone(), detail });
    }
    Ok(out)
}

/// Why the TLS configuration could not be loaded; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("reading {}: {source}", path.display())]
    Pem { path: PathBuf, source: rustls::pki_types::pem::Error },
    /// The key file holds no private key.
    #[error("{}: no private key: {source}", path.display())]
    NoKey { path: PathBuf, source: rustls::pki_types::pem::Error },
    /// A PEM file holds no certificate, or too many.
    #[error("{}: {detail}", path.display())]
    File { path: PathBuf, detail: String },
    /// rustls refused what was read.
    #[error("{what}: {source}")]
    Rustls { what: String, source: rustls::Error },
    /// The client CA cannot verify client certificates.
    #[error("{}: {source}", path.display())]
    Verifier { path: PathBuf, source: rustls::server::VerifierBuilderError },
    /// The settings contradict each other.
    #[error("{0}")]
    Config(#[from] InvalidConfig),
    /// A reload was asked of a broker without a TLS listener.
    #[error("this broker has no TLS listener")]
    NoTlsListener,
}

/// The running TLS configuration of a broker, swapped on reload.
#[derive(Debug)]
pub struct TlsAcceptor {
    config: TlsConfig,
    current: RwLock<Arc<rustls::ServerConfig>>,
    stamps: Mutex<Vec<Option<(SystemTime, u64)>>>,
    reloads: AtomicU64,
}

impl TlsAcceptor {
    /// Loads the files; an error names the file and what is wrong with it.
    pub fn new(config: TlsConfig) -> Result<TlsAcceptor, TlsError> {
        let stamps = config.stamps();
        let loaded = config.load()?;
        Ok(TlsAcceptor {
            config,
            current: RwLock::new(Arc::new(loaded)),
            stamps: Mutex::new(stamps),
            reloads: AtomicU64::new(0),
        })
    }

    /// An acceptor on the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.read().expect("tls lock").clone())
    }

    /// Reads the files again and swaps them in.
    pub fn reload(&self) -> Result<(), TlsError> {
        let stamps = self.config.stamps();
        *self.stamps.lock().expect("tls stamps lock") = stamps;
        let loaded = self.config.load()?;
        *self.current.write().expect("tls lock") = Arc::new(loaded);
        self.reloads.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Reloads if a file changed since the last load; whether it did.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        if *self.stamps.lock().expect("tls stamps lock") == self.config.stamps() {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    /// Successful reloads so far.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::SeqCst)
    }

    /// Reloads on SIGHUP and on file changes until `stop`.
    pub async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            let forced = tokio::select! {
                () = tokio::time::sleep(RELOAD_POLL) => false,
                Some(()) = async { hangup.as_mut()?.recv().await } => true,
                _ = stop.wait_for(|s| *s) => return,
            };
            let r = if forced { self.reload().map(|()| true) } else { self.reload_if_changed() };
            match r {
                Ok(true) => tracing::info!(
                    cert = %self.config.cert.display(),
                    on = if forced { "SIGHUP" } else { "a file change" },
                    "TLS certificate and key reloaded"
                ),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "TLS reload failed; the running certificate stays")
                }
            }
        }
    }
}

/// The principal of a TLS connection: `User:<subject>` of its client certificate, if any.
pub(crate) fn principal(conn: &rustls::ServerConnection) -> Option<String> {
    let cert = conn.peer_certificates()?.first()?;
    super::x509::subject(cert).map(|s| format!("User:{s}"))
}
