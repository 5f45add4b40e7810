//! The binary's own limits (its HTTP endpoint, its allocator), in one place. The
//! components' limits live in their crates' `limits.rs`.

/// glibc's malloc arenas at most (its default is 8 per core). Entries are allocated on
/// the network threads and freed on the journal, flusher and index threads; with an arena
/// per thread, each grew to its own peak: a full `folio bench bookie` peaked at 305 MiB of
/// RSS, 190 MiB with two arenas.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub const MALLOC_ARENAS_MAX: libc::c_int = 2;

/// The shortest HTTP token accepted.
pub const HTTP_TOKEN_BYTES_MIN: usize = 16;

/// Connections the HTTP endpoint serves at once; more get 503 and are closed (unread, so
/// a client may see the close as a reset).
pub const HTTP_CONNECTIONS_MAX: usize = 64;

/// The longest HTTP request head (request line and headers); longer gets 431.
pub const HTTP_HEAD_BYTES_MAX: usize = 16 * 1024;

/// The largest HTTP request body (a schema registered, JSON-escaped); larger gets 413.
pub const HTTP_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Console sessions this process keeps; a new one past it ends the oldest.
pub const CONSOLE_SESSIONS_MAX: usize = 1024;

/// How long a console session lasts.
pub const CONSOLE_SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(8 * 3600);

/// The most records one message-browser request returns.
pub const CONSOLE_MESSAGES_MAX: usize = 500;

/// The Fetches one message-browser search makes per partition (each at most
/// [`CONSOLE_FETCH_BYTES_MAX`]): 64 MiB read at most before it answers with what it found.
pub const CONSOLE_SCAN_FETCHES_MAX: usize = 64;

/// The bytes one message-browser Fetch asks for.
pub const CONSOLE_FETCH_BYTES_MAX: i32 = 1024 * 1024;

/// A long command without a terminal prints a progress line at most this often.
pub const PROGRESS_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A benchmark without a terminal of its own prints how long it has run this often.
pub const PROGRESS_TICKER_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// How often `folio topics delete --wait` and `folio trash run` look at their progress.
pub const PROGRESS_POLL: std::time::Duration = std::time::Duration::from_millis(250);
