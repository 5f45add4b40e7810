//! What a raw client's call can fail with.

/// Why a connection, a request or an answer failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed: connecting, sending or reading (`what` says which).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// TLS set-up failed: a certificate or key file, the server name, the handshake.
    #[error("TLS: {0}")]
    Tls(String),
    /// A request could not be encoded, or an answer could not be read as one: too large,
    /// undecodable, bytes left over, out of order, or the connection closed instead.
    #[error("{0}")]
    Protocol(String),
    /// The broker answered a SASL step with an error code (and message).
    #[error("{api}: error {code}: {message}")]
    Refused { api: &'static str, code: i16, message: String },
    /// The client side of SASL failed (the broker's answer did not verify).
    #[error("SASL: {0}")]
    Sasl(String),
}

impl ClientError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClientError {
        let what = what.into();
        move |source| ClientError::Io { what, source }
    }

    pub(crate) fn sending(source: std::io::Error) -> ClientError {
        ClientError::io("sending")(source)
    }

    pub(crate) fn connecting(
        addr: std::net::SocketAddr,
    ) -> impl FnOnce(std::io::Error) -> ClientError {
        ClientError::io(format!("connecting to {addr}"))
    }

    pub(crate) fn reading(source: std::io::Error) -> ClientError {
        ClientError::io("reading an answer")(source)
    }
}

/// Benchmarks and tests that report errors as text take a client error with `?`.
impl From<ClientError> for String {
    fn from(e: ClientError) -> String {
        e.to_string()
    }
}
