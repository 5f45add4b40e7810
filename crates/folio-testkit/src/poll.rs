//! Waiting in tests for what no event announces: [`until`] (an async condition, such as a
//! metadata read) and [`eventually`] (a plain one), each with a deadline and a message. A
//! test awaits an event where there is one; these are for state it can only look at.
//!
//! The deadline is how long the test may hang before it fails with `what`, never a timing
//! it asserts: keep it generous (tens of seconds), the wait ends as soon as `cond` holds.
//!
//! Architecture invariant: this file depends on tokio and std only, so the test crates of
//! folio-storage and folio-bookie (which folio-testkit depends on) include it by `#[path]`
//! instead of depending on folio-testkit, and no dependency cycle forms.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The first pause between two looks; it doubles up to [`POLL_PAUSE_LONGEST`].
const POLL_PAUSE_FIRST: Duration = Duration::from_millis(5);
/// The longest pause between two looks.
const POLL_PAUSE_LONGEST: Duration = Duration::from_millis(100);

/// Waits until `cond()` resolves to true; panics with `what` if it has not within `within`.
/// Returns how long it waited.
pub async fn until<F: Future<Output = bool>>(
    within: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) -> Duration {
    let start = Instant::now();
    let mut pause = POLL_PAUSE_FIRST;
    while !cond().await {
        let waited = start.elapsed();
        assert!(waited < within, "not within {within:?}: {what}");
        tokio::time::sleep(pause.min(within - waited)).await;
        pause = (pause * 2).min(POLL_PAUSE_LONGEST);
    }
    start.elapsed()
}

/// Waits until `cond()` holds; panics with `what` if it has not within `within`. Returns how
/// long it waited.
pub async fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    until(within, what, || std::future::ready(cond())).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn until_returns_once_the_condition_holds() {
        let mut looks = 0;
        eventually(Duration::from_secs(60), "three looks", || {
            looks += 1;
            looks == 3
        })
        .await;
        assert_eq!(looks, 3, "it stops looking once the condition holds");
    }

    #[tokio::test]
    #[should_panic(expected = "not within 50ms: never")]
    async fn until_fails_with_its_message_after_the_deadline() {
        eventually(Duration::from_millis(50), "never", || false).await;
    }
}
