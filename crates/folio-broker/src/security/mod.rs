//! Who may talk to the broker: listeners with a security protocol each, TLS, SASL (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512) and the credentials SASL checks.
//!
//! - [`ListenerConfig`]: one Kafka listener, `NAME://host:port` with its protocol
//!   (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`) and the address it advertises.
//! - [`tls`]: the certificate and key (PEM), client-certificate authentication, reloads.
//! - [`scram`]: the SCRAM exchange (RFC 5802, 7677) and PLAIN, both against salted
//!   credentials ([`scram::Credential`]); no password is ever stored.
//! - [`credentials`]: the credentials in the metadata store.
//! - [`acl`]: Kafka ACLs, stored in the metadata store and cached with a watch.
//!
//! A connection's SASL state (what may be sent before, during and after the exchange)
//! is the listener's: `wire::sasl`.
//!
//! Architecture invariant: depends on nothing of the broker but the domain's principals,
//! `errors` and `limits` (below every module), and never on Kafka's messages, so the
//! listener (`wire`) and the APIs both use it.

pub mod credentials;

pub use crate::limits::SASL_RECEIVE_BYTES_MAX;
pub use crate::limits::{LISTENER_NAME_BYTES_MAX, LISTENERS_MAX};
pub mod scram;
pub mod tls;
mod x509;

use std::net::SocketAddr;
use std::time::Duration;

use folio_proto::InvalidConfig;

pub use scram::Mechanism;

/// How a listener's connections are secured (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Every protocol, by Kafka name.
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol named `s` (case-insensitive).
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        Self::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Whether connections are TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL before any other request.
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// One Kafka listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The listener's name (`PLAINTEXT`, `INTERNAL`, …): Metadata answers on a connection
    /// of this listener name the other brokers' listeners of the same name.
    pub name: String,
    pub protocol: SecurityProtocol,
    /// Where it binds (port 0: any free port).
    pub bind: SocketAddr,
    /// The host and port clients are told to connect to; by default the bound address.
    pub advertised: Option<(String, u16)>,
}

impl ListenerConfig {
    /// A `PLAINTEXT` listener on `bind`.
    pub fn plaintext(bind: SocketAddr) -> ListenerConfig {
        ListenerConfig {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bind,
            advertised: None,
        }
    }

    /// A listener named after its protocol (`SASL_SSL://…`).
    pub fn new(protocol: SecurityProtocol, bind: SocketAddr) -> ListenerConfig {
        ListenerConfig { name: protocol.name().into(), protocol, bind, advertised: None }
    }
}

/// Parses `NAME://host:port` into the name, host and port. An empty host is `0.0.0.0`
/// (Kafka's `PLAINTEXT://:9092`).
pub fn parse_endpoint(s: &str) -> Result<(String, String, u16), InvalidConfig> {
    let (name, rest) =
        s.split_once("://").ok_or_else(|| format!("{s:?}: expected NAME://host:port"))?;
    check_listener_name(name).map_err(|e| format!("{s:?}: {e}"))?;
    let (host, port) =
        rest.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected NAME://host:port"))?;
    let port: u16 = port.parse().map_err(|_| format!("{s:?}: bad port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok((name.to_ascii_uppercase(), host.to_string(), port))
}

/// A listener name: 1..=64 bytes of `A-Z`, `a-z`, `0-9`, `_`, `-`.
pub fn check_listener_name(name: &str) -> Result<(), InvalidConfig> {
    if name.is_empty() || name.len() > LISTENER_NAME_BYTES_MAX {
        return Err(InvalidConfig::new(format!(
            "a listener name must be 1..={LISTENER_NAME_BYTES_MAX} bytes, not {}",
            name.len()
        )));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err(InvalidConfig::new(format!(
            "listener name {name:?} may hold only letters, digits, _ and -"
        )));
    }
    Ok(())
}

/// Builds listeners from Kafka's three settings: `listeners` (`NAME://host:port`, several),
/// `advertised.listeners` (the same names, optional) and
/// `listener.security.protocol.map` (`NAME:PROTOCOL` pairs; a listener named after a
/// protocol needs no entry).
pub fn listeners_from(
    listeners: &[String],
    advertised: &[String],
    protocol_map: &[String],
) -> Result<Vec<ListenerConfig>, InvalidConfig> {
    let mut map = Vec::new();
    for pair in protocol_map.iter().flat_map(|m| m.split(',')).filter(|p| !p.trim().is_empty()) {
        let (name, proto) = pair
            .trim()
            .split_once(':')
            .ok_or_else(|| format!("listener protocol {pair:?}: expected NAME:PROTOCOL"))?;
        let p = SecurityProtocol::parse(proto).ok_or_else(|| {
            format!("listener protocol {pair:?}: {proto:?} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        })?;
        map.push((name.to_ascii_uppercase(), p));
    }
    let mut out: Vec<ListenerConfig> = Vec::new();
    for l in listeners.iter().flat_map(|l| l.split(',')).filter(|l| !l.trim().is_empty()) {
        let (name, host, port) = parse_endpoint(l.trim())?;
        let protocol = map
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
            .or_else(|| SecurityProtocol::parse(&name))
            .ok_or_else(|| {
                format!("listener {l:?}: {name} is not a protocol name; map it to one (--listener-security-protocol-map {name}:SASL_SSL)")
            })?;
        let ip: std::net::IpAddr = host.parse().map_err(|_| {
            format!("listener {l:?}: bind to an IP address ({host:?} is not one; advertise host names with --advertised-listener)")
        })?;
        if out.iter().any(|o| o.name == name) {
            return Err(InvalidConfig::new(format!("listener {name} is given twice")));
        }
        out.push(ListenerConfig {
            name,
            protocol,
            bind: SocketAddr::new(ip, port),
            advertised: None,
        });
    }
    for a in advertised.iter().flat_map(|a| a.split(',')).filter(|a| !a.trim().is_empty()) {
        let (name, host, port) = parse_endpoint(a.trim())?;
        let Some(l) = out.iter_mut().find(|l| l.name == name) else {
            return Err(InvalidConfig::new(format!(
                "advertised listener {a:?}: no listener is named {name}"
            )));
        };
        if host == "0.0.0.0" {
            return Err(InvalidConfig::new(format!(
                "advertised listener {a:?}: needs a host clients can reach"
            )));
        }
        l.advertised = Some((host, port));
    }
    if out.len() > LISTENERS_MAX {
        return Err(InvalidConfig::new(format!(
            "{} listeners: at most {LISTENERS_MAX}",
            out.len()
        )));
    }
    Ok(out)
}

// The principal a connection authenticated as is the domain's (ACLs are checked on it).
pub use crate::domain::acl::{ANONYMOUS, Session};

/// SASL settings of the broker.
#[derive(Debug, Clone)]
pub struct SaslConfig {
    /// Mechanisms offered in SaslHandshake (`sasl.enabled.mechanisms`).
    pub mechanisms: Vec<Mechanism>,
    /// `connections.max.reauth.ms`: a SASL session lasts this long; the client must
    /// authenticate again on the connection (KIP-368) or it is closed. `None`: for ever.
    pub session_lifetime: Option<Duration>,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig { mechanisms: Mechanism::ALL.to_vec(), session_lifetime: None }
    }
}

/// Checks that every listener's protocol has what it needs.
pub fn validate(
    listeners: &[ListenerConfig],
    tls: Option<&tls::TlsConfig>,
    sasl: &SaslConfig,
) -> Result<(), InvalidConfig> {
    if listeners.is_empty() {
        return Err(InvalidConfig::new("a broker needs at least one listener"));
    }
    for l in listeners {
        check_listener_name(&l.name)?;
        if l.protocol.tls() && tls.is_none() {
            return Err(InvalidConfig::new(format!(
                "listener {} is {}: give the broker a certificate and key (--ssl-cert, --ssl-key)",
                l.name,
                l.protocol.name()
            )));
        }
        if l.protocol.sasl() && sasl.mechanisms.is_empty() {
            return Err(InvalidConfig::new(format!(
                "listener {} is {}: enable a SASL mechanism",
                l.name,
                l.protocol.name()
            )));
        }
    }
    if sasl.session_lifetime.is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(InvalidConfig::new("connections.max.reauth.ms must be at least 1000"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_built_from_kafkas_three_settings() {
        let l = listeners_from(
            &[
                "PLAINTEXT://127.0.0.1:9092,INTERNAL://:9094".into(),
                "SASL_SSL://0.0.0.0:9093".into(),
            ],
            &["SASL_SSL://kafka.example:443".into()],
            &["INTERNAL:SASL_PLAINTEXT".into()],
        )
        .unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0], ListenerConfig::plaintext("127.0.0.1:9092".parse().unwrap()));
        assert_eq!(l[1].protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(l[1].bind, "0.0.0.0:9094".parse().unwrap());
        assert_eq!(l[2].advertised, Some(("kafka.example".into(), 443)));
        for (bad, why) in [
            (vec!["FOO://:1"], "not a protocol name"),
            (vec!["PLAINTEXT://:1", "PLAINTEXT://:2"], "twice"),
            (vec!["PLAINTEXT:9092"], "NAME://host:port"),
            (vec!["PLAINTEXT://:99999"], "bad port"),
            (vec!["PLAINTEXT://localhost:1"], "IP address"),
            (vec!["PL AIN://:1"], "letters"),
        ] {
            let bad: Vec<String> = bad.into_iter().map(String::from).collect();
            let e = listeners_from(&bad, &[], &[]).unwrap_err();
            assert!(e.0.contains(why), "{bad:?}: {e}");
        }
        let e = listeners_from(&["SSL://:1".into()], &["SASL_SSL://h:2".into()], &[]).unwrap_err();
        assert!(e.0.contains("no listener is named SASL_SSL"), "{e}");
        let ssl = listeners_from(&["SSL://:1".into()], &[], &[]).unwrap();
        let e = validate(&ssl, None, &SaslConfig::default()).unwrap_err();
        assert!(e.0.contains("--ssl-cert"), "{e}");
    }
}
