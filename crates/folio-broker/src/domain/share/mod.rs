//! Share groups' data plane (KIP-932) on a partition's owner: the share-partitions of the
//! partitions this broker serves (`partition.rs`: their states and stored form) and the
//! share sessions of the members fetching from it.
//!
//! A share-partition is loaded from the metadata store at its first use after the
//! partition opened here (a new leader epoch loads it again: another owner may have
//! acknowledged meanwhile); a group's first use starts it at the log's start or end
//! (`share.auto.offset.reset`) and stores that at once. Every acknowledgement is stored
//! (compare-and-set) before it is answered; a write refused by the compare means another
//! owner wrote: the state is read again and the acknowledgement fails (the client
//! acknowledges again or the records are delivered again — at least once).
//!
//! ## Sessions
//! A member's ShareFetch opens a session here (epoch 0) naming partitions; later fetches
//! (epoch +1 each) add and forget partitions and read from all of them. Epoch -1 closes
//! it, releasing what the member still holds. At most `share_sessions_max` sessions; one
//! idle for `share_session_idle` goes to make room.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use folio_meta::keys::Keys;
use folio_meta::{Clock, Compare, MetaError, MetadataStore, Txn, Version, list_all};
use uuid::Uuid;

pub use crate::domain::group::share::{Reset, ShareConfig};
pub use partition::{Ack, Limits, NotAcquired, RecordState, SharePartition};

use crate::domain::group::escape;
use crate::errors;

pub mod partition;

/// A share-partition as loaded: its state, the stored record's version, and the leader
/// epoch of the partition it was loaded under.
#[derive(Debug)]
pub struct Loaded {
    pub state: SharePartition,
    version: Version,
    epoch: u32,
}

type PartKey = (String, Uuid, i32);

#[derive(Debug)]
struct Session {
    epoch: i32,
    partitions: BTreeSet<(Uuid, i32)>,
    last_used: u64,
}

/// What a ShareFetch or ShareAcknowledge may do with its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStep {
    /// Open (or go on with) the session; these are its partitions now.
    Go(BTreeSet<(Uuid, i32)>),
    /// The session was closed (epoch -1); these were its partitions.
    Closed(BTreeSet<(Uuid, i32)>),
}

/// The share-partitions and share sessions of this broker.
#[derive(Debug)]
pub struct Shares {
    pub config: ShareConfig,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    clock: Arc<dyn Clock>,
    parts: Mutex<HashMap<PartKey, Arc<tokio::sync::Mutex<Option<Loaded>>>>>,
    sessions: Mutex<HashMap<(String, String), Session>>,
}

impl Shares {
    /// No share-partition loaded and no session yet; states stored in `meta` under `keys`,
    /// locks timed on `clock`.
    pub fn new(
        config: ShareConfig,
        meta: Arc<dyn MetadataStore>,
        keys: Keys,
        clock: Arc<dyn Clock>,
    ) -> Shares {
        Shares {
            config,
            meta,
            keys,
            clock,
            parts: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The share-partitions' limits the broker's settings make (a group's configs may
    /// override some: `api::share`).
    pub fn limits(&self) -> Limits {
        Limits {
            lock_ms: self.config.lock_duration.as_millis() as u64,
            delivery_count_limit: self.config.delivery_count_limit,
            record_locks_max: self.config.record_locks_max,
        }
    }

    /// The prefix of every share-partition of topic `id` (deleted with the topic).
    pub fn topic_prefix(&self, id: Uuid) -> String {
        format!("{}/share-states/{}/", self.keys.root(), id.simple())
    }

    fn key(&self, group: &str, id: Uuid, partition: i32) -> String {
        format!("{}{partition}/{}", self.topic_prefix(id), escape(group))
    }

    /// Steps `member`'s session of `group` to `epoch`, adding `add` and dropping `forget`
    /// (Kafka's rules: 0 opens anew, -1 closes, else the next epoch). `Err`: the code.
    pub fn session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        add: &[(Uuid, i32)],
        forget: &[(Uuid, i32)],
    ) -> Result<SessionStep, i16> {
        let now = self.clock.now_ms();
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        let key = (group.to_string(), member.to_string());
        if epoch == -1 {
            let s = sessions.remove(&key).ok_or(errors::SHARE_SESSION_NOT_FOUND)?;
            return Ok(SessionStep::Closed(s.partitions));
        }
        if epoch == 0 {
            if !sessions.contains_key(&key) && sessions.len() >= self.config.share_sessions_max {
                let idle = self.config.share_session_idle.as_millis() as u64;
                let oldest = sessions
                    .iter()
                    .filter(|(_, s)| s.last_used + idle <= now)
                    .min_by_key(|(_, s)| s.last_used)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => {
                        sessions.remove(&k);
                    }
                    None => return Err(errors::SHARE_SESSION_LIMIT_REACHED),
                }
            }
            if !sessions.keys().any(|(g, _)| g == group) {
                // The group's first session here: its share-partitions are read again (an
                // empty group's start offsets may have been altered through another broker).
                self.forget_group(group);
            }
            let s = Session { epoch: 0, partitions: BTreeSet::new(), last_used: now };
            sessions.insert(key.clone(), s);
        }
        let s = sessions.get_mut(&key).ok_or(errors::SHARE_SESSION_NOT_FOUND)?;
        if epoch != 0 && epoch != s.epoch.wrapping_add(1) {
            return Err(errors::INVALID_SHARE_SESSION_EPOCH);
        }
        s.epoch = epoch;
        s.last_used = now;
        s.partitions.extend(add.iter().copied());
        for f in forget {
            s.partitions.remove(f);
        }
        Ok(SessionStep::Go(s.partitions.clone()))
    }

    /// The share-partition of `group` on (`id`, `partition`), loaded (or started at
    /// `log_start`/`log_end` per `reset`) under leader epoch `epoch`.
    pub async fn load(
        &self,
        group: &str,
        (id, partition): (Uuid, i32),
        epoch: u32,
        (log_start, log_end): (i64, i64),
        reset: Reset,
    ) -> Result<Arc<tokio::sync::Mutex<Option<Loaded>>>, MetaError> {
        let slot = {
            let mut parts = self.parts.lock().expect("share parts lock");
            parts.entry((group.to_string(), id, partition)).or_default().clone()
        };
        let mut held = slot.lock().await;
        if held.as_ref().is_some_and(|l| l.epoch == epoch) {
            drop(held);
            return Ok(slot);
        }
        let key = self.key(group, id, partition);
        let loaded = match self.meta.get(&key).await? {
            Some(v) => match SharePartition::decode(&v.value) {
                Some(state) => Loaded { state, version: v.version, epoch },
                None => {
                    tracing::warn!(key, "a damaged share-partition state: starting it again");
                    let start = if reset == Reset::Earliest { log_start } else { log_end };
                    self.create(&key, SharePartition::new(start), Some(v.version), epoch).await?
                }
            },
            None => {
                let start = if reset == Reset::Earliest { log_start } else { log_end };
                self.create(&key, SharePartition::new(start), None, epoch).await?
            }
        };
        *held = Some(loaded);
        drop(held);
        Ok(slot)
    }

    async fn create(
        &self,
        key: &str,
        state: SharePartition,
        over: Option<Version>,
        epoch: u32,
    ) -> Result<Loaded, MetaError> {
        let guard = match over {
            Some(v) => Compare::Version(key.to_string(), v),
            None => Compare::Absent(key.to_string()),
        };
        let out =
            self.meta.txn(Txn::new().compare(guard).put(key.to_string(), state.encode())).await?;
        if !out.succeeded {
            return Err(MetaError::unavailable(format!(
                "{key}: created by another owner meanwhile"
            )));
        }
        tracing::info!(key, start = state.start, "share-partition started");
        Ok(Loaded { state, version: out.revision, epoch })
    }

    /// Stores `next` as the share-partition's state (compare-and-set) and then takes it;
    /// a refused compare reads the state again and fails.
    pub async fn store(
        &self,
        group: &str,
        (id, partition): (Uuid, i32),
        loaded: &mut Loaded,
        next: SharePartition,
    ) -> Result<(), MetaError> {
        let key = self.key(group, id, partition);
        let txn = Txn::new()
            .compare(Compare::Version(key.clone(), loaded.version))
            .put(key.clone(), next.encode());
        let out = self.meta.txn(txn).await?;
        if out.succeeded {
            loaded.version = out.revision;
            loaded.state = next;
            return Ok(());
        }
        if let Some(v) = self.meta.get(&key).await?
            && let Some(state) = SharePartition::decode(&v.value)
        {
            *loaded = Loaded { state, version: v.version, epoch: loaded.epoch };
        }
        Err(MetaError::unavailable(format!("{key}: changed by another owner")))
    }

    /// Every stored share-partition of `group`: (topic id, partition, state), for the
    /// admin APIs.
    pub async fn stored_of(
        &self,
        group: &str,
    ) -> Result<Vec<(Uuid, i32, SharePartition, String, Version)>, MetaError> {
        let prefix = format!("{}/share-states/", self.keys.root());
        let tail = format!("/{}", escape(group));
        let mut out = Vec::new();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            let rest = &v.key[prefix.len()..];
            let Some(head) = rest.strip_suffix(tail.as_str()) else { continue };
            let Some((id, p)) = head.split_once('/') else { continue };
            let (Ok(id), Ok(p)) = (Uuid::parse_str(id), p.parse::<i32>()) else { continue };
            if let Some(state) = SharePartition::decode(&v.value) {
                out.push((id, p, state, v.key.clone(), v.version));
            }
        }
        Ok(out)
    }

    /// Deletes every share-partition of a deleted topic (every group's), stored and loaded.
    pub async fn forget_topic(&self, id: Uuid) -> Result<usize, MetaError> {
        let keys: Vec<String> = list_all(self.meta.as_ref(), &self.topic_prefix(id))
            .await?
            .into_iter()
            .map(|v| v.key)
            .collect();
        for chunk in keys.chunks(self.meta.txn_ops_max()) {
            self.meta.txn(chunk.iter().fold(Txn::new(), |t, k| t.delete(k.clone()))).await?;
        }
        self.parts.lock().expect("share parts lock").retain(|(_, t, _), _| *t != id);
        Ok(keys.len())
    }

    /// Deletes every stored share-partition of `group` (its group was deleted); returns
    /// how many. Each removal compares the record it read.
    pub async fn delete_group(&self, group: &str) -> Result<usize, MetaError> {
        let stored = self.stored_of(group).await?;
        for (_, _, _, key, version) in &stored {
            let txn =
                Txn::new().compare(Compare::Version(key.clone(), *version)).delete(key.clone());
            self.meta.txn(txn).await?;
        }
        self.forget_group(group);
        Ok(stored.len())
    }

    /// Sets `group`'s share-partition of (`id`, `partition`) to start at `start`, nothing
    /// in flight (AlterShareGroupOffsets; the group has no members).
    pub async fn set_start(
        &self,
        group: &str,
        (id, partition): (Uuid, i32),
        start: i64,
    ) -> Result<(), MetaError> {
        let key = self.key(group, id, partition);
        self.meta
            .put(&key, SharePartition::new(start).encode().into(), folio_meta::Expect::Any)
            .await?;
        self.parts.lock().expect("share parts lock").remove(&(group.to_string(), id, partition));
        tracing::info!(group, %id, partition, start, "share-partition start offset altered");
        Ok(())
    }

    /// Deletes `group`'s share-partitions of topic `id` (DeleteShareGroupOffsets).
    pub async fn delete_of_topic(&self, group: &str, id: Uuid) -> Result<usize, MetaError> {
        let mut n = 0;
        for (t, p, _, key, version) in self.stored_of(group).await? {
            if t == id {
                let txn = Txn::new().compare(Compare::Version(key.clone(), version)).delete(key);
                self.meta.txn(txn).await?;
                self.parts.lock().expect("share parts lock").remove(&(group.to_string(), id, p));
                n += 1;
            }
        }
        Ok(n)
    }

    /// Forgets what is loaded of (`id`, `partition`) here (it closed here): the loaded
    /// share-partitions are bounded by the partitions open here times their share groups.
    pub fn forget_partition(&self, id: Uuid, partition: i32) {
        self.parts
            .lock()
            .expect("share parts lock")
            .retain(|(_, t, p), _| (*t, *p) != (id, partition));
    }

    /// Forgets what is loaded of `group` here (its stored state was altered or deleted).
    pub fn forget_group(&self, group: &str) {
        self.parts.lock().expect("share parts lock").retain(|(g, _, _), _| g != group);
    }

    /// Sessions open here.
    pub fn sessions_open(&self) -> usize {
        self.sessions.lock().expect("share sessions lock").len()
    }
}
