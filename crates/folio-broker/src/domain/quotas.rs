//! Client quotas (Kafka's `producer_byte_rate` and `consumer_byte_rate`): how many bytes a
//! second a user, a client id or both may produce or fetch on one broker, and the
//! throttling that holds them to it.
//!
//! An entity is a user, a client id, or both, each a name or `<default>`. The quota of a
//! request is the first entity that sets the key, in Kafka's order: (user, client), (user,
//! default client), (user), (default user, client), (default user, default client),
//! (default user), (client), (default client). The user is the session's principal
//! without `User:` (`ANONYMOUS` unauthenticated). Each matching (entity, actual names)
//! has its own rate: a `<default>` quota limits every user or client id on its own.
//!
//! Rates are measured as Kafka does: [`SAMPLES`] samples of [`SAMPLE`] each, over at least
//! `SAMPLES - 1` of them (so a new client's first burst is spread over 10 s). Above the
//! quota a request is answered at once with `throttle_time_ms = (rate - quota) / quota *
//! window`, at most [`THROTTLE_MAX`], and its connection reads no further request for
//! that long (KIP-219: the client also waits before sending). Fetch answers carry their
//! records all the same (nothing read is thrown away). Counted in
//! `folio_kafka_throttle_time_ms_total{kind=produce|fetch}`.
//!
//! Stored in one metadata value, `<root>/quotas/entities`, one entity per line:
//! `user TAB client TAB key=value,key=value`, where a part is `-` (absent), `*`
//! (`<default>`) or `=name`; changed by compare-and-set, cached on every broker by
//! `watched::keep_current`. Names are at most [`QUOTA_NAME_BYTES_MAX`] bytes without tabs or
//! line feeds; at most [`QUOTA_ENTITIES_MAX`] entities; at most [`SENSORS_MAX`] rates are
//! measured at once (idle ones are dropped first; beyond, a new one is not throttled).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::records::{Record, Update, corrupt, update};
use folio_meta::{MetaError, MetadataStore};
use folio_proto::InvalidConfig;

pub use crate::limits::QUOTA_ENTITIES_MAX;
pub use crate::limits::QUOTA_NAME_BYTES_MAX;
pub use crate::limits::SENSORS_MAX;
pub use crate::limits::THROTTLE_MAX;

/// Samples a rate is measured over (Kafka's `quota.window.num`).
pub const SAMPLES: u32 = 11;
/// One sample (Kafka's `quota.window.size.seconds`).
pub const SAMPLE: Duration = Duration::from_secs(1);
// The longest throttle is the whole window.
const _: () = assert!(THROTTLE_MAX.as_secs() == SAMPLES as u64);

/// The quota keys Folio enforces; others are refused.
pub const KEYS: [&str; 2] = ["producer_byte_rate", "consumer_byte_rate"];

/// One part of an entity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Named(String),
    Default,
}

/// A user, a client id, or both.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Entity {
    pub user: Option<Part>,
    pub client_id: Option<Part>,
}

/// What is throttled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
}

impl Kind {
    /// The quota key that limits it.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Produce => KEYS[0],
            Kind::Fetch => KEYS[1],
        }
    }
}

/// An entity's quotas, by key.
pub type Values = BTreeMap<String, f64>;

/// Changes to one entity's quotas: each key set to a value or removed (`None`).
pub type Change = (Entity, Vec<(String, Option<f64>)>);

/// What one measured rate is kept for: the kind, and the actual user and client id where
/// the matching entity names them.
type Sensor = (Kind, Option<String>, Option<String>);

fn key(keys: &Keys) -> String {
    format!("{}/quotas/entities", keys.root())
}

fn prefix(keys: &Keys) -> String {
    format!("{}/quotas/", keys.root())
}

/// Checks a name part (a clear error, never a broken record).
pub fn check_part(p: &Option<Part>) -> Result<(), InvalidConfig> {
    if let Some(Part::Named(n)) = p {
        if n.len() > QUOTA_NAME_BYTES_MAX {
            return Err(InvalidConfig::new(format!(
                "a quota entity name above {QUOTA_NAME_BYTES_MAX} bytes"
            )));
        }
        if n.contains(['\t', '\n']) {
            return Err(InvalidConfig::new("a quota entity name with a tab or line feed"));
        }
    }
    Ok(())
}

/// Checks a change of `key` to `value` (`None`: removed).
pub fn check_op(key: &str, value: Option<f64>) -> Result<(), InvalidConfig> {
    if !KEYS.contains(&key) {
        return Err(InvalidConfig::new(format!(
            "quota key {key:?} is not supported here; Folio enforces {KEYS:?}"
        )));
    }
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            Err(InvalidConfig::new(format!("{key} must be above 0, not {v}")))
        }
        _ => Ok(()),
    }
}

fn encode_part(p: &Option<Part>) -> String {
    match p {
        None => "-".into(),
        Some(Part::Default) => "*".into(),
        Some(Part::Named(n)) => format!("={n}"),
    }
}

fn decode_part(s: &str) -> Result<Option<Part>, String> {
    match s {
        "-" => Ok(None),
        "*" => Ok(Some(Part::Default)),
        _ => s
            .strip_prefix('=')
            .map(|n| Some(Part::Named(n.to_string())))
            .ok_or_else(|| format!("bad entity part {s:?}")),
    }
}

/// Encodes the entities (see the module doc).
pub fn encode(all: &BTreeMap<Entity, Values>) -> String {
    let mut out = String::new();
    for (e, v) in all {
        let values: Vec<String> = v.iter().map(|(k, x)| format!("{k}={x}")).collect();
        let line = [encode_part(&e.user), encode_part(&e.client_id), values.join(",")];
        out.push_str(&line.join("\t"));
        out.push('\n');
    }
    out
}

/// Decodes what [`encode`] wrote; a damaged value is an error naming the line.
fn decode(text: &str) -> Result<BTreeMap<Entity, Values>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let bad = |why: String| format!("quota line {line:?}: {why}");
        let f: Vec<&str> = line.split('\t').collect();
        let [user, client, values] = f[..] else { return Err(bad("not three fields".into())) };
        let e = Entity {
            user: decode_part(user).map_err(bad)?,
            client_id: decode_part(client).map_err(bad)?,
        };
        let mut v = Values::new();
        for kv in values.split(',').filter(|s| !s.is_empty()) {
            let (k, x) = kv.split_once('=').ok_or_else(|| bad(format!("{kv:?}")))?;
            let x: f64 = x.parse().map_err(|_| bad(format!("{x:?} is not a number")))?;
            v.insert(k.to_string(), x);
        }
        out.insert(e, v);
    }
    Ok(out)
}

/// Every entity with its quotas: the one record under `quotas/` (see the module doc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaEntities(pub BTreeMap<Entity, Values>);

impl Record for QuotaEntities {
    fn encode(&self) -> Bytes {
        Bytes::from(encode(&self.0))
    }

    fn decode(key: &str, bytes: &[u8]) -> folio_meta::Result<Self> {
        let text = std::str::from_utf8(bytes).map_err(|_| corrupt(key, "not UTF-8"))?;
        decode(text).map(QuotaEntities).map_err(|e| corrupt(key, e))
    }
}

/// Every entity with its quotas.
pub async fn list(
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> Result<BTreeMap<Entity, Values>, MetaError> {
    let k = key(keys);
    match meta.get(&k).await? {
        None => Ok(BTreeMap::new()),
        Some(v) => Ok(QuotaEntities::decode(&k, &v.value)?.0),
    }
}

/// Why an AlterClientQuotas change was not made.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// An entity name or a quota key or value is not valid (INVALID_REQUEST).
    #[error(transparent)]
    Invalid(#[from] InvalidConfig),
    /// The change would leave more than `QUOTA_ENTITIES_MAX` entities with quotas.
    #[error("above {QUOTA_ENTITIES_MAX} entities with quotas")]
    TooMany,
    /// The store failed (or holds a record that does not decode).
    #[error("{key}: {source}")]
    Store {
        key: String,
        #[source]
        source: MetaError,
    },
}

/// Applies `changes` (each entity's keys set or removed) in one compare-and-set
/// (`records::update`). Every change is checked first.
pub async fn alter(
    meta: &dyn MetadataStore,
    keys: &Keys,
    changes: &[Change],
) -> Result<(), QuotaError> {
    for (e, ops) in changes {
        check_part(&e.user)?;
        check_part(&e.client_id)?;
        for (k, v) in ops {
            check_op(k, *v)?;
        }
    }
    let k = key(keys);
    let mut too_many = false;
    update::<QuotaEntities>(meta, &k, |current| {
        let mut all = current.cloned().unwrap_or_default().0;
        for (e, ops) in changes {
            let values = all.entry(e.clone()).or_default();
            for (key, v) in ops {
                match v {
                    Some(v) => values.insert(key.clone(), *v),
                    None => values.remove(key),
                };
            }
            if values.is_empty() {
                all.remove(e);
            }
        }
        too_many = all.len() > QUOTA_ENTITIES_MAX;
        Ok(if too_many { Update::Nothing } else { Update::Write(QuotaEntities(all)) })
    })
    .await
    .map_err(|source| QuotaError::Store { key: k.clone(), source })?;
    if too_many {
        return Err(QuotaError::TooMany);
    }
    Ok(())
}

/// One measured rate: byte counts per sample.
#[derive(Debug)]
struct Window {
    samples: VecDeque<(Instant, f64)>,
}

impl Window {
    /// Adds `bytes` at `now`; the rate over the window and the window's length.
    fn record(&mut self, now: Instant, bytes: f64) -> (f64, Duration) {
        let span = SAMPLE * SAMPLES;
        while self.samples.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) >= span) {
            self.samples.pop_front();
        }
        match self.samples.back_mut() {
            Some((t, n)) if now.saturating_duration_since(*t) < SAMPLE => *n += bytes,
            _ => self.samples.push_back((now, bytes)),
        }
        let oldest = self.samples.front().map_or(now, |(t, _)| *t);
        let window = now.saturating_duration_since(oldest).max(SAMPLE * (SAMPLES - 1));
        let total: f64 = self.samples.iter().map(|(_, n)| n).sum();
        (total / window.as_secs_f64(), window)
    }

    fn idle(&self, now: Instant) -> bool {
        self.samples
            .back()
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= SAMPLE * SAMPLES)
    }
}

/// The broker's cached quotas and measured rates.
#[derive(Debug, Default)]
pub struct Quotas {
    entities: RwLock<Arc<BTreeMap<Entity, Values>>>,
    sensors: Mutex<HashMap<Sensor, Window>>,
}

impl Quotas {
    /// No quotas yet (the broker loads them before serving).
    pub fn new() -> Arc<Quotas> {
        Arc::new(Quotas::default())
    }

    /// The entity whose `kind` quota applies to `(user, client)`, with the quota.
    pub fn quota(&self, kind: Kind, user: &str, client: &str) -> Option<(Entity, f64)> {
        let all = self.entities.read().unwrap_or_else(|p| p.into_inner()).clone();
        if all.is_empty() {
            return None;
        }
        let (u, c) = (Some(Part::Named(user.into())), Some(Part::Named(client.into())));
        let d = Some(Part::Default);
        let order = [
            (u.clone(), c.clone()),
            (u.clone(), d.clone()),
            (u, None),
            (d.clone(), c.clone()),
            (d.clone(), d.clone()),
            (d.clone(), None),
            (None, c),
            (None, d),
        ];
        order.into_iter().find_map(|(user, client_id)| {
            let e = Entity { user, client_id };
            all.get(&e).and_then(|v| v.get(kind.key())).map(|q| (e, *q))
        })
    }

    /// Records `bytes` of `kind` for `(user, client)` at `now`; how long to throttle.
    pub fn record(
        &self,
        kind: Kind,
        user: &str,
        client: &str,
        bytes: usize,
        now: Instant,
    ) -> Duration {
        let Some((entity, quota)) = self.quota(kind, user, client) else {
            return Duration::ZERO;
        };
        let sensor = (
            kind,
            entity.user.is_some().then(|| user.to_string()),
            entity.client_id.is_some().then(|| client.to_string()),
        );
        let mut sensors = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
        if !sensors.contains_key(&sensor) && sensors.len() >= SENSORS_MAX {
            sensors.retain(|_, w| !w.idle(now));
            if sensors.len() >= SENSORS_MAX {
                tracing::warn!(
                    user,
                    client,
                    "client quota not measured: {SENSORS_MAX} rates measured already (SENSORS_MAX)"
                );
                return Duration::ZERO;
            }
        }
        let w = sensors.entry(sensor).or_insert_with(|| Window { samples: VecDeque::new() });
        let (rate, window) = w.record(now, bytes as f64);
        if rate <= quota {
            return Duration::ZERO;
        }
        window.mul_f64((rate - quota) / quota).min(THROTTLE_MAX)
    }

    /// Replaces the cached entities.
    pub fn set(&self, all: BTreeMap<Entity, Values>) {
        *self.entities.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(all);
    }

    /// The cached entities.
    pub fn entities(&self) -> Arc<BTreeMap<Entity, Values>> {
        self.entities.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl crate::domain::watched::Watched for Quotas {
    const WHAT: &'static str = "client quota";

    fn prefix(keys: &Keys) -> String {
        prefix(keys)
    }

    async fn reload(&self, meta: &dyn MetadataStore, keys: &Keys) -> Result<(), MetaError> {
        self.set(list(meta, keys).await?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &str) -> Option<Part> {
        Some(Part::Named(s.into()))
    }

    #[test]
    fn the_most_specific_entity_that_sets_the_key_applies() {
        let q = Quotas::default();
        let mut all = BTreeMap::new();
        let set = |all: &mut BTreeMap<Entity, Values>, user, client_id, k: &str, v| {
            all.insert(Entity { user, client_id }, Values::from([(k.to_string(), v)]));
        };
        set(&mut all, None, Some(Part::Default), KEYS[0], 1.0);
        set(&mut all, None, named("c"), KEYS[0], 2.0);
        set(&mut all, Some(Part::Default), None, KEYS[0], 3.0);
        set(&mut all, named("u"), None, KEYS[1], 4.0);
        set(&mut all, named("u"), named("c"), KEYS[0], 5.0);
        q.set(all);
        let rate = |kind, u, c| q.quota(kind, u, c).map(|(_, v)| v);
        assert_eq!(rate(Kind::Produce, "u", "c"), Some(5.0));
        assert_eq!(rate(Kind::Produce, "u", "x"), Some(3.0), "default user beats client ids");
        assert_eq!(rate(Kind::Fetch, "u", "c"), Some(4.0), "each key on its own");
        assert_eq!(rate(Kind::Fetch, "v", "c"), None);
        let q = Quotas::default();
        let mut all = BTreeMap::new();
        set(&mut all, None, Some(Part::Default), KEYS[0], 1.0);
        set(&mut all, None, named("c"), KEYS[0], 2.0);
        q.set(all);
        assert_eq!(q.quota(Kind::Produce, "u", "c").map(|x| x.1), Some(2.0));
        assert_eq!(q.quota(Kind::Produce, "u", "z").map(|x| x.1), Some(1.0));
    }

    #[test]
    fn a_burst_is_measured_over_the_window_and_throttled_in_proportion() {
        let q = Quotas::default();
        let e = Entity { user: None, client_id: Some(Part::Default) };
        q.set(BTreeMap::from([(e, Values::from([(KEYS[0].to_string(), 100_000.0)]))]));
        let t0 = Instant::now();
        // 900 kB at once: 90 kB/s over the 10 s minimum window, under the quota.
        assert_eq!(q.record(Kind::Produce, "u", "a", 900_000, t0), Duration::ZERO);
        // 600 kB more: 150 kB/s, half again the quota: half the window.
        let t = q.record(Kind::Produce, "u", "a", 600_000, t0);
        assert_eq!(t, Duration::from_secs(5));
        // Each client id has its own rate under a default quota; fetches are not limited.
        assert_eq!(q.record(Kind::Produce, "u", "b", 900_000, t0), Duration::ZERO);
        assert_eq!(q.record(Kind::Fetch, "u", "a", 10_000_000, t0), Duration::ZERO);
        // After the window has passed, the old bytes no longer count.
        let later = t0 + SAMPLE * SAMPLES;
        assert_eq!(q.record(Kind::Produce, "u", "a", 1, later), Duration::ZERO);
        // A huge burst is throttled at most THROTTLE_MAX.
        assert_eq!(q.record(Kind::Produce, "u", "a", usize::MAX / 2, later), THROTTLE_MAX);
    }

    #[test]
    fn the_record_round_trips_and_damage_is_an_error() {
        let mut all = BTreeMap::new();
        let e = Entity { user: named("alice"), client_id: Some(Part::Default) };
        all.insert(e, Values::from([(KEYS[0].to_string(), 1024.5), (KEYS[1].to_string(), 7.0)]));
        all.insert(
            Entity { user: None, client_id: named("c=d,e") },
            Values::from([(KEYS[1].to_string(), 2.0)]),
        );
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        for bad in
            ["x\t-\tproducer_byte_rate=1", "-\t-", "-\t*\tproducer_byte_rate=a", "-\t*\tnope"]
        {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        assert!(check_part(&named("a\tb")).is_err());
        assert!(check_part(&named(&"x".repeat(QUOTA_NAME_BYTES_MAX + 1))).is_err());
        assert!(check_op("request_percentage", Some(1.0)).is_err());
        assert!(check_op(KEYS[0], Some(0.0)).is_err());
        assert!(check_op(KEYS[0], Some(f64::NAN)).is_err());
        assert!(check_op(KEYS[0], None).is_ok());
    }
}
