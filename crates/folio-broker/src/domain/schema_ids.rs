//! Broker-side schema validation (`confluent.key.schema.validation`,
//! `confluent.value.schema.validation`): every record's key or value is in the schema
//! registry's wire format, magic byte 0 then a 4-byte big-endian schema id, and the id is
//! registered (`folio_registry`, in the same metadata store). A null key or value (a
//! tombstone) names no schema and passes. Ids are never reused, not even after their
//! subject is deleted for good, so an id once found is remembered (up to
//! [`SCHEMA_IDS_KNOWN_MAX`]).

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::domain::batch::BatchInfo;
use crate::domain::records::{RecordsError, decode_records, plain_records};
use crate::limits::SCHEMA_IDS_KNOWN_MAX;

/// The registry's ids as produce checks them, with the ids found so far.
#[derive(Debug)]
pub struct SchemaIds {
    registry: folio_registry::Registry,
    known: Mutex<BTreeSet<u32>>,
}

/// What the records of a batch name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// Every checked key or value names one of these ids.
    Ids(BTreeSet<u32>),
    /// These records (their indexes) have a checked key or value not in the wire format.
    NotFramed(Vec<i32>),
}

impl SchemaIds {
    /// Ids looked up in `registry`.
    pub fn new(registry: folio_registry::Registry) -> SchemaIds {
        SchemaIds { registry, known: Mutex::new(BTreeSet::new()) }
    }

    /// The ids of `ids` the registry does not hold.
    pub async fn unregistered(
        &self,
        ids: &BTreeSet<u32>,
    ) -> Result<Vec<u32>, folio_registry::RegistryError> {
        let unknown: Vec<u32> = {
            let known = self.known.lock().expect("schema ids lock");
            ids.iter().copied().filter(|id| !known.contains(id)).collect()
        };
        let mut missing = Vec::new();
        for id in unknown {
            if self.registry.schema_exists(u64::from(id)).await? {
                let mut known = self.known.lock().expect("schema ids lock");
                if known.len() >= SCHEMA_IDS_KNOWN_MAX {
                    known.clear(); // looked up again as they come: never unbounded
                }
                known.insert(id);
            } else {
                missing.push(id);
            }
        }
        Ok(missing)
    }
}

/// What the records of `batch` (header `h`) name in their keys (`key`) and values
/// (`value`).
pub fn named(
    batch: &[u8],
    h: &BatchInfo,
    (key, value): (bool, bool),
) -> Result<Named, RecordsError> {
    let plain = plain_records(batch, h)?;
    let records = decode_records(h, &plain)?;
    let (mut ids, mut bad) = (BTreeSet::new(), Vec::new());
    for (i, r) in records.iter().enumerate() {
        let fields = [(key, r.key), (value, r.value)];
        for (_, bytes) in fields.iter().filter(|(checked, _)| *checked) {
            match bytes.map(framed_id) {
                None => {} // null: a tombstone names no schema
                Some(Some(id)) => {
                    ids.insert(id);
                }
                Some(None) => {
                    bad.push(i as i32);
                    break;
                }
            }
        }
    }
    Ok(if bad.is_empty() { Named::Ids(ids) } else { Named::NotFramed(bad) })
}

/// The schema id of bytes in the registry's wire format.
fn framed_id(b: &[u8]) -> Option<u32> {
    match b {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_magic_byte_zero_and_four_id_bytes_name_a_schema() {
        assert_eq!(framed_id(&[0, 0, 0, 1, 44, 9, 9]), Some(300));
        assert_eq!(framed_id(&[0, 0, 0, 7]), None, "too short");
        assert_eq!(framed_id(&[1, 0, 0, 0, 7]), None, "another magic byte");
        assert_eq!(framed_id(b"plain text"), None);
    }
}
