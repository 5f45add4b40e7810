//! SCRAM credentials in the metadata store: one key per mechanism and user
//! (`<root>/users/<mechanism>/<user>`, the value in `scram::Credential`'s stored form).
//! Written by AlterUserScramCredentials and `folio users`, read by every SASL
//! authentication (one metadata read: a changed or deleted credential counts at once, on
//! every broker).

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::records::corrupt;
use folio_meta::{Expect, MetaError, MetadataStore, list_all};
use folio_proto::InvalidConfig;

use super::scram::{Credential, Mechanism, USER_NAME_BYTES_MAX};

/// Why a credential could not be read, stored or checked.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The user name (or the credential) is outside the rules.
    #[error("{0}")]
    Invalid(#[from] InvalidConfig),
    /// The metadata store failed, or holds a damaged credential.
    #[error("{what}: {source}")]
    Meta { what: String, source: MetaError },
    /// The password check (PBKDF2, on a blocking thread) ended without a result.
    #[error("checking a password: {0}")]
    Blocking(#[from] folio_rt::BlockingFailed),
}

/// The store's error at step `what`.
fn meta(what: String) -> impl FnOnce(MetaError) -> CredentialError {
    move |source| CredentialError::Meta { what, source }
}

/// Checks a user name: 1..=256 bytes (any UTF-8, as Kafka allows).
pub fn check_user(user: &str) -> Result<(), InvalidConfig> {
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err(InvalidConfig(format!(
            "a user name must be 1..={USER_NAME_BYTES_MAX} bytes, not {}",
            user.len()
        )));
    }
    Ok(())
}

/// The credential of `user` for `mech` (a SCRAM mechanism).
pub async fn get(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
) -> Result<Option<Credential>, CredentialError> {
    let key = keys.scram_credential(mech.name(), user);
    let Some(v) = meta.get(&key).await.map_err(self::meta(format!("reading {key}")))? else {
        return Ok(None);
    };
    decode(&key, &v.value).map(Some).map_err(self::meta(format!("reading {key}")))
}

/// A stored credential, refusing damage.
fn decode(key: &str, value: &[u8]) -> Result<Credential, MetaError> {
    let text = std::str::from_utf8(value).map_err(|_| corrupt(key, "not UTF-8"))?;
    Credential::decode(text).map_err(|e| corrupt(key, e))
}

/// Stores (creates or replaces) the credential of `user` for `mech`.
pub async fn put(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
    credential: &Credential,
) -> Result<(), CredentialError> {
    check_user(user)?;
    let key = keys.scram_credential(mech.name(), user);
    meta.put(&key, Bytes::from(credential.encode()), Expect::Any)
        .await
        .map(drop)
        .map_err(self::meta(format!("writing {key}")))
}

/// Deletes the credential of `user` for `mech`; whether there was one.
pub async fn delete(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
) -> Result<bool, CredentialError> {
    let key = keys.scram_credential(mech.name(), user);
    meta.delete(&key, Expect::Any).await.map_err(self::meta(format!("deleting {key}")))
}

/// One user's credentials: mechanism and iterations of each.
pub type UserCredentials = Vec<(Mechanism, u32)>;

/// Every user with a credential, sorted by name, with the mechanisms and iterations they
/// have. A damaged value is reported, not skipped.
pub async fn list(
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> Result<Vec<(String, UserCredentials)>, CredentialError> {
    let mut users: std::collections::BTreeMap<String, UserCredentials> = Default::default();
    for mech in Mechanism::SCRAM {
        let prefix = keys.scram_credentials(mech.name());
        let listing = format!("listing {prefix}");
        for v in list_all(meta, &prefix).await.map_err(self::meta(listing.clone()))? {
            let user = v.key[prefix.len()..].to_string();
            let c = decode(&v.key, &v.value).map_err(self::meta(listing.clone()))?;
            users.entry(user).or_default().push((mech, c.iterations));
        }
    }
    Ok(users.into_iter().collect())
}

/// Checks a PLAIN password against the user's strongest SCRAM credential. PBKDF2 runs off
/// the async threads.
pub async fn check_plain(
    meta: &dyn MetadataStore,
    keys: &Keys,
    user: &str,
    password: String,
) -> Result<bool, CredentialError> {
    for mech in Mechanism::SCRAM {
        if let Some(c) = get(meta, keys, mech, user).await? {
            return Ok(folio_rt::blocking(move || c.check_password(mech, &password)).await?);
        }
    }
    Ok(false)
}
