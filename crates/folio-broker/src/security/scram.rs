//! SASL mechanisms against salted credentials: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
//! RFC 7677, as Kafka runs them: no channel binding, the `tokenauth` extension refused),
//! and PLAIN (RFC 4616), checked against the same SCRAM credential, so the broker never
//! keeps a password.
//!
//! A credential is what Kafka keeps: salt, iteration count, `StoredKey = H(ClientKey)` and
//! `ServerKey`, where `SaltedPassword = PBKDF2-HMAC(password, salt, i)`,
//! `ClientKey = HMAC(SaltedPassword, "Client Key")`, `ServerKey = HMAC(SaltedPassword,
//! "Server Key")`. Its stored form is Kafka's text form:
//!
//! ```text
//! salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<decimal>
//! ```
//!
//! Every message from the client is bounded (`SASL_MESSAGE_BYTES_MAX`) and parsed without
//! panicking; a failure says why in the log and only "invalid credentials" to the client.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use folio_proto::InvalidConfig;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

pub use crate::limits::ITERATIONS_MAX;
pub use crate::limits::ITERATIONS_MIN;
pub use crate::limits::SASL_MESSAGE_BYTES_MAX;
pub use crate::limits::USER_NAME_BYTES_MAX;

folio_proto::reason_error!(
    /// Why a SCRAM or PLAIN exchange (or a stored credential) was refused: the message the
    /// SASL answer carries, naming the part at fault.
    Refused
);

impl From<InvalidConfig> for Refused {
    fn from(e: InvalidConfig) -> Refused {
        Refused(e.0)
    }
}

/// Bytes of the server's part of a SCRAM nonce (random, base64 encoded).
const SERVER_NONCE_BYTES: usize = 24;
/// Bytes of a new credential's salt.
pub const SALT_BYTES: usize = 32;

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    /// Every mechanism, strongest SCRAM first.
    pub const ALL: [Mechanism; 3] =
        [Mechanism::ScramSha512, Mechanism::ScramSha256, Mechanism::Plain];
    /// The SCRAM mechanisms (those with credentials of their own).
    pub const SCRAM: [Mechanism; 2] = [Mechanism::ScramSha512, Mechanism::ScramSha256];

    /// The IANA name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `s` (case-insensitive).
    pub fn parse(s: &str) -> Option<Mechanism> {
        Self::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(s))
    }

    /// Kafka's `ScramMechanism` code (AlterUserScramCredentials): 1 SHA-256, 2 SHA-512.
    pub fn kafka_code(self) -> i8 {
        match self {
            Mechanism::Plain => 0,
            Mechanism::ScramSha256 => 1,
            Mechanism::ScramSha512 => 2,
        }
    }

    /// The SCRAM mechanism of a Kafka `ScramMechanism` code.
    pub fn from_kafka_code(code: i8) -> Option<Mechanism> {
        Self::SCRAM.into_iter().find(|m| m.kafka_code() == code)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            _ => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            _ => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

/// A SCRAM credential (see the module doc).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

/// Checks a SCRAM iteration count against Kafka's bounds.
pub fn check_iterations(iterations: i64) -> Result<u32, InvalidConfig> {
    if !(ITERATIONS_MIN as i64..=ITERATIONS_MAX as i64).contains(&iterations) {
        return Err(InvalidConfig::new(format!(
            "{iterations} iterations: SCRAM needs {ITERATIONS_MIN}..={ITERATIONS_MAX}"
        )));
    }
    Ok(iterations as u32)
}

impl Credential {
    /// The credential of a salted password (what AlterUserScramCredentials sends).
    pub fn from_salted(mech: Mechanism, salt: &[u8], salted: &[u8], iterations: u32) -> Credential {
        let client_key = mech.hmac(salted, b"Client Key");
        Credential {
            salt: salt.to_vec(),
            iterations,
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(salted, b"Server Key"),
        }
    }

    /// A new credential for `password` with a random salt.
    pub fn new(mech: Mechanism, password: &str, iterations: u32) -> Credential {
        let salt: [u8; SALT_BYTES] = folio_rt::random();
        let salted = mech.salted_password(password.as_bytes(), &salt, iterations);
        Credential::from_salted(mech, &salt, &salted, iterations)
    }

    /// Whether `password` is this credential's (PLAIN). Costs one PBKDF2.
    pub fn check_password(&self, mech: Mechanism, password: &str) -> bool {
        let salted = mech.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        constant_time_eq(&mech.hash(&client_key), &self.stored_key)
    }

    /// The stored form (see the module doc).
    pub fn encode(&self) -> String {
        format!(
            "salt={},stored_key={},server_key={},iterations={}",
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key),
            self.iterations
        )
    }

    /// Reads the stored form.
    pub fn decode(s: &str) -> Result<Credential, Refused> {
        let (mut salt, mut stored, mut server, mut iterations) = (None, None, None, None);
        for field in s.split(',') {
            let (k, v) = field.split_once('=').ok_or("a field without '='")?;
            let b64 = || B64.decode(v).map_err(|e| format!("{k}: {e}"));
            match k {
                "salt" => salt = Some(b64()?),
                "stored_key" => stored = Some(b64()?),
                "server_key" => server = Some(b64()?),
                "iterations" => {
                    let n: i64 = v.parse().map_err(|_| format!("iterations {v:?}"))?;
                    iterations = Some(check_iterations(n)?);
                }
                other => return Err(Refused::from(format!("unknown field {other:?}"))),
            }
        }
        match (salt, stored, server, iterations) {
            (Some(salt), Some(stored_key), Some(server_key), Some(iterations)) => {
                Ok(Credential { salt, iterations, stored_key, server_key })
            }
            _ => {
                Err(Refused::from("a field is missing (salt, stored_key, server_key, iterations)"))
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the client sent first in a SCRAM exchange.
#[derive(Debug)]
pub struct ClientFirst {
    /// The user (decoded from SCRAM's `saslname`).
    pub user: String,
    nonce: String,
    bare: String,
    gs2_header: String,
}

/// Reads `n,[a=authzid],n=user,r=nonce[,ext]`.
pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, Refused> {
    let s = message(msg)?;
    let rest = s
        .strip_prefix("n,")
        .or_else(|| s.strip_prefix("y,"))
        .ok_or("channel binding is not supported (the message must start with n, or y,)")?;
    let (authzid, bare) = rest.split_once(',').ok_or("no ',' after the GS2 header")?;
    let gs2_header = format!("{},{authzid},", &s[..1]);
    let mut user = None;
    let mut nonce = None;
    for (i, attr) in bare.split(',').enumerate() {
        match (i, attr.split_once('=')) {
            (0, Some(("n", u))) => user = Some(decode_saslname(u)?),
            (1, Some(("r", r))) if !r.is_empty() => nonce = Some(r.to_string()),
            (0 | 1, _) => {
                return Err(Refused::from(format!("expected n=user,r=nonce, got {attr:?}")));
            }
            (_, Some(("tokenauth", _))) => {
                return Err(Refused::from("delegation tokens are not supported"));
            }
            _ => {} // other extensions: ignored
        }
    }
    let user = user.ok_or("no user")?;
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err(Refused::from(format!("a user name must be 1..={USER_NAME_BYTES_MAX} bytes")));
    }
    if let Some(a) = authzid.strip_prefix("a=")
        && decode_saslname(a)? != user
    {
        return Err(Refused::from("the authorization id differs from the user"));
    }
    let nonce = nonce.ok_or("no nonce")?;
    Ok(ClientFirst { user, nonce, bare: bare.to_string(), gs2_header })
}

fn message(msg: &[u8]) -> Result<&str, String> {
    if msg.len() > SASL_MESSAGE_BYTES_MAX {
        return Err(format!("a SASL message above {SASL_MESSAGE_BYTES_MAX} bytes"));
    }
    std::str::from_utf8(msg).map_err(|_| "a SASL message that is not UTF-8".into())
}

/// SCRAM's `saslname`: `=2C` is `,` and `=3D` is `=`; no other `=`.
fn decode_saslname(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return Err("a user name with a bare '='".into()),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server's side of a SCRAM exchange after the client's first message.
#[derive(Debug)]
pub struct ScramServer {
    mech: Mechanism,
    first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: Credential,
}

impl ScramServer {
    /// Answers the client's first message for a user with `credential`: the
    /// server-first-message to send.
    pub fn start(mech: Mechanism, first: ClientFirst, credential: Credential) -> (Self, Vec<u8>) {
        let ours: [u8; SERVER_NONCE_BYTES] = folio_rt::random();
        let nonce = format!("{}{}", first.nonce, B64.encode(ours));
        let server_first =
            format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
        let reply = server_first.clone().into_bytes();
        (ScramServer { mech, first, server_first, nonce, credential }, reply)
    }

    /// Checks the client's final message (`c=…,r=…,p=…`): the server-final-message to send
    /// if its proof is right.
    pub fn finish(self, msg: &[u8]) -> Result<Vec<u8>, Refused> {
        let s = message(msg)?;
        let (without_proof, proof) = s.rsplit_once(",p=").ok_or("no proof")?;
        let mut attrs = without_proof.split(',');
        let binding = attrs.next().and_then(|a| a.strip_prefix("c=")).ok_or("no c=")?;
        let nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or("no r=")?;
        if B64.decode(binding).ok().as_deref() != Some(self.first.gs2_header.as_bytes()) {
            return Err(Refused::from(
                "the channel binding differs from the first message's header",
            ));
        }
        // Kafka checks that the echoed nonce *ends with* the server's: librdkafka 2.0 sends
        // its own nonce again in front of the server's whole one. The server's random part
        // is in it either way, and the proof covers the message as sent.
        if !nonce.ends_with(&self.nonce) {
            return Err(Refused::from("the nonce does not end with the one the server sent"));
        }
        let proof = B64.decode(proof).map_err(|_| "the proof is not base64")?;
        let auth_message = format!("{},{},{without_proof}", self.first.bare, self.server_first);
        let signature = self.mech.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(Refused::from("a proof of the wrong length"));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&self.mech.hash(&client_key), &self.credential.stored_key) {
            return Err(Refused::from("wrong password"));
        }
        let server_signature = self.mech.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }

    /// The user being authenticated.
    pub fn user(&self) -> &str {
        &self.first.user
    }
}

/// Reads a PLAIN message (`authzid NUL authcid NUL password`): the user and password.
pub fn parse_plain(msg: &[u8]) -> Result<(String, String), Refused> {
    let s = message(msg)?;
    let mut parts = s.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refused::from("a PLAIN message is authzid NUL user NUL password"));
    };
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err(Refused::from(format!("a user name must be 1..={USER_NAME_BYTES_MAX} bytes")));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(Refused::from("the authorization id differs from the user"));
    }
    Ok((user.to_string(), password.to_string()))
}

/// The client's side of an exchange (PLAIN or SCRAM), for Folio's own raw client (tests
/// and benchmarks).
#[derive(Debug)]
pub struct Client {
    mech: Mechanism,
    user: String,
    password: String,
    nonce: String,
    /// After the server's first message: the server signature to expect.
    expect: Option<Vec<u8>>,
}

impl Client {
    /// A client of `mech` for `user` with `password`.
    pub fn new(mech: Mechanism, user: &str, password: &str) -> Client {
        let nonce: [u8; 18] = folio_rt::random();
        let (user, password) = (user.to_string(), password.to_string());
        Client { mech, user, password, nonce: B64.encode(nonce), expect: None }
    }

    fn first_bare(&self) -> String {
        let name = self.user.replace('=', "=3D").replace(',', "=2C");
        format!("n={name},r={}", self.nonce)
    }

    /// The first message.
    pub fn first(&self) -> Vec<u8> {
        match self.mech {
            Mechanism::Plain => format!("\0{}\0{}", self.user, self.password).into_bytes(),
            _ => format!("n,,{}", self.first_bare()).into_bytes(),
        }
    }

    /// Takes the server's answer: the next message to send, or `None` when done.
    pub fn next(&mut self, answer: &[u8]) -> Result<Option<Vec<u8>>, Refused> {
        if self.mech == Mechanism::Plain {
            return Ok(None);
        }
        let s = std::str::from_utf8(answer).map_err(|_| "a server message that is not UTF-8")?;
        if let Some(expect) = &self.expect {
            let v = s.strip_prefix("v=").ok_or("no server signature")?;
            let got = B64.decode(v).map_err(|_| "a server signature that is not base64")?;
            return if &got == expect {
                Ok(None)
            } else {
                Err(Refused::from("a wrong server signature"))
            };
        }
        let mut attrs = s.split(',');
        let nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or("no nonce")?;
        let salt = attrs.next().and_then(|a| a.strip_prefix("s=")).ok_or("no salt")?;
        let iterations = attrs.next().and_then(|a| a.strip_prefix("i=")).ok_or("no iterations")?;
        if !nonce.starts_with(&self.nonce) {
            return Err(Refused::from("the server's nonce does not extend ours"));
        }
        let salt = B64.decode(salt).map_err(|_| "a salt that is not base64")?;
        let iterations = check_iterations(iterations.parse().map_err(|_| "bad iterations")?)?;
        let salted = self.mech.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = self.mech.hmac(&salted, b"Client Key");
        let stored = self.mech.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{s},{without_proof}", self.first_bare());
        let signature = self.mech.hmac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = self.mech.hmac(&salted, b"Server Key");
        self.expect = Some(self.mech.hmac(&server_key, auth.as_bytes()));
        Ok(Some(format!("{without_proof},p={}", B64.encode(proof)).into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCRAM client, as a Kafka client runs it, to drive the server.
    fn client_final(
        mech: Mechanism,
        password: &str,
        first_bare: &str,
        server_first: &str,
    ) -> String {
        let attrs: Vec<&str> = server_first.split(',').collect();
        let nonce = attrs[0].strip_prefix("r=").unwrap();
        let salt = B64.decode(attrs[1].strip_prefix("s=").unwrap()).unwrap();
        let iterations: u32 = attrs[2].strip_prefix("i=").unwrap().parse().unwrap();
        let salted = mech.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        let stored = mech.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = mech.hmac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn scram_exchange_accepts_the_right_password_only() {
        for mech in Mechanism::SCRAM {
            let cred = Credential::new(mech, "s3cret", ITERATIONS_MIN);
            for (password, ok) in [("s3cret", true), ("wrong", false)] {
                let first = parse_client_first(b"n,,n=al=2Cice,r=abc123").unwrap();
                assert_eq!(first.user, "al,ice");
                let (server, reply) = ScramServer::start(mech, first, cred.clone());
                let reply = String::from_utf8(reply).unwrap();
                let fin = client_final(mech, password, "n=al=2Cice,r=abc123", &reply);
                assert_eq!(server.finish(fin.as_bytes()).is_ok(), ok, "{mech:?} {password}");
            }
        }
    }

    /// RFC 7677's SCRAM-SHA-256 example: the server's answers are what the RFC prints.
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let mech = Mechanism::ScramSha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = mech.salted_password(b"pencil", &salt, 4096);
        let cred = Credential::from_salted(mech, &salt, &salted, 4096);
        let first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let server = ScramServer {
            mech,
            first,
            server_first: server_first.into(),
            nonce: "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(),
            credential: cred,
        };
        let fin = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(server.finish(fin).unwrap(), b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn hostile_sasl_messages_are_refused_with_a_reason() {
        for bad in [
            &b"p=tls-unique,,n=u,r=x"[..],
            b"n,,r=x,n=u",
            b"n,,n=u",
            b"n,,n=a=zz,r=x",
            b"n,,n=u,r=x,tokenauth=true",
            b"n,a=v,n=u,r=x",
            b"\xff\xfe",
            b"",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        assert!(parse_client_first(&vec![b'n'; SASL_MESSAGE_BYTES_MAX + 1]).is_err());
        assert_eq!(parse_plain(b"\0alice\0pw").unwrap(), ("alice".into(), "pw".into()));
        assert!(parse_plain(b"bob\0alice\0pw").is_err());
        assert!(parse_plain(b"alice\0pw").is_err());
        assert!(parse_plain(b"\0\0pw").is_err());
    }

    #[test]
    fn credentials_round_trip_and_check_plain_passwords() {
        let c = Credential::new(Mechanism::ScramSha512, "pw", 4096);
        let back = Credential::decode(&c.encode()).unwrap();
        assert_eq!(back, c);
        assert!(back.check_password(Mechanism::ScramSha512, "pw"));
        assert!(!back.check_password(Mechanism::ScramSha512, "pW"));
        for bad in [
            "",
            "salt=AA==",
            "salt=!,stored_key=AA==,server_key=AA==,iterations=4096",
            "salt=AA==,stored_key=AA==,server_key=AA==,iterations=10",
        ] {
            assert!(Credential::decode(bad).is_err(), "{bad}");
        }
    }
}
