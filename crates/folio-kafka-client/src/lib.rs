//! A minimal Kafka client on the raw protocol: one connection, requests
//! framed with a header, answers read in order. For benchmarks (`folio bench delete`) and
//! tests, which need exact requests and versions rather than a full client library; and
//! the throwaway certificates they connect over TLS with ([`certs`]).
//!
//! Architecture invariant: it ships in the `folio` binary (its benchmarks), so it holds
//! nothing only tests need; test clusters and fault injection stay in folio-testkit.

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

pub mod certs;
mod error;
pub mod limits;

pub use error::ClientError;

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, DeleteTopicsRequest, ProduceRequest, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use crate::limits::ANSWER_BYTES_MAX;

/// A connection's byte stream: TCP, or TLS over TCP.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug> Stream for T {}

/// One connection to a broker.
#[derive(Debug)]
pub struct KafkaConn {
    stream: Box<dyn Stream>,
    next_correlation: i32,
}

/// How a TLS client connection trusts the broker and shows itself.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// CA certificates (PEM) the broker's certificate must chain to.
    pub ca: std::path::PathBuf,
    /// The name the broker's certificate must hold.
    pub server_name: String,
    /// A client certificate chain and key (PEM), if the broker asks for one.
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl TlsClient {
    /// The rustls client configuration.
    pub fn config(&self) -> Result<rustls::ClientConfig, ClientError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let tls = |p: &std::path::Path| {
            let p = p.display().to_string();
            move |e: &dyn std::fmt::Display| ClientError::Tls(format!("{p}: {e}"))
        };
        let certs = |p: &std::path::Path| -> Result<Vec<CertificateDer<'static>>, ClientError> {
            CertificateDer::pem_file_iter(p)
                .map_err(|e| tls(p)(&e))?
                .collect::<Result<_, _>>()
                .map_err(|e| tls(p)(&e))
        };
        for c in certs(&self.ca)? {
            roots.add(c).map_err(|e| tls(&self.ca)(&e))?;
        }
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Tls(e.to_string()))?
            .with_root_certificates(roots);
        match &self.identity {
            None => Ok(b.with_no_client_auth()),
            Some((cert, key)) => {
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls(key)(&e))?;
                b.with_client_auth_cert(certs(cert)?, key)
                    .map_err(|e| ClientError::Tls(e.to_string()))
            }
        }
    }
}

impl KafkaConn {
    /// Connects to a Kafka listener at `addr`.
    pub async fn connect(addr: SocketAddr) -> Result<KafkaConn, ClientError> {
        KafkaConn::connect_from(None, addr).await
    }

    /// Connects to a Kafka listener at `addr` from the local address `from` (the simulator's
    /// client nodes; `None`: the kernel's choice).
    pub async fn connect_from(
        from: Option<std::net::IpAddr>,
        addr: SocketAddr,
    ) -> Result<KafkaConn, ClientError> {
        let stream =
            folio_rt::net::connect_from(from, addr).await.map_err(ClientError::connecting(addr))?;
        stream.set_nodelay(true).map_err(ClientError::connecting(addr))?;
        Ok(KafkaConn { stream: Box::new(stream), next_correlation: 1 })
    }

    /// Connects to a TLS listener at `addr`.
    pub async fn connect_tls(addr: SocketAddr, tls: &TlsClient) -> Result<KafkaConn, ClientError> {
        let stream = folio_rt::net::connect(addr).await.map_err(ClientError::connecting(addr))?;
        stream.set_nodelay(true).map_err(ClientError::connecting(addr))?;
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls.config()?));
        let name = rustls::pki_types::ServerName::try_from(tls.server_name.clone())
            .map_err(|e| ClientError::Tls(format!("server name {:?}: {e}", tls.server_name)))?;
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(|e| ClientError::Tls(format!("handshake with {addr}: {e}")))?;
        Ok(KafkaConn { stream: Box::new(stream), next_correlation: 1 })
    }

    /// Authenticates with SASL (`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`) through
    /// SaslHandshake v1 and SaslAuthenticate v2. The error names the broker's answer.
    pub async fn authenticate(
        &mut self,
        mechanism: folio_broker::security::Mechanism,
        user: &str,
        password: &str,
    ) -> Result<(), ClientError> {
        use kafka_protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
            SaslHandshakeResponse,
        };
        let hs = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.name()));
        let r: SaslHandshakeResponse = self.call(ApiKey::SaslHandshake, 1, &hs).await?;
        if r.error_code != 0 {
            let (api, code, message) = ("SaslHandshake", r.error_code, String::new());
            return Err(ClientError::Refused { api, code, message });
        }
        let mut client = folio_broker::security::scram::Client::new(mechanism, user, password);
        let mut token = client.first();
        loop {
            let req = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
            let r: SaslAuthenticateResponse = self.call(ApiKey::SaslAuthenticate, 2, &req).await?;
            if r.error_code != 0 {
                let message = r.error_message.as_deref().unwrap_or("").to_string();
                let (api, code) = ("SaslAuthenticate", r.error_code);
                return Err(ClientError::Refused { api, code, message });
            }
            match client.next(&r.auth_bytes).map_err(|e| ClientError::Sasl(e.to_string()))? {
                Some(t) => token = t,
                None => return Ok(()),
            }
        }
    }

    /// The stream, for tests that write raw bytes.
    pub fn stream(&mut self) -> &mut dyn Stream {
        &mut *self.stream
    }

    /// Sends a request of `key` at `version`; returns its correlation id.
    pub async fn send<R: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &R,
    ) -> Result<i32, ClientError> {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        let framed = encode_request(key, version, correlation, req)?;
        self.stream.write_all(&framed).await.map_err(ClientError::sending)?;
        Ok(correlation)
    }

    /// Sends `frame` with its size prefix.
    pub async fn send_raw(&mut self, frame: &[u8]) -> Result<(), ClientError> {
        let mut b = BytesMut::with_capacity(frame.len() + 4);
        b.put_u32(frame.len() as u32);
        b.put_slice(frame);
        self.stream.write_all(&b).await.map_err(ClientError::sending)
    }

    /// Reads one answer frame; `None` when the broker closed the connection.
    pub async fn recv_raw(&mut self) -> Result<Option<Bytes>, ClientError> {
        let mut size = [0u8; 4];
        if self.stream.read_exact(&mut size).await.is_err() {
            return Ok(None);
        }
        let size = u32::from_be_bytes(size) as usize;
        if size > ANSWER_BYTES_MAX {
            return Err(ClientError::Protocol(format!(
                "an answer of {size} bytes (at most {ANSWER_BYTES_MAX})"
            )));
        }
        let mut b = vec![0u8; size];
        self.stream.read_exact(&mut b).await.map_err(ClientError::reading)?;
        Ok(Some(b.into()))
    }

    /// Reads an answer of `key` at `version`: (correlation id, body).
    pub async fn recv<R: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
    ) -> Result<(i32, R), ClientError> {
        let p = ClientError::Protocol;
        let mut b = self.recv_raw().await?.ok_or_else(|| {
            p(format!("the broker closed the connection instead of answering {key:?}"))
        })?;
        let header = ResponseHeader::decode(&mut b, key.response_header_version(version))
            .map_err(|e| p(format!("decoding a {key:?} answer header: {e}")))?;
        let body = R::decode(&mut b, version)
            .map_err(|e| p(format!("decoding {key:?} v{version}: {e}")))?;
        if b.has_remaining() {
            let left = b.remaining();
            return Err(p(format!("{key:?} v{version}: {left} bytes left after the answer")));
        }
        Ok((header.correlation_id, body))
    }

    /// Sends a request and reads its answer.
    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Q,
    ) -> Result<R, ClientError> {
        let c = self.send(key, version, req).await?;
        let (got, r) = self.recv(key, version).await?;
        if got != c {
            return Err(ClientError::Protocol(format!(
                "answer {got} to request {c}: out of order"
            )));
        }
        Ok(r)
    }
}

/// A request of `key` at `version` framed for the wire: size, header (client id "folio"),
/// body.
pub fn encode_request<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    req: &R,
) -> Result<Bytes, ClientError> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("folio")));
    let mut b = BytesMut::new();
    b.put_u32(0);
    header
        .encode(&mut b, key.request_header_version(version))
        .map_err(|e| ClientError::Protocol(format!("encoding a {key:?} header: {e}")))?;
    req.encode(&mut b, version)
        .map_err(|e| ClientError::Protocol(format!("encoding {key:?} v{version}: {e}")))?;
    let size = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&size.to_be_bytes());
    Ok(b.freeze())
}

/// CreateTopics (v2+) for `names`, each with `partitions` and the broker's default
/// replication.
pub fn create_topics_request(names: &[String], partitions: i32) -> CreateTopicsRequest {
    CreateTopicsRequest::default().with_timeout_ms(60_000).with_topics(
        names
            .iter()
            .map(|n| {
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(n.clone())))
                    .with_num_partitions(partitions)
                    .with_replication_factor(-1)
            })
            .collect(),
    )
}

/// CreateTopics of one topic `name` with `partitions` and the topic `configs`.
pub fn create_topic_request(
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreateTopicsRequest {
    let mut req = create_topics_request(&[name.to_string()], partitions);
    req.topics[0].configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    req
}

/// DeleteTopics (v6: by name) for `names`.
pub fn delete_topics_request(names: &[String]) -> DeleteTopicsRequest {
    DeleteTopicsRequest::default().with_timeout_ms(60_000).with_topics(
        names
            .iter()
            .map(|n| {
                DeleteTopicState::default()
                    .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
            })
            .collect(),
    )
}

/// Produce of one batch to `topic`'s `partition` with `acks`.
pub fn produce_request(topic: &str, partition: i32, batch: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![
                PartitionProduceData::default().with_index(partition).with_records(Some(batch)),
            ]),
    ])
}
