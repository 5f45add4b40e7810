//! Every limit of the bookie's listener, with its default, in one place (the README's
//! limits table lists them; `folio bookie --config` sets them as `server.<name>`).
//!
//! Memory: a request's bytes are reserved from its connection's budget and then the
//! process's before it is dispatched (the reader stops reading while there is no room: TCP
//! pushes back), and held until its reply is *written*. A read reserves the largest entry
//! until it knows its entry's size, then keeps only that. A client that pipelines reads and
//! never takes the replies therefore pins at most `connection_bytes_max`, and is closed
//! once a reply waits `reply_write_timeout`.

use folio_proto::InvalidConfig;
use std::time::Duration;

/// The bookie listener's limits (see the module doc).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Requests of one connection being worked on at once. 10 000.
    pub inflight_per_connection: usize,
    /// Request and reply bytes one connection holds at once. 256 MiB; at least twice the
    /// largest frame.
    pub connection_bytes_max: usize,
    /// The same for all connections together. 1 GiB; at least `connection_bytes_max`.
    pub process_bytes_max: usize,
    /// Open connections; more are closed at once. 4096.
    pub connections_max: usize,
    /// A connection with no request for this long is closed (clients reconnect). 1 hour.
    pub idle_timeout: Duration,
    /// A frame must arrive whole within this once its first byte has. 30 s.
    pub request_read_timeout: Duration,
    /// Replies must be taken by the client within this, or the connection closes. 30 s.
    pub reply_write_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            inflight_per_connection: 10_000,
            connection_bytes_max: 256 * 1024 * 1024,
            process_bytes_max: 1024 * 1024 * 1024,
            connections_max: 4096,
            idle_timeout: Duration::from_secs(3600),
            request_read_timeout: Duration::from_secs(30),
            reply_write_timeout: Duration::from_secs(30),
        }
    }
}

impl ServerLimits {
    /// Rejects settings that could deadlock, naming the setting.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let frame = folio_proto::wire::FRAME_BYTES_MAX + 4;
        if self.inflight_per_connection == 0 || self.connections_max == 0 {
            return Err(InvalidConfig::new(
                "server.inflight_per_connection and server.connections_max must be positive",
            ));
        }
        if self.connection_bytes_max < 2 * frame {
            return Err(InvalidConfig::new(format!(
                "server.connection_bytes_max ({}) must be at least twice the largest frame ({frame})",
                self.connection_bytes_max
            )));
        }
        if self.process_bytes_max < self.connection_bytes_max {
            return Err(InvalidConfig::new(format!(
                "server.process_bytes_max ({}) must be at least server.connection_bytes_max ({})",
                self.process_bytes_max, self.connection_bytes_max
            )));
        }
        if self.process_bytes_max > u32::MAX as usize {
            return Err(InvalidConfig::new("server.process_bytes_max must be below 4 GiB"));
        }
        Ok(())
    }
}

/// Ledger ids an integrity count names as examples in its message.
pub const INTEGRITY_EXAMPLES_MAX: usize = 5;

/// The most bytes read from a connection before it has proven the secret: an AUTH frame
/// (45 bytes) and the header of whatever an unauthenticated client sends first.
pub const PRE_AUTH_BYTES_MAX: usize = 64;

/// How long a clean shutdown waits for requests still running to let go of the storage.
pub const SHUTDOWN_REQUESTS_WAIT_MAX: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_a_budget_below_two_frames_is_refused() {
        ServerLimits::default().validate().unwrap();
        let l = ServerLimits { connection_bytes_max: 1 << 20, ..ServerLimits::default() };
        assert!(l.validate().unwrap_err().0.contains("connection_bytes_max"));
    }
}
