//! SCRAM credentials in the metadata store: one key per mechanism and user
//! (`<root>/users/<mechanism>/<user>`, the value in `scram::Credential`'s stored form).
//! Written by AlterUserScramCredentials and `folio users`, read by every SASL
//! authentication (one metadata read: a changed or deleted credential counts at once, on
//! every broker).

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::{Expect, MetadataStore, list_all};

use super::scram::{Credential, Mechanism, USER_NAME_BYTES_MAX};

/// Checks a user name: 1..=256 bytes (any UTF-8, as Kafka allows).
pub fn check_user(user: &str) -> Result<(), String> {
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err(format!(
            "a user name must be 1..={USER_NAME_BYTES_MAX} bytes, not {}",
            user.len()
        ));
    }
    Ok(())
}

/// The credential of `user` for `mech` (a SCRAM mechanism).
pub async fn get(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
) -> Result<Option<Credential>, String> {
    let key = keys.scram_credential(mech.name(), user);
    let Some(v) = meta.get(&key).await.map_err(|e| format!("reading {key}: {e}"))? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&v.value).map_err(|_| format!("{key}: not UTF-8"))?;
    Credential::decode(text).map(Some).map_err(|e| format!("{key}: {e}"))
}

/// Stores (creates or replaces) the credential of `user` for `mech`.
pub async fn put(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
    credential: &Credential,
) -> Result<(), String> {
    check_user(user)?;
    let key = keys.scram_credential(mech.name(), user);
    meta.put(&key, Bytes::from(credential.encode()), Expect::Any)
        .await
        .map(drop)
        .map_err(|e| format!("writing {key}: {e}"))
}

/// Deletes the credential of `user` for `mech`; whether there was one.
pub async fn delete(
    meta: &dyn MetadataStore,
    keys: &Keys,
    mech: Mechanism,
    user: &str,
) -> Result<bool, String> {
    let key = keys.scram_credential(mech.name(), user);
    meta.delete(&key, Expect::Any).await.map_err(|e| format!("deleting {key}: {e}"))
}

/// One user's credentials: mechanism and iterations of each.
pub type UserCredentials = Vec<(Mechanism, u32)>;

/// Every user with a credential, sorted by name, with the mechanisms and iterations they
/// have. A damaged value is reported, not skipped.
pub async fn list(
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> Result<Vec<(String, UserCredentials)>, String> {
    let mut users: std::collections::BTreeMap<String, UserCredentials> = Default::default();
    for mech in Mechanism::SCRAM {
        let prefix = keys.scram_credentials(mech.name());
        for v in list_all(meta, &prefix).await.map_err(|e| format!("listing {prefix}: {e}"))? {
            let user = v.key[prefix.len()..].to_string();
            let text =
                std::str::from_utf8(&v.value).map_err(|_| format!("{}: not UTF-8", v.key))?;
            let c = Credential::decode(text).map_err(|e| format!("{}: {e}", v.key))?;
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
) -> Result<bool, String> {
    for mech in Mechanism::SCRAM {
        if let Some(c) = get(meta, keys, mech, user).await? {
            return folio_rt::blocking(move || c.check_password(mech, &password))
                .await
                .map_err(|e| format!("checking a password: {e}"));
        }
    }
    Ok(false)
}
