//! A connection's authentication state, which the listener asks about every frame
//! ([`SaslGate::admit`]):
//!
//! ```text
//! Handshake --SaslHandshake(mech)--> Authenticate --SaslAuthenticate…--> Open
//!    ^  ApiVersions passes               (v0 handshake: raw tokens)       |
//!    |                                                                     |
//!    +-- a failed exchange closes the connection     SaslHandshake (KIP-368 re-authentication)
//! ```
//!
//! Before `Open` only ApiVersions, SaslHandshake and SaslAuthenticate are taken (anything
//! else closes the connection, as Kafka does) and frames are bounded by
//! `SASL_RECEIVE_BYTES_MAX` (Kafka's `sasl.server.max.receive.size`). With a session
//! lifetime (`connections.max.reauth.ms`) an `Open` connection that sends anything but a
//! SaslHandshake after its session expired is closed. A re-authentication must name the
//! same principal. On a listener without SASL every connection is `Open` for ever and the
//! SASL requests get ILLEGAL_SASL_STATE.

use bytes::{Bytes, BytesMut};
use folio_meta::MetadataStore;
use folio_meta::keys::Keys;
use tokio::time::Instant;

use crate::api::framing::{Frame, HEADER_PREFIX_BYTES};
use crate::api::sasl::{AuthAnswer, Kind, SaslRequest};
use crate::domain::acl::Session;
use crate::errors;
use crate::limits::SASL_RECEIVE_BYTES_MAX;
use crate::security::scram::{self, Mechanism, ScramServer};
use crate::security::{SaslConfig, credentials};

/// What the listener does with a frame.
#[derive(Debug)]
pub(crate) enum Gated {
    /// Serve it as any request.
    Dispatch(Bytes),
    /// Send this answer (the gate handled the request).
    Answer(Frame),
    /// Send this answer: the client authenticated as the session's principal now.
    Authenticated(Frame),
    /// Send this answer, then close: authentication failed (the reason is logged).
    Refused(Frame, String),
}

enum Exchange {
    Plain,
    ScramFirst(Mechanism),
    ScramFinal(Box<ScramServer>),
}

enum State {
    Handshake,
    /// After SaslHandshake: the exchange under way; `raw` after a v0 handshake.
    Authenticate {
        exchange: Exchange,
        raw: bool,
        mech: Mechanism,
    },
    Open {
        expires: Option<Instant>,
    },
}

/// One connection's authentication state (see the module doc).
pub(crate) struct SaslGate {
    state: State,
    config: SaslConfig,
    sasl: bool,
    /// The principal authenticated so far (a re-authentication must keep it).
    authenticated: Option<std::sync::Arc<str>>,
}

/// What the gate reads credentials from.
pub(crate) struct Store<'a> {
    pub meta: &'a dyn MetadataStore,
    pub keys: &'a Keys,
}

enum Step {
    Challenge(Vec<u8>, Exchange),
    Done(String, Vec<u8>),
    Failed(String),
}

impl SaslGate {
    /// A new connection's gate; `sasl`: whether its listener authenticates with SASL.
    pub(crate) fn new(config: SaslConfig, sasl: bool) -> SaslGate {
        let state = if sasl { State::Handshake } else { State::Open { expires: None } };
        SaslGate { state, config, sasl, authenticated: None }
    }

    /// The largest frame the connection may send now.
    pub(crate) fn frame_bytes_max(&self, open_max: usize) -> usize {
        if matches!(self.state, State::Open { .. }) {
            open_max
        } else {
            open_max.min(SASL_RECEIVE_BYTES_MAX)
        }
    }

    /// The smallest frame the connection may send now: a request header, or after a v0
    /// handshake any raw SASL token.
    pub(crate) fn frame_bytes_min(&self) -> usize {
        match self.state {
            State::Authenticate { raw: true, .. } => 0,
            _ => HEADER_PREFIX_BYTES,
        }
    }

    /// Takes one frame (without its size prefix).
    pub(crate) async fn admit(
        &mut self,
        store: &Store<'_>,
        frame: Bytes,
        session: &mut Session,
    ) -> Result<Gated, String> {
        if let State::Authenticate { raw: true, .. } = self.state {
            return self.raw_token(store, frame, session).await;
        }
        let kind = crate::api::sasl::kind(&frame);
        match (&self.state, kind) {
            (_, Kind::Handshake | Kind::Authenticate) if !self.sasl => self.illegal(frame),
            (State::Open { expires }, k) if k != Kind::Handshake && k != Kind::Unknown => {
                if let (Some(at), Some(life)) = (expires, self.config.session_lifetime)
                    && Instant::now() >= *at
                {
                    return Err(format!(
                        "the SASL session ended after {life:?} (connections.max.reauth.ms) and the client did not authenticate again"
                    ));
                }
                if k == Kind::Authenticate {
                    return Err("SaslAuthenticate without a SaslHandshake".into());
                }
                Ok(Gated::Dispatch(frame))
            }
            (State::Open { .. } | State::Handshake, Kind::Handshake) => self.handshake(frame),
            (State::Handshake, Kind::ApiVersions) => Ok(Gated::Dispatch(frame)),
            (State::Authenticate { .. }, Kind::Authenticate) => {
                self.authenticate(store, frame, session).await
            }
            (_, k) => Err(format!("a {} request before SASL authentication finished", k.name())),
        }
    }

    fn illegal(&self, frame: Bytes) -> Result<Gated, String> {
        let req = SaslRequest::parse(frame)?;
        let answer =
            req.error_answer(errors::ILLEGAL_SASL_STATE, "this listener does not use SASL");
        answer.map(Gated::Answer)
    }

    fn handshake(&mut self, frame: Bytes) -> Result<Gated, String> {
        let mut req = SaslRequest::parse(frame)?;
        if !req.is_handshake() {
            return Err("not a SaslHandshake".into());
        }
        let asked = req.mechanism()?;
        let offered: Vec<&'static str> = self.config.mechanisms.iter().map(|m| m.name()).collect();
        let mech = Mechanism::parse(&asked).filter(|m| self.config.mechanisms.contains(m));
        let mut code = errors::NONE;
        match mech {
            Some(mech) => {
                let exchange = match mech {
                    Mechanism::Plain => Exchange::Plain,
                    m => Exchange::ScramFirst(m),
                };
                self.state = State::Authenticate { exchange, raw: req.version() == 0, mech };
            }
            None => code = errors::UNSUPPORTED_SASL_MECHANISM,
        }
        req.handshake_answer(&offered, code).map(Gated::Answer)
    }

    async fn authenticate(
        &mut self,
        store: &Store<'_>,
        frame: Bytes,
        session: &mut Session,
    ) -> Result<Gated, String> {
        let mut req = SaslRequest::parse(frame)?;
        if req.is_handshake() {
            return Err("not a SaslAuthenticate".into());
        }
        let token = req.auth_bytes()?;
        let (mech, step) = self.step(store, &token).await?;
        match step {
            Step::Challenge(auth_bytes, next) => {
                self.state = State::Authenticate { exchange: next, raw: false, mech };
                let a = AuthAnswer { auth_bytes, ..AuthAnswer::default() };
                req.authenticate_answer(a).map(Gated::Answer)
            }
            Step::Done(user, auth_bytes) => {
                self.open(&user, session)?;
                let life = self.config.session_lifetime.map_or(0, |d| d.as_millis() as i64);
                let a =
                    AuthAnswer { auth_bytes, session_lifetime_ms: life, ..AuthAnswer::default() };
                req.authenticate_answer(a).map(Gated::Authenticated)
            }
            Step::Failed(why) => {
                let a = AuthAnswer {
                    error_code: errors::SASL_AUTHENTICATION_FAILED,
                    error_message: Some(failed_message(mech)),
                    ..AuthAnswer::default()
                };
                Ok(Gated::Refused(req.authenticate_answer(a)?, why))
            }
        }
    }

    /// A raw SASL token after a v0 handshake: answered with a raw token (size, bytes); a
    /// failure closes the connection without an answer (what v0 clients expect).
    async fn raw_token(
        &mut self,
        store: &Store<'_>,
        frame: Bytes,
        session: &mut Session,
    ) -> Result<Gated, String> {
        let (mech, step) = self.step(store, &frame).await?;
        let framed = |reply: Vec<u8>| {
            let mut b = BytesMut::with_capacity(4 + reply.len());
            b.extend_from_slice(&(reply.len() as i32).to_be_bytes());
            b.extend_from_slice(&reply);
            Frame::from(b.freeze())
        };
        match step {
            Step::Challenge(reply, next) => {
                self.state = State::Authenticate { exchange: next, raw: true, mech };
                Ok(Gated::Answer(framed(reply)))
            }
            Step::Done(user, reply) => {
                self.open(&user, session)?;
                Ok(Gated::Authenticated(framed(reply)))
            }
            Step::Failed(why) => Err(format!("SASL {} authentication failed: {why}", mech.name())),
        }
    }

    async fn step(&mut self, store: &Store<'_>, token: &[u8]) -> Result<(Mechanism, Step), String> {
        let State::Authenticate { exchange, mech, .. } =
            std::mem::replace(&mut self.state, State::Handshake)
        else {
            return Err("no SASL exchange under way".into());
        };
        let step = match exchange {
            Exchange::Plain => match scram::parse_plain(token) {
                Err(e) => Step::Failed(e.into()),
                Ok((user, password)) => {
                    if credentials::check_plain(store.meta, store.keys, &user, password)
                        .await
                        .map_err(|e| e.to_string())?
                    {
                        Step::Done(user, Vec::new())
                    } else {
                        Step::Failed(format!("user {user:?}: unknown or wrong password"))
                    }
                }
            },
            Exchange::ScramFirst(m) => match scram::parse_client_first(token) {
                Err(e) => Step::Failed(e.into()),
                Ok(first) => {
                    match credentials::get(store.meta, store.keys, m, &first.user)
                        .await
                        .map_err(|e| e.to_string())?
                    {
                        None => Step::Failed(format!(
                            "user {:?} has no {} credential",
                            first.user,
                            m.name()
                        )),
                        Some(c) => {
                            let (server, reply) = ScramServer::start(m, first, c);
                            Step::Challenge(reply, Exchange::ScramFinal(Box::new(server)))
                        }
                    }
                }
            },
            Exchange::ScramFinal(server) => {
                let user = server.user().to_string();
                match server.finish(token) {
                    Ok(reply) => Step::Done(user, reply),
                    Err(e) => Step::Failed(format!("user {user:?}: {e}")),
                }
            }
        };
        Ok((mech, step))
    }

    fn open(&mut self, user: &str, session: &mut Session) -> Result<(), String> {
        let principal: std::sync::Arc<str> = format!("User:{user}").into();
        if let Some(before) = &self.authenticated
            && *before != principal
        {
            return Err(format!(
                "a re-authentication as {principal} on a connection of {before}: principals cannot change"
            ));
        }
        self.authenticated = Some(principal.clone());
        session.principal = principal;
        let expires = self.config.session_lifetime.map(|d| Instant::now() + d);
        self.state = State::Open { expires };
        Ok(())
    }
}

/// What a client whose authentication failed is told (Kafka's words; no detail).
fn failed_message(mech: Mechanism) -> String {
    match mech {
        Mechanism::Plain => "Authentication failed: Invalid username or password".into(),
        m => format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
            m.name()
        ),
    }
}
