//! The bytes a request holds, from its connection's budget and the process's, until its
//! answer is written (see `crate::limits`). The listener reserves request bytes as they
//! arrive; Fetch reserves its answer's bytes through the request's scope.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A connection's byte budget and the process's (see `crate::limits`).
#[derive(Debug, Clone)]
pub(crate) struct Budgets {
    pub(crate) connection: Arc<Semaphore>,
    pub(crate) process: Arc<Semaphore>,
    pub(crate) answers: Arc<Semaphore>,
}

/// Bytes a request holds (its own, then its answer's) until its answer is written: permits
/// of the connection's budget, and as many of the process's request or answer budget.
#[derive(Debug, Default)]
pub(crate) struct Held {
    connection: Option<OwnedSemaphorePermit>,
    process: Option<OwnedSemaphorePermit>,
    answers: Option<OwnedSemaphorePermit>,
}

impl Held {
    pub(crate) fn bytes(&self) -> usize {
        self.connection.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Adds what `other` holds to this.
    pub(crate) fn merge(&mut self, other: Held) {
        for (mine, theirs) in [
            (&mut self.connection, other.connection),
            (&mut self.process, other.process),
            (&mut self.answers, other.answers),
        ] {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.merge(t),
                (None, t) => *mine = t,
                (Some(_), None) => {}
            }
        }
    }

    /// Gives back `n` answer bytes (at most what is held).
    pub(crate) fn release_answer(&mut self, n: usize) {
        let n = n.min(self.answers.as_ref().map_or(0, OwnedSemaphorePermit::num_permits));
        for p in [&mut self.connection, &mut self.answers].into_iter().flatten() {
            drop(p.split(n));
        }
    }
}

impl Budgets {
    /// Reserves `n` bytes (at most `u32::MAX`): the connection's budget first, so a
    /// connection waiting on its own budget holds none of the process's.
    pub(crate) async fn reserve(&self, n: usize) -> Held {
        let n32 = u32::try_from(n).expect("limits validated below 2 GiB");
        let c = self.connection.clone().acquire_many_owned(n32).await.expect("never closed");
        let p = self.process.clone().acquire_many_owned(n32).await.expect("never closed");
        Held { connection: Some(c), process: Some(p), answers: None }
    }

    /// Waits until the connection holds at most `read_ahead` of its `capacity` bytes (a
    /// reader's pushback before it reads the next request). Tokio's semaphore is fair:
    /// while this waits, released bytes go to it first, so an answer's `try_reserve_answer`
    /// on the same connection finds less room meanwhile (a Fetch then answers smaller).
    pub(crate) async fn wait_below(&self, read_ahead: usize, capacity: usize) {
        let n = u32::try_from(capacity.saturating_sub(read_ahead)).expect("limits validated");
        if n > 0 {
            drop(self.connection.acquire_many(n).await.expect("never closed"));
        }
    }

    /// Reserves `n` answer bytes if the connection's budget and the answer budget have
    /// them now.
    pub(crate) fn try_reserve_answer(&self, n: usize) -> Option<Held> {
        let n32 = u32::try_from(n).ok()?;
        let c = self.connection.clone().try_acquire_many_owned(n32).ok()?;
        let a = self.answers.clone().try_acquire_many_owned(n32).ok()?;
        Some(Held { connection: Some(c), process: None, answers: Some(a) })
    }
}

/// What a request's task may reserve its answer's bytes from (Fetch does).
#[derive(Debug, Clone)]
pub(crate) struct RequestScope {
    pub budgets: Budgets,
    pub held: Arc<Mutex<Held>>,
    /// Who sent the request, on which listener.
    pub session: crate::domain::acl::Session,
    /// An OffsetFetch's or OffsetCommit's place among the group commits (`Handler::arrive`).
    pub arrival: Option<u64>,
    /// The request's size (its body's bytes): what a produce quota counts.
    pub request_bytes: usize,
    /// The request header's client id (empty without one).
    pub client_id: Arc<str>,
    /// Until when the connection reads no further request (a client quota's throttle).
    pub mute: Arc<Mutex<tokio::time::Instant>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    /// Polls once: whether `f` is done now.
    fn ready(f: Pin<&mut impl Future<Output = ()>>) -> bool {
        f.poll(&mut Context::from_waker(Waker::noop())) == Poll::Ready(())
    }

    fn budgets(capacity: usize) -> Budgets {
        Budgets {
            connection: Arc::new(Semaphore::new(capacity)),
            process: Arc::new(Semaphore::new(capacity)),
            answers: Arc::new(Semaphore::new(capacity)),
        }
    }

    /// The reader's pushback: it goes on only once what the connection holds is down to its
    /// read-ahead; at or below it, at once.
    #[tokio::test]
    async fn a_reader_waits_until_its_connection_holds_no_more_than_its_read_ahead() {
        let b = budgets(100);
        let first = b.reserve(30).await;
        let second = b.reserve(30).await;
        assert!(ready(std::pin::pin!(b.wait_below(60, 100))), "60 held, read-ahead 60");
        let mut wait = Box::pin(b.wait_below(30, 100));
        assert!(!ready(wait.as_mut()), "60 held, read-ahead 30");
        drop(first);
        wait.await;
        drop(second);
        assert!(ready(std::pin::pin!(b.wait_below(0, 100))), "nothing held");
        assert_eq!(b.connection.available_permits(), 100, "the wait keeps nothing");
    }
}
