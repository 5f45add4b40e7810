//! The operator console: `GET /` serves a one-page app (HTML, JS and CSS compiled into the
//! binary, no chart library: charts are SVG drawn by the page) over JSON under `/api/v1/`.
//!
//! Access: the console reads and changes Kafka state as a Kafka client of this broker
//! (`kafka.rs`), as the logged-in user when the broker's listener takes SASL, so every read
//! and action passes the same ACL checks as the Kafka API. A session is a random cookie
//! (HttpOnly, SameSite=Strict) with a CSRF token every change must send back in
//! `x-csrf-token`; sessions live in this process (at most [`CONSOLE_SESSIONS_MAX`], each
//! for [`CONSOLE_SESSION_TTL`]).
//!
//! Architecture invariant: the console never reaches a partition, group or topic record
//! but through the Kafka listener; only the data lifecycle (deletions, trash, GC, ledgers,
//! audit), which Kafka has no request for, is read from the broker, bookies and store.

mod api;
mod kafka;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::limits::{CONSOLE_SESSION_TTL, CONSOLE_SESSIONS_MAX};

/// The page, its script and style.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What the console needs from the process.
#[derive(Clone, Debug)]
pub struct Console {
    pub broker: folio_broker::Broker,
    pub bookies: crate::http::admin::Bookies,
    pub meta: Arc<dyn folio_meta::MetadataStore>,
    pub keys: folio_meta::keys::Keys,
    /// The metadata backend, as the overview names it (`embedded`, `etcd://…`).
    pub backend: String,
    sessions: Arc<Mutex<BTreeMap<String, Session>>>,
}

/// A browser's session: its CSRF token and, once logged in, the user.
#[derive(Clone)]
struct Session {
    csrf: String,
    login: Option<(String, String)>,
    since: Instant,
}

/// An answer: status, content type, extra headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<String>,
    pub body: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password or the tokens.
        let user = self.login.as_ref().map(|(u, _)| u.as_str());
        f.debug_struct("Session").field("user", &user).finish_non_exhaustive()
    }
}

impl Answer {
    fn new(status: u16, content_type: &'static str, body: String) -> Answer {
        Answer { status, content_type, headers: Vec::new(), body }
    }

    fn json(status: u16, v: serde_json::Value) -> Answer {
        Answer::new(status, "application/json", v.to_string())
    }

    fn error(status: u16, message: impl Into<String>) -> Answer {
        Answer::json(status, serde_json::json!({"error": message.into()}))
    }
}

/// 32 random bytes from the OS, as hex: a session id or CSRF token nobody can guess.
fn token() -> String {
    use std::io::Read;
    let mut b = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    read.expect("/dev/urandom is readable on Linux");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cookie(head: &str, name: &str) -> Option<String> {
    let cookies = crate::http::request::header(head, "cookie")?;
    cookies.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

/// Whether `path` is the console's.
pub fn is_console_path(path: &str) -> bool {
    path == "/" || path.starts_with("/console/") || path.starts_with("/api/v1/")
}

impl Console {
    /// The console of `broker`, with `bookies` in this process and the cluster's store.
    pub fn new(
        broker: folio_broker::Broker,
        bookies: crate::http::admin::Bookies,
        meta: Arc<dyn folio_meta::MetadataStore>,
        keys: folio_meta::keys::Keys,
        backend: String,
    ) -> Console {
        let sessions = Arc::new(Mutex::new(BTreeMap::new()));
        Console { broker, bookies, meta, keys, backend, sessions }
    }

    /// Answers a console request.
    pub async fn handle(&self, req: &crate::http::request::Request) -> Answer {
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/") => Answer::new(200, "text/html; charset=utf-8", INDEX_HTML.into()),
            ("GET", "/console/app.js") => {
                Answer::new(200, "text/javascript; charset=utf-8", APP_JS.into())
            }
            ("GET", "/console/style.css") => {
                Answer::new(200, "text/css; charset=utf-8", STYLE_CSS.into())
            }
            ("GET", "/api/v1/session") => self.session(req),
            ("POST", "/api/v1/login") => self.login(req).await,
            ("POST", "/api/v1/logout") => self.logout(req),
            _ => self.api(req).await,
        }
    }

    fn session_of(&self, req: &crate::http::request::Request) -> Option<(String, Session)> {
        let id = cookie(&req.head, "folio_session")?;
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions.retain(|_, s| s.since.elapsed() < CONSOLE_SESSION_TTL);
        sessions.get(&id).cloned().map(|s| (id, s))
    }

    /// `GET /api/v1/session`: whether a login is needed, who is logged in, the CSRF token;
    /// starts a session when the browser has none.
    fn session(&self, req: &crate::http::request::Request) -> Answer {
        let login_required = self.listener().is_some_and(|(_, m)| m.is_some());
        let (id, s, new) = match self.session_of(req) {
            Some((id, s)) => (id, s, false),
            None => {
                let mut sessions = self.sessions.lock().expect("sessions lock");
                if sessions.len() >= CONSOLE_SESSIONS_MAX {
                    // The oldest goes: a flood of new browsers never grows the map.
                    let oldest =
                        sessions.iter().min_by_key(|(_, s)| s.since).map(|(k, _)| k.clone());
                    sessions.remove(&oldest.expect("the map is full"));
                }
                let s = Session { csrf: token(), login: None, since: Instant::now() };
                let id = token();
                sessions.insert(id.clone(), s.clone());
                (id, s, true)
            }
        };
        let user = s.login.as_ref().map(|(u, _)| u.clone());
        let mut a = Answer::json(
            200,
            serde_json::json!({"login_required": login_required, "user": user, "csrf": s.csrf}),
        );
        if new {
            a.headers
                .push(format!("set-cookie: folio_session={id}; HttpOnly; SameSite=Strict; Path=/"));
        }
        a
    }

    /// `POST /api/v1/login {user, password}`: proves the credentials by authenticating to
    /// the broker's SASL listener with them.
    async fn login(&self, req: &crate::http::request::Request) -> Answer {
        let Some((id, s)) = self.session_of(req) else {
            return Answer::error(401, "no session: load the console first");
        };
        if let Some(refused) = csrf_refused(req, &s) {
            return refused;
        }
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let (Some(user), Some(password)) = (body["user"].as_str(), body["password"].as_str())
        else {
            return Answer::error(400, "send {\"user\": ..., \"password\": ...}");
        };
        let Some((addr, Some(mechanism))) = self.listener() else {
            return Answer::error(400, "this broker has no SASL listener: no login is needed");
        };
        match kafka::Client::connect(addr, Some((mechanism, user, password))).await {
            Ok(_) => {
                let mut sessions = self.sessions.lock().expect("sessions lock");
                if let Some(s) = sessions.get_mut(&id) {
                    s.login = Some((user.to_string(), password.to_string()));
                }
                tracing::info!(user, "console login");
                Answer::json(200, serde_json::json!({"user": user, "csrf": s.csrf}))
            }
            Err(e) => {
                tracing::info!(user, error = %e, "console login refused");
                Answer::error(401, "wrong user or password")
            }
        }
    }

    fn logout(&self, req: &crate::http::request::Request) -> Answer {
        if let Some((id, s)) = self.session_of(req) {
            if let Some(refused) = csrf_refused(req, &s) {
                return refused;
            }
            self.sessions.lock().expect("sessions lock").remove(&id);
        }
        Answer::json(200, serde_json::json!({}))
    }

    /// Where the console reaches the broker, and the SASL mechanism when it must log in.
    fn listener(
        &self,
    ) -> Option<(std::net::SocketAddr, Option<folio_broker::security::Mechanism>)> {
        self.broker.console_listener()
    }

    /// A Kafka client for this session: refused (401) when a login is needed and missing.
    async fn client(&self, s: &Session) -> Result<kafka::Client, Answer> {
        let Some((addr, mechanism)) = self.listener() else {
            return Err(Answer::error(
                503,
                "the console needs a PLAINTEXT or SASL_PLAINTEXT listener on this broker",
            ));
        };
        let login = match (mechanism, &s.login) {
            (None, _) => None,
            (Some(m), Some((u, p))) => Some((m, u.as_str(), p.as_str())),
            (Some(_), None) => return Err(Answer::error(401, "log in first")),
        };
        kafka::Client::connect(addr, login)
            .await
            .map_err(|e| Answer::error(502, format!("reaching the broker: {e}")))
    }

    async fn api(&self, req: &crate::http::request::Request) -> Answer {
        let Some((_, s)) = self.session_of(req) else {
            return Answer::error(401, "no session: load the console first");
        };
        if req.method != "GET"
            && let Some(refused) = csrf_refused(req, &s)
        {
            return refused;
        }
        let mut client = match self.client(&s).await {
            Ok(c) => c,
            Err(a) => return a,
        };
        let principal = s
            .login
            .as_ref()
            .map_or(folio_broker::acl::ANONYMOUS.to_string(), |(u, _)| format!("User:{u}"));
        api::route(self, &mut client, req, &principal).await
    }
}

/// A change without the session's CSRF token is refused (403).
fn csrf_refused(req: &crate::http::request::Request, s: &Session) -> Option<Answer> {
    let sent = crate::http::request::header(&req.head, "x-csrf-token");
    match sent {
        Some(t) if crate::http::request::constant_time_eq(t.as_bytes(), s.csrf.as_bytes()) => None,
        _ => Some(Answer::error(403, "missing or wrong x-csrf-token")),
    }
}
