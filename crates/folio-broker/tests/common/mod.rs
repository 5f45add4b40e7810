#![allow(dead_code)]
//! A broker on in-process bookies, and a raw Kafka protocol client for tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use folio_broker::{Broker, BrokerConfig};
use folio_client::LedgerClient;
use folio_log::{LogEnv, WallClock};
use folio_meta::keys::Keys;
use folio_testkit::Cluster;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Setup {
    pub cluster: Cluster,
    pub broker: Broker,
}

pub async fn start(bookies: usize, tune: impl FnOnce(&mut BrokerConfig)) -> Setup {
    folio_testkit::trace();
    let cluster = Cluster::start(bookies).await;
    let broker = broker_on(&cluster, tune).await;
    Setup { cluster, broker }
}

/// A broker on `cluster`'s metadata and bookies (several may run on one cluster).
pub async fn broker_on(cluster: &Cluster, tune: impl FnOnce(&mut BrokerConfig)) -> Broker {
    let bookies = cluster.nodes.len();
    let meta = cluster.meta.clone();
    let client = LedgerClient::new(meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(2));
    let env = LogEnv {
        meta,
        client,
        keys: Keys::default(),
        clock: Arc::new(WallClock),
        owner: "test".into(),
    };
    let mut config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        default_replication: bookies as u16,
        replication_max: bookies as u16,
        ..BrokerConfig::default()
    };
    tune(&mut config);
    Broker::start(config, env).await.unwrap()
}

/// A raw client connection: frames requests, reads answers.
pub struct Conn {
    pub stream: TcpStream,
    next_correlation: i32,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        Conn { stream: TcpStream::connect(addr).await.unwrap(), next_correlation: 1 }
    }

    /// Sends a request; returns its correlation id.
    pub async fn send<R: Encodable>(&mut self, key: ApiKey, version: i16, req: &R) -> i32 {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version)).unwrap();
        req.encode(&mut body, version).unwrap();
        self.send_raw(&body).await;
        correlation
    }

    pub async fn send_raw(&mut self, frame: &[u8]) {
        let mut b = BytesMut::with_capacity(frame.len() + 4);
        b.put_i32(frame.len() as i32);
        b.put_slice(frame);
        self.stream.write_all(&b).await.unwrap();
    }

    /// Reads one answer frame; `None` when the broker closed the connection.
    pub async fn recv_raw(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).await.ok()?;
        let mut b = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut b).await.ok()?;
        Some(b.into())
    }

    /// Reads an answer of `key` at `version`: (correlation id, body).
    pub async fn recv<R: Decodable>(&mut self, key: ApiKey, version: i16) -> (i32, R) {
        let mut b = self.recv_raw().await.expect("an answer, not a closed connection");
        let header = ResponseHeader::decode(&mut b, key.response_header_version(version)).unwrap();
        let body = R::decode(&mut b, version).unwrap();
        assert!(
            !b.has_remaining(),
            "{key:?} v{version}: {} bytes left after the answer",
            b.remaining()
        );
        (header.correlation_id, body)
    }

    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Q,
    ) -> R {
        let c = self.send(key, version, req).await;
        let (got, r) = self.recv(key, version).await;
        assert_eq!(got, c, "answers come in request order");
        r
    }
}

/// A v2 record batch of `count` uncompressed records `value-<i>` with timestamp `ts`.
pub fn batch(count: i32, ts: i64) -> Vec<u8> {
    batch_with(count, ts, 0)
}

/// Like `batch`, with `attributes` (e.g. a codec in bits 0-2; the records stay plain).
pub fn batch_with(count: i32, ts: i64, attributes: i16) -> Vec<u8> {
    batch_of(count, ts, attributes, |i| format!("value-{i}").into_bytes())
}

/// A batch of `count` records of `value_bytes` bytes each.
pub fn batch_sized(count: i32, value_bytes: usize) -> Vec<u8> {
    batch_of(count, 1, 0, |i| vec![b'a' + (i % 26) as u8; value_bytes])
}

/// A v2 record batch of `count` uncompressed records whose values `value(i)` gives.
pub fn batch_of(count: i32, ts: i64, attributes: i16, value: impl Fn(i32) -> Vec<u8>) -> Vec<u8> {
    fn varint(v: &mut Vec<u8>, x: i64) {
        let mut z = ((x << 1) ^ (x >> 63)) as u64;
        while z >= 0x80 {
            v.push((z as u8) | 0x80);
            z >>= 7;
        }
        v.push(z as u8);
    }
    let mut records = Vec::new();
    for i in 0..count {
        let value = value(i);
        let mut r = vec![0u8];
        varint(&mut r, 0);
        varint(&mut r, i as i64);
        varint(&mut r, -1);
        varint(&mut r, value.len() as i64);
        r.extend_from_slice(&value);
        varint(&mut r, 0);
        varint(&mut records, r.len() as i64);
        records.extend_from_slice(&r);
    }
    let mut b = Vec::new();
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&(count - 1).to_be_bytes());
    b.extend_from_slice(&ts.to_be_bytes());
    b.extend_from_slice(&ts.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(&records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// `b` as a batch of idempotent producer `pid` at `epoch`, first sequence `seq`.
pub fn idempotent(mut b: Vec<u8>, pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Base offsets of the batches in fetched `records`.
pub fn base_offsets(mut records: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while records.len() >= 12 {
        let base = i64::from_be_bytes(records[..8].try_into().unwrap());
        let len = i32::from_be_bytes(records[8..12].try_into().unwrap()) as usize;
        out.push(base);
        records = &records[12 + len..];
    }
    out
}
