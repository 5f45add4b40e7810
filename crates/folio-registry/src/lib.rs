//! Folio's schema registry: the REST API Confluent's serializers speak (subjects and their
//! versions, schemas by id, compatibility levels, modes), over schemas kept in the
//! metadata store, so every broker of a cluster serves the same registry.
//!
//! - [`Registry`] (`registry.rs`): registration, lookup, deletion, levels and modes over the
//!   store; its key layout is documented there.
//! - [`api`]: the REST routes, from method, path, query and body to a status and JSON.
//! - [`avro`], [`json_schema`], [`protobuf`]: each type's parser and compatibility rules.
//!
//! Architecture invariant: this crate knows no HTTP framing (the binary reads requests and
//! writes answers) and no Kafka (the broker asks [`Registry::schema_exists`]).

pub mod api;
pub mod avro;
mod error;
pub mod json_schema;
pub mod limits;
pub mod protobuf;
mod registry;

pub use error::{RegistryError, Result};
pub use registry::{Registered, Registry};

/// The kinds of schema the registry takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    /// Every type, as `/schemas/types` lists them.
    pub const ALL: [SchemaType; 3] = [SchemaType::Json, SchemaType::Protobuf, SchemaType::Avro];

    /// Its name in the API (`AVRO`, `JSON`, `PROTOBUF`).
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }

    /// The type a name in the API means; absent means Avro.
    pub fn parse(name: Option<&str>) -> Result<SchemaType> {
        match name.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(SchemaType::Avro),
            Some("JSON") => Ok(SchemaType::Json),
            Some("PROTOBUF") => Ok(SchemaType::Protobuf),
            Some(other) => {
                Err(RegistryError::InvalidSchema(format!("unknown schema type {other}")))
            }
        }
    }
}

/// A schema as a client sends it: its type and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub ty: SchemaType,
    pub text: String,
}

/// A schema parsed: what compatibility compares.
#[derive(Debug, Clone)]
pub enum Parsed {
    Avro(avro::AvroSchema),
    Json(serde_json::Value),
    Protobuf(protobuf::ProtoSchema),
}

impl Schema {
    /// Parses the schema, refusing an invalid one.
    pub fn parse(&self) -> Result<Parsed> {
        if self.text.len() > limits::SCHEMA_BYTES_MAX {
            return Err(RegistryError::Limit(format!(
                "the schema is {} bytes; the most is {} (SCHEMA_BYTES_MAX)",
                self.text.len(),
                limits::SCHEMA_BYTES_MAX
            )));
        }
        Ok(match self.ty {
            SchemaType::Avro => Parsed::Avro(avro::parse(&self.text)?),
            SchemaType::Json => Parsed::Json(json_schema::parse(&self.text)?),
            SchemaType::Protobuf => Parsed::Protobuf(protobuf::parse(&self.text)?),
        })
    }

    /// The schema's text with what does not change its meaning taken out (spacing, key
    /// order, comments): two schemas with one canonical form share one id.
    pub fn canonical(&self) -> Result<String> {
        match self.ty {
            SchemaType::Avro => avro::canonical(&self.text),
            SchemaType::Json => serde_json::from_str::<serde_json::Value>(&self.text)
                .map(|v| v.to_string())
                .map_err(|e| RegistryError::InvalidSchema(format!("not JSON: {e}"))),
            SchemaType::Protobuf => Ok(protobuf::canonical(&self.text)),
        }
    }
}

impl Parsed {
    /// Why data written with `writer` cannot be read with `self`: empty when it can. Two
    /// schemas of different types never are.
    pub fn incompatibilities(&self, writer: &Parsed) -> Vec<String> {
        match (self, writer) {
            (Parsed::Avro(r), Parsed::Avro(w)) => avro::incompatibilities(r, w),
            (Parsed::Json(r), Parsed::Json(w)) => json_schema::incompatibilities(r, w),
            (Parsed::Protobuf(r), Parsed::Protobuf(w)) => protobuf::incompatibilities(r, w),
            _ => vec!["the schema type changed".to_string()],
        }
    }
}

/// A subject's compatibility level: which earlier versions a new one is checked against,
/// and in which direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    None,
    /// The new schema reads data written with the latest one.
    Backward,
    BackwardTransitive,
    /// The latest schema reads data written with the new one.
    Forward,
    ForwardTransitive,
    /// Both.
    Full,
    FullTransitive,
}

impl Compatibility {
    /// Every level with its name in the API.
    pub const NAMES: [(Compatibility, &'static str); 7] = [
        (Compatibility::None, "NONE"),
        (Compatibility::Backward, "BACKWARD"),
        (Compatibility::BackwardTransitive, "BACKWARD_TRANSITIVE"),
        (Compatibility::Forward, "FORWARD"),
        (Compatibility::ForwardTransitive, "FORWARD_TRANSITIVE"),
        (Compatibility::Full, "FULL"),
        (Compatibility::FullTransitive, "FULL_TRANSITIVE"),
    ];

    /// Its name in the API.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(c, _)| *c == self).map(|(_, n)| *n).expect("every level named")
    }

    /// The level a name means.
    pub fn parse(name: &str) -> Result<Compatibility> {
        let upper = name.to_ascii_uppercase();
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == upper)
            .map(|(c, _)| *c)
            .ok_or_else(|| RegistryError::InvalidCompatibility(name.to_string()))
    }

    /// Checked against every earlier version, not only the latest.
    pub fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive
                | Compatibility::ForwardTransitive
                | Compatibility::FullTransitive
        )
    }

    /// Why `new` breaks this level against an earlier version `old`: empty when it does not.
    pub fn violations(self, new: &Parsed, old: &Parsed) -> Vec<String> {
        use Compatibility as C;
        let backward = || new.incompatibilities(old);
        let forward = || old.incompatibilities(new);
        match self {
            C::None => Vec::new(),
            C::Backward | C::BackwardTransitive => backward(),
            C::Forward | C::ForwardTransitive => forward(),
            C::Full | C::FullTransitive => {
                let mut why = backward();
                why.extend(forward().into_iter().map(|w| format!("(forward) {w}")));
                why
            }
        }
    }
}

/// Whether a subject (or the registry) takes new schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ReadWrite,
    ReadOnly,
}

impl Mode {
    /// Its name in the API.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadWrite => "READWRITE",
            Mode::ReadOnly => "READONLY",
        }
    }

    /// The mode a name means (IMPORT, which registers under given ids, is not supported).
    pub fn parse(name: &str) -> Result<Mode> {
        match name.to_ascii_uppercase().as_str() {
            "READWRITE" => Ok(Mode::ReadWrite),
            "READONLY" => Ok(Mode::ReadOnly),
            _ => Err(RegistryError::InvalidMode(name.to_string())),
        }
    }
}
