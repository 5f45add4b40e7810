//! Why a broker did not start: [`StartError`]. Its own module because it names the TLS
//! loader's error (`security::tls`), which itself uses `errors`.

/// Why a broker did not start ([`crate::Broker::start`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting is wrong (it is named).
    #[error("{0}")]
    Config(#[from] folio_proto::InvalidConfig),
    /// The TLS certificate, key or CA could not be loaded.
    #[error("{0}")]
    Tls(#[from] crate::security::tls::TlsError),
    /// A Kafka listener could not be bound.
    #[error("binding the Kafka listener {listener} on {addr}: {source}")]
    Bind { listener: String, addr: std::net::SocketAddr, source: std::io::Error },
    /// The metadata store failed; `what` says at which step.
    #[error("{what}: {source}")]
    Meta { what: String, source: folio_meta::MetaError },
    /// Registering the node id failed (another process holds it, or the store failed).
    #[error(transparent)]
    Register(#[from] crate::domain::cluster::RegisterError),
}

impl StartError {
    /// The metadata store's `source` at step `what`.
    pub fn meta(what: impl Into<String>) -> impl FnOnce(folio_meta::MetaError) -> StartError {
        let what = what.into();
        move |source| StartError::Meta { what, source }
    }
}
