//! Connections to bookies by bookie id, resolved through their registrations.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use folio_meta::keys::Keys;
use folio_meta::records::{BookieRegistration, Record};
use folio_meta::{MetadataStore, list_all};
use folio_proto::auth::ClusterSecret;

use crate::BookieConnection;
use crate::error::{LedgerError, Result};

/// Connections to bookies by id, opened on first use and replaced when they fail.
#[derive(Debug)]
pub struct BookiePool {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    inflight_max: usize,
    /// The cluster secret every connection proves, if the cluster has one.
    secret: Option<ClusterSecret>,
    /// The local address connections are made from (the kernel's choice when `None`).
    source: Option<std::net::IpAddr>,
    conns: tokio::sync::Mutex<BTreeMap<String, Arc<BookieConnection>>>,
}

impl BookiePool {
    /// A pool resolving bookie ids through `meta`, with at most `inflight_max` requests in flight
    /// per connection.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys, inflight_max: usize) -> BookiePool {
        let conns = tokio::sync::Mutex::new(BTreeMap::new());
        BookiePool { meta, keys, inflight_max, secret: None, source: None, conns }
    }

    /// The same pool, proving `secret` on every connection it opens.
    pub fn with_secret(mut self, secret: Option<ClusterSecret>) -> BookiePool {
        self.secret = secret;
        self
    }

    /// The same pool, connecting from the local address `source`.
    pub fn with_source(mut self, source: Option<std::net::IpAddr>) -> BookiePool {
        self.source = source;
        self
    }

    /// The local address connections are made from, if one was set.
    pub fn source(&self) -> Option<std::net::IpAddr> {
        self.source
    }

    /// The cluster secret connections prove, if any.
    pub fn secret(&self) -> Option<&ClusterSecret> {
        self.secret.as_ref()
    }

    /// Ids of the bookies registered as writable.
    pub async fn writable(&self) -> Result<Vec<String>> {
        let prefix = self.keys.bookies_writable();
        Ok(list_all(self.meta.as_ref(), &prefix)
            .await?
            .into_iter()
            .map(|v| v.key[prefix.len()..].to_string())
            .collect())
    }

    /// The bookies registered as writable and not being drained (`folio bookie
    /// decommission`), with their racks: placement's candidates.
    pub async fn writable_candidates(&self) -> Result<Vec<crate::placement::Candidate>> {
        let prefix = self.keys.bookies_writable();
        let draining = self.keys.decommissions();
        let draining: std::collections::HashSet<String> = list_all(self.meta.as_ref(), &draining)
            .await?
            .into_iter()
            .map(|v| v.key[draining.len()..].to_string())
            .collect();
        Ok(list_all(self.meta.as_ref(), &prefix)
            .await?
            .into_iter()
            .map(|v| crate::placement::Candidate {
                bookie_id: v.key[prefix.len()..].to_string(),
                rack: BookieRegistration::decode(&v.key, &v.value).ok().and_then(|r| r.rack),
            })
            .filter(|c| !draining.contains(&c.bookie_id))
            .collect())
    }

    /// The racks of `bookies` as registered (writable or read-only); none for a bookie that
    /// is not registered or has no rack.
    pub async fn racks(&self, bookies: &[String]) -> Result<Vec<Option<String>>> {
        let mut racks = HashMap::new();
        for prefix in [self.keys.bookies_writable(), self.keys.bookies_readonly()] {
            for v in list_all(self.meta.as_ref(), &prefix).await? {
                if let Ok(r) = BookieRegistration::decode(&v.key, &v.value) {
                    racks.insert(r.bookie_id, r.rack);
                }
            }
        }
        Ok(bookies.iter().map(|b| racks.get(b).cloned().flatten()).collect())
    }

    /// A replacement's candidates for a position of `ensemble`: the writable bookies outside
    /// it, and the racks of its members (`placement::replacement` takes both).
    pub async fn spares(
        &self,
        ensemble: &[String],
    ) -> Result<(Vec<crate::placement::Candidate>, Vec<Option<String>>)> {
        let mut spares = self.writable_candidates().await?;
        spares.retain(|c| !ensemble.contains(&c.bookie_id));
        Ok((spares, self.racks(ensemble).await?))
    }

    /// A live connection to `bookie_id` (reconnecting if the last one failed).
    pub async fn get(&self, bookie_id: &str) -> Result<Arc<BookieConnection>> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(bookie_id).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let mut reg = None;
        for read_only in [false, true] {
            let key = self.keys.bookie(bookie_id, read_only);
            if let Some(v) = self.meta.get(&key).await? {
                reg = Some(BookieRegistration::decode(&key, &v.value)?);
                break;
            }
        }
        let reg = reg.ok_or_else(|| LedgerError::UnknownBookie(bookie_id.to_string()))?;
        let addr = reg.address.parse().map_err(|_| {
            LedgerError::UnknownBookie(format!("{bookie_id} (bad address {})", reg.address))
        })?;
        let secret = self.secret.as_ref();
        let c = BookieConnection::connect_from(self.source, addr, self.inflight_max, secret);
        let c = Arc::new(c.await?);
        conns.insert(bookie_id.to_string(), c.clone());
        Ok(c)
    }
}
