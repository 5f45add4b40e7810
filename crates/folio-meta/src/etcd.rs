//! The etcd backend (feature `etcd`), on the etcd v3 API through `etcd-client`. Tested
//! against Debian's etcd 3.4.
//!
//! Mapping: a key's [`Version`] is etcd's `mod_revision`; create-if-absent compares
//! `create_revision == 0`; transactions are etcd transactions; watches are prefix watches
//! from a start revision, and a compacted start or a canceled watch ends the stream with
//! `Compacted`; leases are etcd leases; `next_id(sequence)` writes the key `sequence` and
//! returns the revision of that write, which etcd never hands out twice.
//!
//! Every call has a timeout; while etcd is unreachable calls fail with `Unavailable` and a
//! message naming the endpoints, and work again once it is back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue,
    PutOptions, Txn as EtcdTxn, TxnOp, WatchOptions,
};
use tokio::sync::mpsc;

use crate::store::*;

/// The metadata store on an etcd cluster (feature `etcd`).
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    endpoints: Vec<String>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("endpoints", &self.endpoints).finish()
    }
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // the whole key space
}

fn versioned(kv: &KeyValue) -> Result<Versioned> {
    let key = kv.key_str().map_err(|e| MetaError::Corrupt {
        key: format!("{:?}", kv.key()),
        detail: e.to_string(),
    })?;
    Ok(Versioned {
        key: key.to_string(),
        value: Bytes::copy_from_slice(kv.value()),
        version: kv.mod_revision() as u64,
        create_revision: kv.create_revision() as u64,
        lease: (kv.lease() != 0).then_some(kv.lease()),
    })
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| h.revision() as u64)
}

/// How to reach a secured etcd: a user and password (etcd's `auth enable`) and TLS.
#[derive(Clone, Default)]
pub struct EtcdAccess {
    /// User name and password.
    pub user: Option<(String, String)>,
    /// TLS: the CA that signed etcd's certificate (PEM), and a client certificate and key
    /// (PEM) when etcd asks for one (`--client-cert-auth`).
    pub tls: Option<EtcdTls>,
}

impl std::fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccess")
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .finish()
    }
}

/// TLS to etcd (see `EtcdAccess`).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// PEM file of the CA that signed etcd's certificate.
    pub ca_file: std::path::PathBuf,
    /// PEM files of a client certificate and its key.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl EtcdTls {
    fn options(&self) -> Result<etcd_client::TlsOptions> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                MetaError::unavailable_because(format!("reading etcd TLS file {}", p.display()), e)
            })
        };
        let ca = etcd_client::Certificate::from_pem(read(&self.ca_file)?);
        let mut tls = etcd_client::TlsOptions::new().ca_certificate(ca);
        if let Some((cert, key)) = &self.client {
            tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(tls)
    }
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (`host:port`).
    pub async fn connect(endpoints: &[String]) -> Result<EtcdStore> {
        EtcdStore::connect_with(endpoints, &EtcdAccess::default()).await
    }

    /// Connects to etcd at `endpoints` with a user and password and over TLS as `access`
    /// says (with TLS, an endpoint without a scheme is taken as `https://`).
    pub async fn connect_with(endpoints: &[String], access: &EtcdAccess) -> Result<EtcdStore> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if let Some((user, password)) = &access.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let mut urls = endpoints.to_vec();
        if let Some(tls) = &access.tls {
            options = options.with_tls(tls.options()?);
            for u in &mut urls {
                if !u.contains("://") {
                    *u = format!("https://{u}");
                }
            }
        }
        let client = Client::connect(&urls, Some(options)).await.map_err(|e| {
            MetaError::unavailable_because(
                format!("connecting to etcd at {}", endpoints.join(",")),
                e,
            )
        })?;
        Ok(EtcdStore { client, endpoints: endpoints.to_vec() })
    }

    fn err(&self, e: etcd_client::Error) -> MetaError {
        let at = self.endpoints.join(",");
        match e {
            etcd_client::Error::GRpcStatus(s) => {
                use tonic::Code;
                match s.code() {
                    Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Cancelled
                    | Code::Unknown => MetaError::unavailable_because(format!("etcd at {at}"), s),
                    Code::NotFound if s.message().contains("lease not found") => {
                        MetaError::LeaseNotFound(0)
                    }
                    Code::OutOfRange if s.message().contains("compacted") => {
                        MetaError::Compacted { requested: 0, compacted: 0 }
                    }
                    Code::InvalidArgument => MetaError::InvalidArgument(s.message().to_string()),
                    _ => MetaError::io(format!("etcd at {at}"), s),
                }
            }
            etcd_client::Error::LeaseKeepAliveError(m) if m.contains("not found") => {
                MetaError::LeaseNotFound(0)
            }
            etcd_client::Error::TransportError(t) => {
                MetaError::unavailable_because(format!("etcd at {at}"), t)
            }
            etcd_client::Error::IoError(i) => {
                MetaError::unavailable_because(format!("etcd at {at}"), i)
            }
            other => MetaError::io(format!("etcd at {at}"), other),
        }
    }

    /// Compacts etcd's history up to `revision` (watches from before it get `Compacted`).
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        self.client.clone().compact(revision as i64, None).await.map_err(|e| self.err(e))?;
        Ok(())
    }

    async fn run_txn(&self, txn: &Txn) -> Result<TxnOutcome> {
        let compares: Vec<EtcdCompare> = txn
            .compares
            .iter()
            .map(|c| match c {
                Compare::Version(k, v) => {
                    EtcdCompare::mod_revision(k.as_str(), CompareOp::Equal, *v as i64)
                }
                Compare::Absent(k) => EtcdCompare::create_revision(k.as_str(), CompareOp::Equal, 0),
                Compare::Exists(k) => {
                    EtcdCompare::create_revision(k.as_str(), CompareOp::Greater, 0)
                }
            })
            .collect();
        let mut leases = Vec::new();
        let mut ops = Vec::with_capacity(txn.ops.len());
        for op in &txn.ops {
            ops.push(match op {
                Op::Put { key, value, lease } => {
                    check_value(key, value)?;
                    let options = lease.map(|l| {
                        leases.push(l);
                        PutOptions::new().with_lease(l)
                    });
                    TxnOp::put(key.as_str(), value.to_vec(), options)
                }
                Op::Delete { key } => TxnOp::delete(key.as_str(), None),
            });
        }
        let resp =
            self.client.clone().txn(EtcdTxn::new().when(compares).and_then(ops)).await.map_err(
                |e| match self.err(e) {
                    MetaError::LeaseNotFound(_) => {
                        MetaError::LeaseNotFound(leases.first().copied().unwrap_or(0))
                    }
                    other => other,
                },
            )?;
        Ok(TxnOutcome { succeeded: resp.succeeded(), revision: header_revision(resp.header()) })
    }
}

impl MetadataStore for EtcdStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        Box::pin(async move {
            check_key(key)?;
            let resp = self.client.clone().get(key, None).await.map_err(|e| self.err(e))?;
            resp.kvs().first().map(versioned).transpose()
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>> {
        Box::pin(async move {
            check_key(prefix)?;
            check_key(start_after.unwrap_or_default())?;
            let limit = limit.clamp(1, LIST_LIMIT_MAX);
            let start = list_start(prefix, start_after);
            let options = GetOptions::new()
                .with_range(prefix_end(prefix.as_bytes()))
                .with_limit(limit as i64 + 1);
            let resp =
                self.client.clone().get(start, Some(options)).await.map_err(|e| self.err(e))?;
            let kvs = resp.kvs();
            let more = kvs.len() > limit;
            let items = kvs.iter().take(limit).map(versioned).collect::<Result<Vec<_>>>()?;
            Ok(Page { items, more, revision: header_revision(resp.header()) })
        })
    }

    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        Box::pin(async move {
            check_txn_keys(&txn)?;
            self.run_txn(&txn).await
        })
    }

    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        Box::pin(async move {
            check_key(prefix)?;
            let from = if from == 0 { self.revision().await? + 1 } else { from };
            let options = WatchOptions::new().with_prefix().with_start_revision(from as i64);
            let mut stream =
                self.client.clone().watch(prefix, Some(options)).await.map_err(|e| self.err(e))?;
            let (tx, rx) = mpsc::channel::<Result<Vec<WatchEvent>>>(1024);
            let this = self.clone();
            tokio::spawn(async move {
                loop {
                    let msg = tokio::select! {
                        m = stream.message() => m,
                        () = tx.closed() => return,
                    };
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => {
                            let _ =
                                tx.send(Err(MetaError::unavailable("etcd closed the watch"))).await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(this.err(e))).await;
                            return;
                        }
                    };
                    if resp.compact_revision() > 0 || resp.canceled() {
                        let compacted = resp.compact_revision().max(0) as u64;
                        let _ =
                            tx.send(Err(MetaError::Compacted { requested: from, compacted })).await;
                        return;
                    }
                    let mut events = Vec::with_capacity(resp.events().len());
                    for e in resp.events() {
                        let Some(kv) = e.kv() else { continue };
                        let Ok(key) = kv.key_str() else { continue };
                        let (kind, value) = match e.event_type() {
                            EventType::Put => (EventKind::Put, Bytes::copy_from_slice(kv.value())),
                            EventType::Delete => (EventKind::Delete, Bytes::new()),
                        };
                        events.push(WatchEvent {
                            kind,
                            key: key.to_string(),
                            value,
                            revision: kv.mod_revision() as u64,
                        });
                    }
                    if !events.is_empty() && tx.send(Ok(events)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(Watch::new(VecDeque::new(), rx, Arc::new(Mutex::new(None)), None))
        })
    }

    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        Box::pin(async move {
            let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
            if secs == 0 {
                return Err(MetaError::InvalidArgument("lease TTL must be positive".into()));
            }
            let resp = self
                .client
                .clone()
                .lease_grant(secs as i64, None)
                .await
                .map_err(|e| self.err(e))?;
            Ok(resp.id())
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (mut keeper, mut stream) =
                self.client.clone().lease_keep_alive(lease).await.map_err(|e| self.err(e))?;
            keeper.keep_alive().await.map_err(|e| self.err(e))?;
            match stream.message().await.map_err(|e| self.err(e))? {
                Some(r) if r.ttl() > 0 => Ok(()),
                _ => Err(MetaError::LeaseNotFound(lease)),
            }
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match self.client.clone().lease_revoke(lease).await {
                Ok(_) => Ok(()),
                Err(e) => Err(match self.err(e) {
                    MetaError::LeaseNotFound(_) => MetaError::LeaseNotFound(lease),
                    other => other,
                }),
            }
        })
    }

    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let resp = self
                .client
                .clone()
                .put(sequence, Vec::new(), None)
                .await
                .map_err(|e| self.err(e))?;
            Ok(header_revision(resp.header()))
        })
    }

    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        Box::pin(async move {
            let resp = self.client.clone().get(vec![0u8], None).await.map_err(|e| self.err(e))?;
            Ok(header_revision(resp.header()))
        })
    }
}
