//! The registry over the metadata store. Key layout, under `Keys::registry()`:
//!
//! ```text
//! ids/<id, 10 digits>                    {"schemaType", "schema"}: a schema, once per text
//! fingerprints/<sha-256 of type+canonical> "<id>": the id a schema text already has
//! subjects/<hex subject>/<version, 10 d.> {"id", "deleted"}: a subject's version
//! config/global, config/<hex subject>    {"compatibility"}
//! mode/global, mode/<hex subject>        {"mode"}
//! ```
//! Ids come from the `schema` id sequence. A version is written only if absent: two
//! registrations racing on one subject cannot both take a number, and the loser checks
//! compatibility again against the winner's schema. Subject names are hex in keys, so any
//! name is a single key segment.

use std::sync::Arc;

use folio_meta::keys::Keys;
use folio_meta::{Compare, MetadataStore, Txn};
use serde_json::{Value, json};
use sha2::Digest;

use crate::limits::{REGISTER_ATTEMPTS_MAX, SUBJECT_BYTES_MAX, SUBJECT_VERSIONS_MAX, SUBJECTS_MAX};
use crate::{Compatibility, Mode, RegistryError, Result, Schema, SchemaType};

/// The compatibility level of a registry nobody configured (Confluent's default).
const DEFAULT_COMPATIBILITY: Compatibility = Compatibility::Backward;
/// The id sequence schema ids come from.
const ID_SEQUENCE: &str = "schema";

/// The schema registry of one cluster (one metadata root).
#[derive(Debug, Clone)]
pub struct Registry {
    meta: Arc<dyn MetadataStore>,
    prefix: String,
    id_sequence: String,
}

/// A schema registered under a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub subject: String,
    pub version: u32,
    pub id: u64,
    pub schema: Schema,
    pub deleted: bool,
}

/// One stored version of a subject.
#[derive(Debug, Clone, Copy)]
struct Version {
    number: u32,
    id: u64,
    deleted: bool,
}

impl Registry {
    /// The registry kept under `keys`' root in `meta`.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: &Keys) -> Registry {
        let id_sequence = keys.id_sequence(ID_SEQUENCE);
        Registry { meta, prefix: keys.registry(), id_sequence }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn subject_key(&self, subject: &str) -> String {
        self.key(&format!("subjects/{}/", hex(subject.as_bytes())))
    }

    async fn get_json(&self, key: &str) -> Result<Option<(Value, u64)>> {
        let Some(v) = self.meta.get(key).await? else { return Ok(None) };
        let json = serde_json::from_slice(&v.value).map_err(|e| corrupt(key, e.to_string()))?;
        Ok(Some((json, v.version)))
    }

    /// Every version of `subject` the store holds, deleted ones too, oldest first.
    async fn all_versions(&self, subject: &str) -> Result<Vec<Version>> {
        check_subject(subject)?;
        let prefix = self.subject_key(subject);
        let items = folio_meta::list_all(self.meta.as_ref(), &prefix).await?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let number = item.key[prefix.len()..].parse().ok();
            let value: Option<Value> = serde_json::from_slice(&item.value).ok();
            let (Some(number), Some(value)) = (number, value) else {
                return Err(corrupt(&item.key, "not a schema version".into()));
            };
            let id = value["id"].as_u64().unwrap_or(0);
            let deleted = value["deleted"].as_bool().unwrap_or(false);
            out.push(Version { number, id, deleted });
        }
        Ok(out)
    }

    /// The versions of `subject` (with `deleted`, soft-deleted ones too).
    pub async fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<u32>> {
        let all = self.all_versions(subject).await?;
        let shown: Vec<u32> =
            all.iter().filter(|v| deleted || !v.deleted).map(|v| v.number).collect();
        if shown.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        Ok(shown)
    }

    /// Every subject with a version (with `deleted`, soft-deleted ones too).
    pub async fn subjects(&self, deleted: bool) -> Result<Vec<String>> {
        let prefix = self.key("subjects/");
        let items = folio_meta::list_all(self.meta.as_ref(), &prefix).await?;
        let mut out: Vec<String> = Vec::new();
        for item in items {
            let Some((name, _)) = item.key[prefix.len()..].split_once('/') else { continue };
            let gone = serde_json::from_slice::<Value>(&item.value)
                .is_ok_and(|v| v["deleted"].as_bool() == Some(true));
            let Some(name) = unhex(name) else { continue };
            if (deleted || !gone) && out.last() != Some(&name) {
                out.push(name);
            }
        }
        out.dedup();
        Ok(out)
    }

    /// The schema with id `id`.
    pub async fn schema(&self, id: u64) -> Result<Schema> {
        let key = self.key(&format!("ids/{id:010}"));
        let Some((v, _)) = self.get_json(&key).await? else {
            return Err(RegistryError::SchemaNotFound(id.to_string()));
        };
        let ty = SchemaType::parse(v["schemaType"].as_str())?;
        Ok(Schema { ty, text: v["schema"].as_str().unwrap_or_default().to_string() })
    }

    /// Whether a schema with id `id` exists (the broker's record validation).
    pub async fn schema_exists(&self, id: u64) -> Result<bool> {
        Ok(self.meta.get(&self.key(&format!("ids/{id:010}"))).await?.is_some())
    }

    /// The (subject, version) pairs that hold schema `id`, soft-deleted ones left out.
    pub async fn uses_of(&self, id: u64) -> Result<Vec<(String, u32)>> {
        self.schema(id).await?;
        let mut out = Vec::new();
        for subject in self.subjects(false).await? {
            for v in self.all_versions(&subject).await? {
                if v.id == id && !v.deleted {
                    out.push((subject.clone(), v.number));
                }
            }
        }
        Ok(out)
    }

    /// Version `version` of `subject` (`None`: the latest), with `deleted` soft-deleted
    /// ones too.
    pub async fn version(
        &self,
        subject: &str,
        version: Option<u32>,
        deleted: bool,
    ) -> Result<Registered> {
        let all = self.all_versions(subject).await?;
        let shown: Vec<&Version> = all.iter().filter(|v| deleted || !v.deleted).collect();
        if shown.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        let found = match version {
            None => shown.last().copied(),
            Some(n) => shown.iter().find(|v| v.number == n).copied(),
        };
        let Some(v) = found else {
            let version = version.map_or("latest".into(), |n| n.to_string());
            return Err(RegistryError::VersionNotFound { subject: subject.to_string(), version });
        };
        let schema = self.schema(v.id).await?;
        Ok(Registered {
            subject: subject.into(),
            version: v.number,
            id: v.id,
            schema,
            deleted: v.deleted,
        })
    }

    /// The version of `subject` whose schema is `schema`'s (same canonical form).
    pub async fn lookup(
        &self,
        subject: &str,
        schema: &Schema,
        deleted: bool,
    ) -> Result<Registered> {
        schema.parse()?;
        let all = self.all_versions(subject).await?;
        if !all.iter().any(|v| deleted || !v.deleted) {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        let id = self.id_of(schema).await?;
        let found = all.iter().rev().find(|v| Some(v.id) == id && (deleted || !v.deleted));
        let Some(v) = found else {
            return Err(RegistryError::SchemaNotFound("with this text under the subject".into()));
        };
        let schema = self.schema(v.id).await?;
        Ok(Registered {
            subject: subject.into(),
            version: v.number,
            id: v.id,
            schema,
            deleted: v.deleted,
        })
    }

    fn fingerprint_key(&self, schema: &Schema) -> Result<String> {
        let canonical = schema.canonical()?;
        let mut h = sha2::Sha256::new();
        h.update(schema.ty.name().as_bytes());
        h.update(b"\n");
        h.update(canonical.as_bytes());
        Ok(self.key(&format!("fingerprints/{}", hex(&h.finalize()))))
    }

    /// The id `schema`'s text already has, if any.
    async fn id_of(&self, schema: &Schema) -> Result<Option<u64>> {
        let key = self.fingerprint_key(schema)?;
        Ok(self.get_json(&key).await?.and_then(|(v, _)| v.as_u64()))
    }

    /// The id of `schema`: the one its text has, or a new one.
    async fn id_for(&self, schema: &Schema) -> Result<u64> {
        let key = self.fingerprint_key(schema)?;
        loop {
            if let Some((v, _)) = self.get_json(&key).await? {
                return v.as_u64().ok_or_else(|| corrupt(&key, "not an id".into()));
            }
            let id = self.meta.next_id(&self.id_sequence).await?;
            let record = json!({"schemaType": schema.ty.name(), "schema": schema.text});
            let txn = Txn::new()
                .compare(Compare::Absent(key.clone()))
                .put(key.clone(), id.to_string().into_bytes())
                .put(self.key(&format!("ids/{id:010}")), record.to_string().into_bytes());
            if self.meta.txn(txn).await?.succeeded {
                return Ok(id);
            }
            // Another registration of the same text won: take its id.
        }
    }

    /// Registers `schema` under `subject`: its existing version if the subject holds it,
    /// else a new version once it meets the subject's compatibility level. Returns the
    /// schema's id and the version.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<(u64, u32)> {
        let parsed = schema.parse()?;
        if self.mode(Some(subject)).await? == Mode::ReadOnly {
            return Err(RegistryError::NotPermitted(format!(
                "Subject {subject} is in read-only mode"
            )));
        }
        for _ in 0..REGISTER_ATTEMPTS_MAX {
            let all = self.all_versions(subject).await?;
            let known = self.id_of(schema).await?;
            if let Some(v) = all.iter().rev().find(|v| !v.deleted && Some(v.id) == known) {
                return Ok((v.id, v.number));
            }
            if all.len() as u32 >= SUBJECT_VERSIONS_MAX {
                return Err(RegistryError::Limit(format!(
                    "subject {subject} holds {SUBJECT_VERSIONS_MAX} versions (SUBJECT_VERSIONS_MAX)"
                )));
            }
            if all.is_empty() && self.subjects(true).await?.len() >= SUBJECTS_MAX {
                return Err(RegistryError::Limit(format!(
                    "the registry holds {SUBJECTS_MAX} subjects (SUBJECTS_MAX)"
                )));
            }
            let live: Vec<&Version> = all.iter().filter(|v| !v.deleted).collect();
            let why = self.violations(subject, &parsed, &live).await?;
            if !why.is_empty() {
                return Err(RegistryError::Incompatible { subject: subject.into(), why });
            }
            let id = self.id_for(schema).await?;
            let number = all.last().map_or(1, |v| v.number + 1);
            let key = format!("{}{number:010}", self.subject_key(subject));
            let record = json!({"id": id, "deleted": false}).to_string();
            let txn =
                Txn::new().compare(Compare::Absent(key.clone())).put(key, record.into_bytes());
            if self.meta.txn(txn).await?.succeeded {
                tracing::info!(subject, version = number, id, "schema registered");
                return Ok((id, number));
            }
            // Another registration took this version first: check against it too.
        }
        Err(RegistryError::Contended(subject.to_string()))
    }

    /// Why `new` breaks `subject`'s compatibility level against the versions `live`.
    async fn violations(
        &self,
        subject: &str,
        new: &crate::Parsed,
        live: &[&Version],
    ) -> Result<Vec<String>> {
        let level = self.compatibility(Some(subject)).await?;
        let against: &[&Version] = match (level.transitive(), live.split_last()) {
            (_, None) => &[],
            (true, _) => live,
            (false, Some((last, _))) => std::slice::from_ref(last),
        };
        let mut why = Vec::new();
        for v in against {
            let old = self.schema(v.id).await?.parse()?;
            why.extend(
                level
                    .violations(new, &old)
                    .into_iter()
                    .map(|w| format!("version {}: {w}", v.number)),
            );
        }
        Ok(why)
    }

    /// Why `schema` would break `subject`'s level against version `version` (`None`: the
    /// latest; `Some(0)`: every version): empty when it would not.
    pub async fn check(
        &self,
        subject: &str,
        version: Option<u32>,
        schema: &Schema,
    ) -> Result<Vec<String>> {
        let parsed = schema.parse()?;
        let all = self.all_versions(subject).await?;
        let live: Vec<&Version> = all.iter().filter(|v| !v.deleted).collect();
        let against: Vec<&Version> = match version {
            Some(0) => live.clone(),
            None => live.last().copied().into_iter().collect(),
            Some(n) => live.iter().copied().filter(|v| v.number == n).collect(),
        };
        if against.is_empty() && !live.is_empty() {
            let version = version.map_or("latest".into(), |n| n.to_string());
            return Err(RegistryError::VersionNotFound { subject: subject.into(), version });
        }
        let level = self.compatibility(Some(subject)).await?;
        let mut why = Vec::new();
        for v in against {
            let old = self.schema(v.id).await?.parse()?;
            why.extend(
                level
                    .violations(&parsed, &old)
                    .into_iter()
                    .map(|w| format!("version {}: {w}", v.number)),
            );
        }
        Ok(why)
    }

    /// Deletes `subject`'s versions: soft (still readable with `deleted=true`, ids stay)
    /// or, once soft-deleted, `permanent`. Returns the versions deleted.
    pub async fn delete_subject(&self, subject: &str, permanent: bool) -> Result<Vec<u32>> {
        let all = self.all_versions(subject).await?;
        let targets: Vec<&Version> = all.iter().filter(|v| permanent || !v.deleted).collect();
        if targets.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        if permanent && let Some(v) = targets.iter().find(|v| !v.deleted) {
            return Err(RegistryError::NotSoftDeleted {
                subject: subject.into(),
                version: v.number,
            });
        }
        let mut out = Vec::new();
        for v in targets {
            self.delete_one(subject, v, permanent).await?;
            out.push(v.number);
        }
        Ok(out)
    }

    /// Deletes version `version` (`None`: the latest) of `subject`, as
    /// [`Registry::delete_subject`] does.
    pub async fn delete_version(
        &self,
        subject: &str,
        version: Option<u32>,
        permanent: bool,
    ) -> Result<u32> {
        let all = self.all_versions(subject).await?;
        let found = match version {
            None => all.iter().rev().find(|v| !v.deleted),
            Some(n) => all.iter().find(|v| v.number == n && (permanent || !v.deleted)),
        };
        let Some(v) = found else {
            if all.iter().all(|v| v.deleted) {
                return Err(RegistryError::SubjectNotFound(subject.to_string()));
            }
            let version = version.map_or("latest".into(), |n| n.to_string());
            return Err(RegistryError::VersionNotFound { subject: subject.into(), version });
        };
        if permanent && !v.deleted {
            return Err(RegistryError::NotSoftDeleted {
                subject: subject.into(),
                version: v.number,
            });
        }
        self.delete_one(subject, v, permanent).await?;
        Ok(v.number)
    }

    async fn delete_one(&self, subject: &str, v: &Version, permanent: bool) -> Result<()> {
        let key = format!("{}{:010}", self.subject_key(subject), v.number);
        if permanent {
            self.meta.delete(&key, folio_meta::Expect::Any).await?;
        } else {
            let record = json!({"id": v.id, "deleted": true}).to_string();
            self.meta.put(&key, record.into_bytes().into(), folio_meta::Expect::Any).await?;
        }
        tracing::info!(subject, version = v.number, permanent, "schema version deleted");
        Ok(())
    }

    fn setting_key(&self, what: &str, subject: Option<&str>) -> Result<String> {
        Ok(match subject {
            None => self.key(&format!("{what}/global")),
            Some(s) => {
                check_subject(s)?;
                self.key(&format!("{what}/{}", hex(s.as_bytes())))
            }
        })
    }

    /// The compatibility level set for `subject` (`None`: the registry's), falling back to
    /// the registry's and then to BACKWARD.
    pub async fn compatibility(&self, subject: Option<&str>) -> Result<Compatibility> {
        match self.setting(CONFIG, subject).await? {
            Some(name) => Compatibility::parse(&name),
            None => Ok(DEFAULT_COMPATIBILITY),
        }
    }

    /// The level set for exactly `subject` (`None`: the registry), if one is.
    pub async fn own_compatibility(&self, subject: Option<&str>) -> Result<Option<Compatibility>> {
        let own = self.own_setting(CONFIG, subject).await?;
        own.map(|name| Compatibility::parse(&name)).transpose()
    }

    /// Sets the level of `subject` (`None`: the registry's default).
    pub async fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: Compatibility,
    ) -> Result<()> {
        self.put_setting(CONFIG, subject, level.name()).await
    }

    /// Removes `subject`'s own level (it falls back to the registry's); returns the old one.
    pub async fn delete_compatibility(&self, subject: Option<&str>) -> Result<Compatibility> {
        let old = self.compatibility(subject).await?;
        self.delete_setting(CONFIG, subject).await?;
        Ok(old)
    }

    /// The mode of `subject` (`None`: the registry's), falling back as levels do.
    pub async fn mode(&self, subject: Option<&str>) -> Result<Mode> {
        match self.setting(MODE, subject).await? {
            Some(name) => Mode::parse(&name),
            None => Ok(Mode::ReadWrite),
        }
    }

    /// Sets the mode of `subject` (`None`: the registry's).
    pub async fn set_mode(&self, subject: Option<&str>, mode: Mode) -> Result<()> {
        self.put_setting(MODE, subject, mode.name()).await
    }

    /// Removes `subject`'s own mode; returns the one it had.
    pub async fn delete_mode(&self, subject: Option<&str>) -> Result<Mode> {
        let old = self.mode(subject).await?;
        self.delete_setting(MODE, subject).await?;
        Ok(old)
    }

    /// Setting `what` as set for exactly `subject` (`None`: the registry).
    async fn own_setting(
        &self,
        (what, field): Setting,
        subject: Option<&str>,
    ) -> Result<Option<String>> {
        let key = self.setting_key(what, subject)?;
        Ok(self.get_json(&key).await?.map(|(v, _)| v[field].as_str().unwrap_or("").to_string()))
    }

    /// Setting `what` for `subject`, else the registry's.
    async fn setting(&self, what: Setting, subject: Option<&str>) -> Result<Option<String>> {
        match self.own_setting(what, subject).await? {
            None if subject.is_some() => self.own_setting(what, None).await,
            own => Ok(own),
        }
    }

    async fn put_setting(
        &self,
        (what, field): Setting,
        subject: Option<&str>,
        value: &str,
    ) -> Result<()> {
        let key = self.setting_key(what, subject)?;
        let record = json!({ field: value }).to_string();
        self.meta.put(&key, record.into_bytes().into(), folio_meta::Expect::Any).await?;
        Ok(())
    }

    async fn delete_setting(&self, (what, _): Setting, subject: Option<&str>) -> Result<()> {
        self.meta.delete(&self.setting_key(what, subject)?, folio_meta::Expect::Any).await?;
        Ok(())
    }
}

/// A setting's key prefix and the field of its record.
type Setting = (&'static str, &'static str);
/// Compatibility levels: `config/...` records of `{"compatibility"}`.
const CONFIG: Setting = ("config", "compatibility");
/// Modes: `mode/...` records of `{"mode"}`.
const MODE: Setting = ("mode", "mode");

fn check_subject(subject: &str) -> Result<()> {
    if subject.is_empty()
        || subject.len() > SUBJECT_BYTES_MAX
        || subject.chars().any(char::is_control)
    {
        return Err(RegistryError::NotPermitted(format!(
            "a subject name is 1 to {SUBJECT_BYTES_MAX} bytes without control characters (SUBJECT_BYTES_MAX)"
        )));
    }
    Ok(())
}

fn corrupt(key: &str, detail: String) -> RegistryError {
    RegistryError::Store(folio_meta::MetaError::Corrupt { key: key.to_string(), detail })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}
