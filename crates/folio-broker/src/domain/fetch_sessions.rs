//! Fetch sessions (KIP-227): a consumer that fetches many partitions sends the whole list
//! once and then only what changed; the broker keeps the list and answers only the
//! partitions with something new.
//!
//! A request names its session with `(session_id, session_epoch)`:
//! - `(0, -1)`: no session (every client before v7, and librdkafka): a full request,
//!   answered in full with session id 0.
//! - `(id, -1)`: closes session `id`, then as `(0, -1)`.
//! - `(id, 0)`: closes session `id` if not 0, then a full request that opens a new session
//!   holding its partitions; the answer carries the new id, or 0 when the cache has no
//!   room (the client then keeps sending full requests: nothing breaks).
//! - `(id, n > 0)`: an incremental request. An unknown `id` gets FETCH_SESSION_ID_NOT_FOUND,
//!   an epoch other than the one the session expects INVALID_FETCH_SESSION_EPOCH, topic
//!   names in a session opened with topic ids (or the reverse: a version change)
//!   FETCH_SESSION_TOPIC_ID_ERROR; each error closes nothing but answers no partition. The
//!   request's partitions are added to the session or update its fetch offset and size,
//!   its forgotten topics leave it, the epoch moves on (1 after `i32::MAX`), and the
//!   whole session is fetched. The answer holds a partition only if it returns records,
//!   an error, or a high watermark or log start offset other than the last answer told.
//!
//! Limits: at most `fetch_sessions_max` sessions (Kafka's
//! `max.incremental.fetch.session.cache.slots`, 1 000) and `fetch_session_partitions_max`
//! partitions in all of them together (200 000, about 20 MiB). A new session takes a free
//! slot, else evicts the least recently used session idle for [`EVICTION_IDLE`] (Kafka's
//! `min.incremental.fetch.session.eviction.ms`), else the smallest session if it is smaller
//! than the new one; otherwise it is not created. An incremental request that would grow
//! the sessions beyond `fetch_session_partitions_max` closes its session and is answered
//! FETCH_SESSION_ID_NOT_FOUND: the client starts over with a full request. Either way the
//! limit hit is counted (`folio_kafka_limit_hits_total{limit="fetch_sessions"}`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use uuid::Uuid;

use crate::errors;
use crate::limits::ListenerLimits;

/// A session idle this long may be evicted for a new one (Kafka's
/// `min.incremental.fetch.session.eviction.ms`).
pub(crate) const EVICTION_IDLE: Duration = Duration::from_secs(120);

/// How a request names its topics: by name up to Fetch v12, by id from v13.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TopicKey {
    Name(String),
    Id(Uuid),
}

impl TopicKey {
    /// The key of a request topic at `version`.
    pub(crate) fn of(version: i16, name: &str, id: Uuid) -> TopicKey {
        if version >= 13 { TopicKey::Id(id) } else { TopicKey::Name(name.to_string()) }
    }
}

/// What a Fetch asks of its session: the session's id and epoch (Kafka's rules: epoch 0
/// opens one, -1 reads without one), whether topics are named by id (Fetch v13+), the
/// partitions listed in the request's order, and those it forgets.
#[derive(Debug, Clone)]
pub(crate) struct SessionRequest {
    pub id: i32,
    pub epoch: i32,
    pub by_id: bool,
    pub asked: Vec<Asked>,
    pub forgotten: Vec<(TopicKey, i32)>,
}

/// One partition a fetch reads.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    pub topic: TopicKey,
    pub partition: i32,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the client knows (-1: not checked), as last sent for it.
    pub current_leader_epoch: i32,
    /// What the session's last answer told of this partition (high watermark, log start
    /// offset); `None` outside a session or for a partition new to it.
    pub told: Option<(i64, i64)>,
}

/// What the fetch does with its session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// Answer in full with session id 0.
    Sessionless,
    /// Answer in full, then open a session holding the partitions.
    Open,
    /// Answer what changed of session `id`.
    Incremental { id: i32 },
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    by_id: bool,
    partitions: BTreeMap<(TopicKey, i32), Cached>,
    last_used: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Cached {
    fetch_offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
    told: Option<(i64, i64)>,
}

#[derive(Debug, Default)]
struct State {
    sessions: BTreeMap<i32, Session>,
    partitions: usize,
}

impl State {
    /// Asserts the bounds every change keeps: sessions and cached partitions within their
    /// limits, session ids and epochs positive, and (checked in debug builds, being a sum
    /// over every session) the partition count the sum of the sessions'.
    fn check(&self, sessions_max: usize, partitions_max: usize) {
        assert!(self.sessions.len() <= sessions_max, "{} sessions", self.sessions.len());
        assert!(self.partitions <= partitions_max, "{} cached partitions", self.partitions);
        debug_assert!(self.sessions.iter().all(|(id, s)| *id > 0 && s.epoch > 0));
        debug_assert_eq!(
            self.partitions,
            self.sessions.values().map(|s| s.partitions.len()).sum::<usize>()
        );
    }
}

/// The broker's fetch sessions (see the module doc).
#[derive(Debug)]
pub(crate) struct FetchSessions {
    sessions_max: usize,
    partitions_max: usize,
    state: Mutex<State>,
}

/// Why a session could not be kept: the limit hit is counted by the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NoRoom;

impl FetchSessions {
    pub(crate) fn new(limits: &ListenerLimits) -> FetchSessions {
        FetchSessions {
            sessions_max: limits.fetch_sessions_max,
            partitions_max: limits.fetch_session_partitions_max,
            state: Mutex::new(State::default()),
        }
    }

    /// Sessions open now.
    pub(crate) fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing under this lock panics half-way (plain map updates; `State::check` runs
        // after each change is whole), so a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a fetch: its session context and the partitions to read, or the error code
    /// that answers the whole request (with `NoRoom` when a limit closed the session).
    pub(crate) fn begin(
        &self,
        req: SessionRequest,
        now: Instant,
    ) -> Result<(Context, Vec<Asked>), (i16, Option<NoRoom>)> {
        let SessionRequest { id, epoch, by_id, asked: full, forgotten } = req;
        if epoch < -1 {
            return Err((errors::INVALID_FETCH_SESSION_EPOCH, None));
        }
        if epoch <= 0 {
            if id != 0 {
                self.close(id);
            }
            let context = if epoch == 0 { Context::Open } else { Context::Sessionless };
            return Ok((context, full));
        }
        let mut st = self.lock();
        let State { sessions, partitions } = &mut *st;
        let Some(s) = sessions.get_mut(&id) else {
            return Err((errors::FETCH_SESSION_ID_NOT_FOUND, None));
        };
        if s.epoch != epoch {
            return Err((errors::INVALID_FETCH_SESSION_EPOCH, None));
        }
        if s.by_id != by_id {
            return Err((errors::FETCH_SESSION_TOPIC_ID_ERROR, None));
        }
        let before = s.partitions.len();
        for a in full {
            let e = s.partitions.entry((a.topic, a.partition)).or_insert(Cached {
                fetch_offset: a.fetch_offset,
                max_bytes: a.max_bytes,
                current_leader_epoch: a.current_leader_epoch,
                told: None,
            });
            e.fetch_offset = a.fetch_offset;
            e.max_bytes = a.max_bytes;
            e.current_leader_epoch = a.current_leader_epoch;
        }
        for gone in &forgotten {
            s.partitions.remove(gone);
        }
        let total = *partitions - before + s.partitions.len();
        if total > self.partitions_max {
            sessions.remove(&id);
            *partitions -= before;
            st.check(self.sessions_max, self.partitions_max);
            return Err((errors::FETCH_SESSION_ID_NOT_FOUND, Some(NoRoom)));
        }
        *partitions = total;
        s.epoch = if s.epoch == i32::MAX { 1 } else { s.epoch + 1 };
        s.last_used = now;
        let asked: Vec<Asked> = s
            .partitions
            .iter()
            .map(|((topic, partition), c)| Asked {
                topic: topic.clone(),
                partition: *partition,
                fetch_offset: c.fetch_offset,
                max_bytes: c.max_bytes,
                current_leader_epoch: c.current_leader_epoch,
                told: c.told,
            })
            .collect();
        st.check(self.sessions_max, self.partitions_max);
        Ok((Context::Incremental { id }, asked))
    }

    /// Records what an incremental answer told of the session's partitions.
    pub(crate) fn told(&self, id: i32, answered: &[(TopicKey, i32, i64, i64)]) {
        let mut st = self.lock();
        let Some(s) = st.sessions.get_mut(&id) else { return };
        for (topic, partition, hw, start) in answered {
            if let Some(c) = s.partitions.get_mut(&(topic.clone(), *partition)) {
                c.told = Some((*hw, *start));
            }
        }
    }

    /// Opens a session holding `answered` (each with what the full answer told of it);
    /// its id, or `NoRoom`.
    pub(crate) fn open(
        &self,
        version: i16,
        asked: &[Asked],
        answered: &[(TopicKey, i32, i64, i64)],
        now: Instant,
    ) -> Result<i32, NoRoom> {
        let mut partitions: BTreeMap<(TopicKey, i32), Cached> = asked
            .iter()
            .map(|a| {
                let c = Cached {
                    fetch_offset: a.fetch_offset,
                    max_bytes: a.max_bytes,
                    current_leader_epoch: a.current_leader_epoch,
                    told: None,
                };
                ((a.topic.clone(), a.partition), c)
            })
            .collect();
        for (topic, partition, hw, start) in answered {
            if let Some(c) = partitions.get_mut(&(topic.clone(), *partition)) {
                c.told = Some((*hw, *start));
            }
        }
        let size = partitions.len();
        let mut st = self.lock();
        if size > self.partitions_max {
            return Err(NoRoom);
        }
        while st.sessions.len() >= self.sessions_max || st.partitions + size > self.partitions_max {
            let victim = evictable(&st.sessions, size, now).ok_or(NoRoom)?;
            if let Some(v) = st.sessions.remove(&victim) {
                st.partitions -= v.partitions.len();
                tracing::debug!(
                    session = victim,
                    partitions = v.partitions.len(),
                    "fetch session evicted"
                );
            }
        }
        let id = loop {
            let id = folio_rt::random::<i32>() & i32::MAX;
            if id != 0 && !st.sessions.contains_key(&id) {
                break id;
            }
        };
        st.partitions += size;
        let session = Session { epoch: 1, by_id: version >= 13, partitions, last_used: now };
        st.sessions.insert(id, session);
        st.check(self.sessions_max, self.partitions_max);
        Ok(id)
    }

    /// Closes session `id` if it exists.
    pub(crate) fn close(&self, id: i32) {
        let mut st = self.lock();
        if let Some(s) = st.sessions.remove(&id) {
            st.partitions -= s.partitions.len();
        }
        st.check(self.sessions_max, self.partitions_max);
    }
}

/// The session a new one of `size` partitions may evict: the least recently used one idle
/// for [`EVICTION_IDLE`], else the smallest one if smaller than `size`.
fn evictable(sessions: &BTreeMap<i32, Session>, size: usize, now: Instant) -> Option<i32> {
    let oldest = sessions.iter().min_by_key(|(id, s)| (s.last_used, **id));
    if let Some((id, s)) = oldest
        && now.saturating_duration_since(s.last_used) >= EVICTION_IDLE
    {
        return Some(*id);
    }
    sessions
        .iter()
        .filter(|(_, s)| s.partitions.len() < size)
        .min_by_key(|(id, s)| (s.partitions.len(), s.last_used, **id))
        .map(|(id, _)| *id)
}
