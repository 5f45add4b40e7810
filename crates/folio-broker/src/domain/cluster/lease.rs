//! The membership loop (`maintain`): keeps the broker's lease alive, re-registers, lists
//! the live brokers, reads the controller claim, and fences the broker when it cannot hold
//! its registration (see the parent module's doc on self-fencing).

use std::sync::Arc;
use std::time::Duration;

use folio_meta::keys::Keys;
use folio_meta::{MetaError, MetadataStore};
use tokio::sync::watch;

use super::{FENCE_AFTER, Membership, Registered, elect, refresh, try_register};

/// The most one metadata call of the membership loop may take, as a part of the lease TTL:
/// past it the call counts as failed, so an unreachable etcd cannot hold the loop past the
/// moment the broker must fence itself.
const CALL_MAX_OF_TTL: u32 = 6;

/// `fut`, or an error once `max` has passed.
async fn bounded<T>(
    max: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, MetaError>>,
) -> Result<T, MetaError> {
    match tokio::time::timeout(max, fut).await {
        Ok(r) => r,
        Err(_) => Err(MetaError::unavailable(format!("{what}: no answer within {max:?}"))),
    }
}

/// Keeps the lease alive (registering again on a new lease if it expired), checks that the
/// node id's registration is still this broker's, fences the broker while it cannot hold it
/// (see the module doc), keeps the live list fresh and the controller claim read (claimed
/// when free and this broker is the lowest live), every `poll`, until `stop`. `renewed_at`:
/// when the lease was granted or last renewed (the lease was valid then).
///
/// Every call is bounded, and never past the moment the broker must fence itself: a store
/// that does not answer fences the broker on time, not when the call gives up.
#[allow(clippy::too_many_arguments)]
pub async fn maintain(
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    membership: Arc<Membership>,
    renewed_at: tokio::time::Instant,
    ttl: Duration,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut lease = Lease {
        renewed_at,
        call_max: ttl / CALL_MAX_OF_TTL,
        fence_after: ttl * FENCE_AFTER.0 / FENCE_AFTER.1,
        ttl,
        clock: membership.clock.clone(),
    };
    membership.lease_renewed(renewed_at, lease.fence_after);
    let node_id = membership.me.node_id;
    // Why the registration is not this broker's, as last read (`None`: it is).
    let mut not_mine: Option<String> = None;
    loop {
        let pause = poll.min(lease.left().max(Duration::from_millis(1)));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = async { let _ = stop.wait_for(|s| *s).await; } => {
                if membership.revoke_on_stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = bounded(lease.call_max, "revoke", meta.revoke_lease(membership.lease())).await;
                }
                return;
            }
        }
        lease.fence_if_stale(&membership, &not_mine);
        if lease.clock.now().saturating_duration_since(lease.renewed_at) >= ttl / 3 {
            lease.renew(meta.as_ref(), &membership, &mut not_mine).await;
            lease.fence_if_stale(&membership, &not_mine);
        }
        let id = membership.lease();
        let listed =
            bounded(lease.budget(), "listing brokers", refresh(meta.as_ref(), &keys, &membership))
                .await;
        match listed {
            Ok(Some(Some(l))) if l == id => not_mine = None,
            Ok(Some(holder)) => {
                not_mine = Some(format!(
                    "node id {node_id} is registered on lease {holder:?}, not this broker's {id}: another process runs with this id"
                ));
            }
            Ok(None) => {
                // Not registered (its lease expired, or it was removed): register again,
                // create-if-absent on this broker's lease.
                let me = &membership.me;
                let r = bounded(
                    lease.budget(),
                    "registering",
                    try_register(meta.as_ref(), &keys, me, id),
                )
                .await;
                not_mine = match r {
                    Ok(Registered::Created(_)) => {
                        tracing::warn!(
                            node_id,
                            lease = id,
                            "registration was gone; registered again"
                        );
                        None
                    }
                    Ok(Registered::Held(holder)) => Some(format!(
                        "node id {node_id} is registered by {holder}, another process"
                    )),
                    Err(e) => Some(format!("not registered, and registering failed: {e}")),
                };
            }
            Err(e) => tracing::warn!(node_id, error = %e, "listing live brokers failed"),
        }
        if lease.fence_if_stale(&membership, &not_mine) {
            continue;
        }
        if let Err(e) = bounded(
            lease.budget(),
            "controller claim",
            elect(meta.as_ref(), &keys, &membership, id),
        )
        .await
        {
            tracing::warn!(error = %e, "reading the controller claim failed");
        }
    }
}

/// The membership loop's view of its lease.
#[derive(Debug)]
struct Lease {
    /// When the lease was last known valid (granted or renewed).
    renewed_at: tokio::time::Instant,
    /// The bound on one metadata call.
    call_max: Duration,
    /// How long the broker may go without a renewal before it fences itself.
    fence_after: Duration,
    ttl: Duration,
    /// The process's clock (the membership's).
    clock: folio_rt::ProcessClock,
}

impl Lease {
    /// Renews the lease; if it expired, fences the broker (until its registration is read
    /// back as its own: `not_mine`) and takes a new one.
    async fn renew(
        &mut self,
        meta: &dyn MetadataStore,
        membership: &Membership,
        not_mine: &mut Option<String>,
    ) {
        let (id, node_id) = (membership.lease(), membership.me.node_id);
        let sent = self.clock.now();
        match bounded(self.budget(), "lease keep-alive", meta.keep_alive(id)).await {
            Ok(()) => self.renewed(sent, membership),
            Err(MetaError::LeaseNotFound(_)) => {
                *not_mine = Some(format!("its lease {id} expired; registering again"));
                membership.set_fenced(not_mine.clone());
                let sent = self.clock.now();
                match bounded(self.call_max, "lease grant", meta.grant_lease(self.ttl)).await {
                    Ok(l) => {
                        tracing::warn!(
                            node_id,
                            old = id,
                            new = l,
                            "broker lease expired; registering again on a new lease"
                        );
                        membership.set_lease(l);
                        self.renewed(sent, membership);
                    }
                    Err(e) => {
                        tracing::warn!(node_id, error = %e, "granting a new lease failed; retrying")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(node_id, error = %e, "broker lease keep-alive failed; retrying")
            }
        }
    }

    /// The lease was valid at `at` (a renewal sent then was answered).
    fn renewed(&mut self, at: tokio::time::Instant, membership: &Membership) {
        self.renewed_at = at;
        membership.lease_renewed(at, self.fence_after);
    }

    /// Time left before the broker must fence itself (zero: past it).
    fn left(&self) -> Duration {
        (self.renewed_at + self.fence_after).saturating_duration_since(self.clock.now())
    }

    /// The bound on the next call: `call_max`, and no later than the fence while the broker
    /// still serves.
    fn budget(&self) -> Duration {
        match self.left() {
            left if left.is_zero() => self.call_max,
            left => self.call_max.min(left),
        }
    }

    /// Fences the broker if its lease is stale or its registration is not its own, lifts
    /// the fence otherwise. Returns whether it is fenced.
    fn fence_if_stale(&self, membership: &Membership, not_mine: &Option<String>) -> bool {
        let fence = if self.left().is_zero() {
            Some(format!(
                "its lease was not renewed for {:?} (etcd unreachable?); it expires {:?} after its last renewal",
                self.fence_after, self.ttl
            ))
        } else {
            not_mine.clone()
        };
        let fenced = fence.is_some();
        membership.set_fenced(fence);
        fenced
    }
}
