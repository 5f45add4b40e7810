//! The SASL requests' messages (SaslHandshake, SaslAuthenticate) for the listener's SASL
//! gate (`wire::sasl`): which request a frame holds, the requests decoded and the answers
//! encoded. The gate keeps each connection's state; this module only knows Kafka's bytes.
//!
//! Architecture invariant: imports nothing of the broker but `framing`, so the gate takes
//! the messages without taking the APIs' state.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::api::framing::{Frame, Parsed, api_name, encode_response, parse_header};

/// Which request a frame holds, as far as the SASL gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ApiVersions,
    Handshake,
    Authenticate,
    /// Any other API this crate's Kafka messages know (its key).
    Other(i16),
    /// A key no Kafka API has, or a frame too short for one.
    Unknown,
}

impl Kind {
    /// The API's name (`Produce`), for messages.
    pub(crate) fn name(self) -> String {
        match self {
            Kind::ApiVersions => api_name(ApiKey::ApiVersions as i16),
            Kind::Handshake => api_name(ApiKey::SaslHandshake as i16),
            Kind::Authenticate => api_name(ApiKey::SaslAuthenticate as i16),
            Kind::Other(key) => api_name(key),
            Kind::Unknown => "unknown".into(),
        }
    }
}

/// The request a frame holds, from its first two bytes.
pub(crate) fn kind(frame: &Bytes) -> Kind {
    let key = frame.get(..2).map(|mut b| b.get_i16()).and_then(|k| ApiKey::try_from(k).ok());
    match key {
        Some(ApiKey::ApiVersions) => Kind::ApiVersions,
        Some(ApiKey::SaslHandshake) => Kind::Handshake,
        Some(ApiKey::SaslAuthenticate) => Kind::Authenticate,
        Some(k) => Kind::Other(k as i16),
        None => Kind::Unknown,
    }
}

/// A SaslHandshake or SaslAuthenticate request: its header and undecoded body.
pub(crate) struct SaslRequest {
    key: ApiKey,
    version: i16,
    correlation: i32,
    body: Bytes,
}

/// What a SaslAuthenticate answer carries.
#[derive(Debug, Default)]
pub(crate) struct AuthAnswer {
    pub error_code: i16,
    /// Said to the client with an error (Kafka's words; no detail).
    pub error_message: Option<String>,
    pub auth_bytes: Vec<u8>,
    /// KIP-368: how long the session lasts (0: for ever).
    pub session_lifetime_ms: i64,
}

impl SaslRequest {
    /// The header of a SaslHandshake or SaslAuthenticate frame; another request is refused.
    pub(crate) fn parse(frame: Bytes) -> Result<SaslRequest, String> {
        let Parsed::Request { key, header, body } = parse_header(frame)? else {
            return Err("not a SASL request".into());
        };
        if key != ApiKey::SaslHandshake && key != ApiKey::SaslAuthenticate {
            return Err(format!("not a SASL request: {key:?}"));
        }
        let (version, correlation) = (header.request_api_version, header.correlation_id);
        Ok(SaslRequest { key, version, correlation, body })
    }

    /// The request's version.
    pub(crate) fn version(&self) -> i16 {
        self.version
    }

    /// Whether it is a SaslHandshake (else a SaslAuthenticate).
    pub(crate) fn is_handshake(&self) -> bool {
        self.key == ApiKey::SaslHandshake
    }

    /// A SaslHandshake's mechanism.
    pub(crate) fn mechanism(&mut self) -> Result<String, String> {
        let v = self.version;
        let req = SaslHandshakeRequest::decode(&mut self.body, v)
            .map_err(|e| format!("SaslHandshake v{v}: malformed: {e}"))?;
        Ok(req.mechanism.to_string())
    }

    /// A SaslAuthenticate's token.
    pub(crate) fn auth_bytes(&mut self) -> Result<Bytes, String> {
        let v = self.version;
        let req = SaslAuthenticateRequest::decode(&mut self.body, v)
            .map_err(|e| format!("SaslAuthenticate v{v}: malformed: {e}"))?;
        Ok(req.auth_bytes)
    }

    /// The SaslHandshake answer: the mechanisms offered, and `error_code`.
    pub(crate) fn handshake_answer(
        &self,
        offered: &[&'static str],
        error_code: i16,
    ) -> Result<Frame, String> {
        let offered = offered.iter().map(|m| StrBytes::from_static_str(m)).collect();
        let resp =
            SaslHandshakeResponse::default().with_mechanisms(offered).with_error_code(error_code);
        encode_response(self.key, self.version, self.correlation, &resp)
    }

    /// The SaslAuthenticate answer.
    pub(crate) fn authenticate_answer(&self, a: AuthAnswer) -> Result<Frame, String> {
        let resp = SaslAuthenticateResponse::default()
            .with_error_code(a.error_code)
            .with_error_message(a.error_message.map(StrBytes::from_string))
            .with_auth_bytes(a.auth_bytes.into())
            .with_session_lifetime_ms(a.session_lifetime_ms);
        encode_response(self.key, self.version, self.correlation, &resp)
    }

    /// The answer to either request with `error_code` and `message`, whichever it is.
    pub(crate) fn error_answer(&self, error_code: i16, message: &str) -> Result<Frame, String> {
        if self.is_handshake() {
            self.handshake_answer(&[], error_code)
        } else {
            let error_message = Some(message.to_string());
            self.authenticate_answer(AuthAnswer {
                error_code,
                error_message,
                ..AuthAnswer::default()
            })
        }
    }
}
