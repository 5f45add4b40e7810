//! The schema registry's named limits: what a request may hold and what the store keeps.

/// The longest subject name (bytes). Confluent sets none; a subject is usually a topic name
/// (at most 249 bytes) with a `-key`/`-value` suffix.
pub const SUBJECT_BYTES_MAX: usize = 512;

/// The largest schema text (bytes): it is stored whole in one metadata value, whose limit
/// is 1 MiB, with room left for its record around it.
pub const SCHEMA_BYTES_MAX: usize = 512 * 1024;

/// The most versions one subject may hold, deleted ones included (each is checked against
/// the new one under a transitive compatibility level).
pub const SUBJECT_VERSIONS_MAX: u32 = 1000;

/// The most subjects the registry holds.
pub const SUBJECTS_MAX: usize = 10_000;

/// How deep a schema may nest (records in arrays in records...): parsing and comparing
/// recurse, so a hostile schema must not exhaust the stack.
pub const SCHEMA_DEPTH_MAX: usize = 64;

/// The most named types, fields and symbols one schema may declare in all.
pub const SCHEMA_ITEMS_MAX: usize = 100_000;

/// Tries of a registration that lost a race with another one on the same subject.
pub const REGISTER_ATTEMPTS_MAX: usize = 32;
