//! The cluster secret and the handshake that proves it on a bookie connection.
//!
//! Every bookie, broker and tool of a cluster shares one secret (a file). A connection to a
//! bookie that requires it starts with two AUTH round trips (`wire`, op 9) before any other
//! request:
//!
//! ```text
//! client → bookie   AUTH step 1: client_nonce[32]
//! bookie → client   OK: server_nonce[32] ‖ server_proof[32]
//!                   server_proof = HMAC-SHA256(secret, "folio-bookie-server" ‖ client_nonce ‖ server_nonce)
//! client → bookie   AUTH step 2: client_proof[32]
//!                   client_proof = HMAC-SHA256(secret, "folio-bookie-client" ‖ client_nonce ‖ server_nonce)
//! bookie → client   OK, or UNAUTHORIZED and the connection closes
//! ```
//!
//! Both sides prove the secret without sending it; fresh nonces on both sides make a
//! recorded handshake useless for another connection, and the client refuses a bookie that
//! cannot prove the secret (a bookie of another cluster). The secret authenticates the
//! peer, not the bytes that follow: it keeps out whoever can reach the port, not an attacker
//! on the path (that takes TLS; see the README's "A secured cluster").

use crate::error::SecretError;
pub use crate::limits::CLUSTER_SECRET_BYTES_MAX;
pub use crate::limits::CLUSTER_SECRET_BYTES_MIN;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of each nonce and each proof in the handshake.
pub const AUTH_TOKEN_BYTES: usize = 32;

/// A nonce or a proof of the handshake.
pub type AuthToken = [u8; AUTH_TOKEN_BYTES];

/// The secret every member of a cluster shares. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

impl ClusterSecret {
    /// A secret of these bytes, if its length is within the limits.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<ClusterSecret, SecretError> {
        let bytes = bytes.into();
        let len = bytes.len();
        if len < CLUSTER_SECRET_BYTES_MIN {
            return Err(SecretError::TooShort { len, min: CLUSTER_SECRET_BYTES_MIN });
        }
        if len > CLUSTER_SECRET_BYTES_MAX {
            return Err(SecretError::TooLong { len, max: CLUSTER_SECRET_BYTES_MAX });
        }
        Ok(ClusterSecret(bytes))
    }

    /// The secret in `path`: its bytes without trailing white space (a newline an editor or
    /// `echo` added is not part of it).
    pub fn from_file(path: &std::path::Path) -> Result<ClusterSecret, SecretError> {
        let mut bytes = std::fs::read(path)
            .map_err(|source| SecretError::Read { path: path.to_path_buf(), source })?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        ClusterSecret::new(bytes)
            .map_err(|e| SecretError::InFile { path: path.to_path_buf(), source: Box::new(e) })
    }

    fn mac(&self, role: &[u8], client_nonce: &AuthToken, server_nonce: &AuthToken) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(role);
        mac.update(client_nonce);
        mac.update(server_nonce);
        mac
    }

    /// The bookie's proof for this pair of nonces.
    pub fn server_proof(&self, client_nonce: &AuthToken, server_nonce: &AuthToken) -> AuthToken {
        self.mac(SERVER_ROLE, client_nonce, server_nonce).finalize().into_bytes().into()
    }

    /// The client's proof for this pair of nonces.
    pub fn client_proof(&self, client_nonce: &AuthToken, server_nonce: &AuthToken) -> AuthToken {
        self.mac(CLIENT_ROLE, client_nonce, server_nonce).finalize().into_bytes().into()
    }

    /// Whether `proof` is the bookie's proof for these nonces (compared in constant time).
    pub fn verify_server(&self, c: &AuthToken, s: &AuthToken, proof: &AuthToken) -> bool {
        self.mac(SERVER_ROLE, c, s).verify_slice(proof).is_ok()
    }

    /// Whether `proof` is the client's proof for these nonces (compared in constant time).
    pub fn verify_client(&self, c: &AuthToken, s: &AuthToken, proof: &AuthToken) -> bool {
        self.mac(CLIENT_ROLE, c, s).verify_slice(proof).is_ok()
    }
}

const SERVER_ROLE: &[u8] = b"folio-bookie-server";
const CLIENT_ROLE: &[u8] = b"folio-bookie-client";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_with_the_same_secret_nonces_and_role() {
        let a = ClusterSecret::new(*b"0123456789abcdef").unwrap();
        let b = ClusterSecret::new(*b"0123456789abcdeF").unwrap();
        let (c, s) = ([1u8; 32], [2u8; 32]);
        let p = a.client_proof(&c, &s);
        assert!(a.verify_client(&c, &s, &p));
        assert!(!b.verify_client(&c, &s, &p), "another secret");
        assert!(!a.verify_client(&s, &c, &p), "nonces swapped");
        assert!(!a.verify_client(&c, &[3; 32], &p), "another server nonce");
        assert!(!a.verify_server(&c, &s, &p), "a client proof is not a server proof");
        assert!(a.verify_server(&c, &s, &a.server_proof(&c, &s)));
    }

    #[test]
    fn secrets_have_a_length_limit_and_files_lose_trailing_white_space() {
        let short = ClusterSecret::new(vec![7; CLUSTER_SECRET_BYTES_MIN - 1]);
        assert!(matches!(short, Err(SecretError::TooShort { .. })));
        let long = ClusterSecret::new(vec![7; CLUSTER_SECRET_BYTES_MAX + 1]);
        assert!(matches!(long, Err(SecretError::TooLong { .. })));
        let dir = std::env::temp_dir().join(format!("folio-secret-{}", std::process::id()));
        std::fs::write(&dir, b"a long enough secret\n\n").unwrap();
        let s = ClusterSecret::from_file(&dir).unwrap();
        assert_eq!(s, ClusterSecret::new(*b"a long enough secret").unwrap());
        assert_eq!(format!("{s:?}"), "ClusterSecret(20 bytes)", "Debug never shows it");
        std::fs::remove_file(&dir).unwrap();
        let e = ClusterSecret::from_file(&dir).unwrap_err();
        assert!(
            matches!(&e, SecretError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
        assert!(e.to_string().contains("reading the cluster secret"), "{e}");
    }
}
