//! Avro schemas: parsed from their JSON into an arena of types (named types may refer to
//! themselves), and Avro's schema resolution rules as a compatibility check: can data
//! written with one schema be read with another.
//!
//! Resolution (the Avro specification, "Schema Resolution"), reader against writer:
//! - the same primitive, or a promotion: int to long, float or double; long to float or
//!   double; float to double; string to bytes and bytes to string;
//! - records of the same full name (or a reader alias naming the writer): each reader field
//!   is read from the writer's field of its name (or alias), or has a default; writer
//!   fields the reader lacks are skipped;
//! - enums of the same name: every writer symbol is a reader symbol, or the reader has a
//!   default symbol; fixed of the same name and size;
//! - arrays by their items, maps by their values;
//! - a writer union: every branch must be readable; a reader union (writer not one): some
//!   branch reads the writer's type.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::limits::{SCHEMA_DEPTH_MAX, SCHEMA_ITEMS_MAX};

/// One type of a schema; types refer to each other by index into [`AvroSchema::types`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AvroType {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Record { name: String, aliases: Vec<String>, fields: Vec<AvroField> },
    Enum { name: String, aliases: Vec<String>, symbols: Vec<String>, default: Option<String> },
    Fixed { name: String, aliases: Vec<String>, size: u64 },
    Array(usize),
    Map(usize),
    Union(Vec<usize>),
}

/// A record's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroField {
    pub name: String,
    pub aliases: Vec<String>,
    /// Index of its type.
    pub ty: usize,
    pub has_default: bool,
}

/// A parsed Avro schema: its types (named types once each) and the root's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroSchema {
    pub types: Vec<AvroType>,
    pub root: usize,
}

const PRIMITIVES: &[(&str, AvroType)] = &[
    ("null", AvroType::Null),
    ("boolean", AvroType::Boolean),
    ("int", AvroType::Int),
    ("long", AvroType::Long),
    ("float", AvroType::Float),
    ("double", AvroType::Double),
    ("bytes", AvroType::Bytes),
    ("string", AvroType::String),
];

/// Parses an Avro schema from its JSON text.
pub fn parse(text: &str) -> crate::Result<AvroSchema> {
    parse_text(text).map_err(crate::RegistryError::InvalidSchema)
}

fn parse_text(text: &str) -> Result<AvroSchema, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut p = Parser { types: Vec::new(), names: BTreeMap::new(), items: 0 };
    let root = p.parse(&json, "", 0)?;
    Ok(AvroSchema { types: p.types, root })
}

struct Parser {
    types: Vec<AvroType>,
    /// Full name of every named type defined so far -> its index.
    names: BTreeMap<String, usize>,
    /// Named types, fields and symbols declared so far ([`SCHEMA_ITEMS_MAX`]).
    items: usize,
}

impl Parser {
    fn push(&mut self, t: AvroType) -> usize {
        self.types.push(t);
        self.types.len() - 1
    }

    fn count(&mut self, n: usize) -> Result<(), String> {
        self.items += n;
        if self.items > SCHEMA_ITEMS_MAX {
            return Err(format!("more than {SCHEMA_ITEMS_MAX} types, fields and symbols"));
        }
        Ok(())
    }

    fn parse(&mut self, json: &Value, namespace: &str, depth: usize) -> Result<usize, String> {
        if depth > SCHEMA_DEPTH_MAX {
            return Err(format!("nested deeper than {SCHEMA_DEPTH_MAX} levels"));
        }
        match json {
            Value::String(name) => self.reference(name, namespace),
            Value::Array(branches) => self.union(branches, namespace, depth),
            Value::Object(o) => {
                let ty = o.get("type").ok_or("a schema object without \"type\"")?;
                let Value::String(kind) = ty else {
                    // {"type": {...}} or {"type": [...]}: the attributes wrap another schema.
                    return self.parse(ty, namespace, depth + 1);
                };
                match kind.as_str() {
                    "record" | "error" => self.record(o, namespace, depth),
                    "enum" => self.enumeration(o, namespace),
                    "fixed" => self.fixed(o, namespace),
                    "array" => {
                        let items = o.get("items").ok_or("an array without \"items\"")?;
                        let items = self.parse(items, namespace, depth + 1)?;
                        Ok(self.push(AvroType::Array(items)))
                    }
                    "map" => {
                        let values = o.get("values").ok_or("a map without \"values\"")?;
                        let values = self.parse(values, namespace, depth + 1)?;
                        Ok(self.push(AvroType::Map(values)))
                    }
                    other => self.reference(other, namespace),
                }
            }
            other => Err(format!("not a schema: {other}")),
        }
    }

    fn reference(&mut self, name: &str, namespace: &str) -> Result<usize, String> {
        if let Some((_, t)) = PRIMITIVES.iter().find(|(n, _)| *n == name) {
            return Ok(self.push(t.clone()));
        }
        let full = full_name(name, namespace);
        (self.names.get(&full).or_else(|| self.names.get(name)))
            .copied()
            .ok_or_else(|| format!("unknown type {name:?} (a named type is defined before use)"))
    }

    fn union(&mut self, branches: &[Value], ns: &str, depth: usize) -> Result<usize, String> {
        let mut out = Vec::with_capacity(branches.len());
        let mut seen = HashSet::new();
        for b in branches {
            let i = self.parse(b, ns, depth + 1)?;
            let key = match &self.types[i] {
                AvroType::Union(_) => return Err("a union directly inside a union".into()),
                AvroType::Record { name, .. }
                | AvroType::Enum { name, .. }
                | AvroType::Fixed { name, .. } => name.clone(),
                other => kind_name(other).to_string(),
            };
            if !seen.insert(key.clone()) {
                return Err(format!("a union holds {key} twice"));
            }
            out.push(i);
        }
        Ok(self.push(AvroType::Union(out)))
    }

    /// The full name a named type's definition declares (checked and not yet taken), and
    /// the namespace its members resolve names in.
    fn declare(
        &mut self,
        o: &serde_json::Map<String, Value>,
        namespace: &str,
    ) -> Result<(String, Vec<String>, String), String> {
        let name = o.get("name").and_then(Value::as_str).ok_or("a named type without \"name\"")?;
        let ns = match o.get("namespace") {
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Null) | None => namespace,
            Some(other) => return Err(format!("a namespace that is not a string: {other}")),
        };
        let full = full_name(name, ns);
        for part in full.split('.') {
            if !valid_name(part) {
                return Err(format!("invalid name {full:?}"));
            }
        }
        if PRIMITIVES.iter().any(|(n, _)| *n == full) {
            return Err(format!("{full:?} redefines a primitive type"));
        }
        if self.names.contains_key(&full) {
            return Err(format!("{full:?} is defined twice"));
        }
        let own_ns = full.rsplit_once('.').map_or("", |(n, _)| n).to_string();
        let aliases = strings(o.get("aliases"), "aliases")?
            .into_iter()
            .map(|a| full_name(&a, &own_ns))
            .collect();
        self.count(1)?;
        Ok((full, aliases, own_ns))
    }

    fn record(
        &mut self,
        o: &serde_json::Map<String, Value>,
        namespace: &str,
        depth: usize,
    ) -> Result<usize, String> {
        let (name, aliases, ns) = self.declare(o, namespace)?;
        // Defined before its fields are parsed: a field may refer to the record itself.
        let at = self.push(AvroType::Record { name: name.clone(), aliases, fields: vec![] });
        self.names.insert(name.clone(), at);
        let Some(Value::Array(fields)) = o.get("fields") else {
            return Err(format!("record {name:?} without a \"fields\" array"));
        };
        self.count(fields.len())?;
        let mut parsed = Vec::with_capacity(fields.len());
        for f in fields {
            let Value::Object(f) = f else { return Err(format!("a field of {name:?}: {f}")) };
            let fname = f.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
            if !valid_name(fname) {
                return Err(format!("invalid field name {fname:?} in {name:?}"));
            }
            if parsed.iter().any(|p: &AvroField| p.name == fname) {
                return Err(format!("field {fname:?} twice in {name:?}"));
            }
            let ty = f.get("type").ok_or_else(|| format!("field {fname:?} without a type"))?;
            let ty = self.parse(ty, &ns, depth + 1)?;
            let default = f.get("default");
            if let Some(d) = default
                && !self.default_fits(ty, d, 0)
            {
                return Err(format!(
                    "the default of field {fname:?} in {name:?} is not a {}",
                    kind_name(&self.types[ty])
                ));
            }
            let aliases = strings(f.get("aliases"), "aliases")?;
            parsed.push(AvroField {
                name: fname.into(),
                aliases,
                ty,
                has_default: default.is_some(),
            });
        }
        if let AvroType::Record { fields, .. } = &mut self.types[at] {
            *fields = parsed;
        }
        Ok(at)
    }

    fn enumeration(
        &mut self,
        o: &serde_json::Map<String, Value>,
        namespace: &str,
    ) -> Result<usize, String> {
        let (name, aliases, _) = self.declare(o, namespace)?;
        let symbols = strings(o.get("symbols"), "symbols")?;
        self.count(symbols.len())?;
        let mut seen = HashSet::new();
        for s in &symbols {
            if !valid_name(s) || !seen.insert(s) {
                return Err(format!("enum {name:?}: symbol {s:?} is invalid or twice"));
            }
        }
        let default = match o.get("default") {
            None => None,
            Some(Value::String(d)) if symbols.contains(d) => Some(d.clone()),
            Some(d) => return Err(format!("enum {name:?}: default {d} is not one of its symbols")),
        };
        let at = self.push(AvroType::Enum { name: name.clone(), aliases, symbols, default });
        self.names.insert(name, at);
        Ok(at)
    }

    fn fixed(&mut self, o: &serde_json::Map<String, Value>, ns: &str) -> Result<usize, String> {
        let (name, aliases, _) = self.declare(o, ns)?;
        let size = o.get("size").and_then(Value::as_u64);
        let size = size.ok_or_else(|| format!("fixed {name:?} without a size"))?;
        let at = self.push(AvroType::Fixed { name: name.clone(), aliases, size });
        self.names.insert(name, at);
        Ok(at)
    }

    /// Whether `d` is a valid default for type `ty` (a union's default is of its first
    /// branch).
    fn default_fits(&self, ty: usize, d: &Value, depth: usize) -> bool {
        if depth > SCHEMA_DEPTH_MAX {
            return false;
        }
        match &self.types[ty] {
            AvroType::Null => d.is_null(),
            AvroType::Boolean => d.is_boolean(),
            AvroType::Int | AvroType::Long => d.is_i64() || d.is_u64(),
            AvroType::Float | AvroType::Double => d.is_number(),
            AvroType::Bytes | AvroType::String | AvroType::Fixed { .. } => d.is_string(),
            AvroType::Enum { symbols, .. } => {
                d.as_str().is_some_and(|s| symbols.iter().any(|x| x == s))
            }
            AvroType::Array(items) => d
                .as_array()
                .is_some_and(|a| a.iter().all(|v| self.default_fits(*items, v, depth + 1))),
            AvroType::Map(values) => d
                .as_object()
                .is_some_and(|m| m.values().all(|v| self.default_fits(*values, v, depth + 1))),
            AvroType::Union(branches) => {
                branches.first().is_some_and(|b| self.default_fits(*b, d, depth + 1))
            }
            // A record's default is an object; its fields' defaults are checked where the
            // fields are (a recursive record's default could be infinite otherwise).
            AvroType::Record { .. } => d.is_object(),
        }
    }
}

fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str().map(str::to_string).ok_or_else(|| format!("{what}: {s} is not a string"))
            })
            .collect(),
        Some(other) => Err(format!("{what} is not an array: {other}")),
    }
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}.{name}")
    }
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn kind_name(t: &AvroType) -> &'static str {
    match t {
        AvroType::Null => "null",
        AvroType::Boolean => "boolean",
        AvroType::Int => "int",
        AvroType::Long => "long",
        AvroType::Float => "float",
        AvroType::Double => "double",
        AvroType::Bytes => "bytes",
        AvroType::String => "string",
        AvroType::Record { .. } => "record",
        AvroType::Enum { .. } => "enum",
        AvroType::Fixed { .. } => "fixed",
        AvroType::Array(_) => "array",
        AvroType::Map(_) => "map",
        AvroType::Union(_) => "union",
    }
}

/// Why data written with `writer` cannot be read with `reader`: empty when it can.
pub fn incompatibilities(reader: &AvroSchema, writer: &AvroSchema) -> Vec<String> {
    let mut c = Check { reader, writer, assumed: HashSet::new(), why: Vec::new() };
    c.can_read(reader.root, writer.root, "/", 0);
    c.why
}

struct Check<'a> {
    reader: &'a AvroSchema,
    writer: &'a AvroSchema,
    /// Named pairs being compared further up: a recursive type is assumed to match itself.
    assumed: HashSet<(usize, usize)>,
    why: Vec<String>,
}

impl Check<'_> {
    fn can_read(&mut self, r: usize, w: usize, at: &str, depth: usize) -> bool {
        use AvroType as T;
        if depth > SCHEMA_DEPTH_MAX {
            self.why.push(format!("{at}: nested deeper than {SCHEMA_DEPTH_MAX} levels"));
            return false;
        }
        let (rt, wt) = (&self.reader.types[r], &self.writer.types[w]);
        if let T::Union(branches) = wt {
            let mut ok = true;
            for (i, b) in branches.iter().enumerate() {
                ok &= self.can_read(r, *b, &format!("{at}union branch {i}/"), depth + 1);
            }
            return ok;
        }
        let ok = match (rt, wt) {
            (T::Union(branches), _) => {
                let found = branches.iter().any(|b| {
                    let mut probe = Check {
                        reader: self.reader,
                        writer: self.writer,
                        assumed: self.assumed.clone(),
                        why: Vec::new(),
                    };
                    probe.can_read(*b, w, at, depth + 1)
                });
                if !found {
                    self.why.push(format!(
                        "{at}: the reader's union has no branch for the writer's {}",
                        kind_name(wt)
                    ));
                }
                return found;
            }
            (T::Null, T::Null)
            | (T::Boolean, T::Boolean)
            | (T::Int, T::Int)
            | (T::Long, T::Long | T::Int)
            | (T::Float, T::Float | T::Long | T::Int)
            | (T::Double, T::Double | T::Float | T::Long | T::Int)
            | (T::Bytes, T::Bytes | T::String)
            | (T::String, T::String | T::Bytes) => true,
            (T::Array(ri), T::Array(wi)) => {
                return self.can_read(*ri, *wi, &format!("{at}items/"), depth + 1);
            }
            (T::Map(rv), T::Map(wv)) => {
                return self.can_read(*rv, *wv, &format!("{at}values/"), depth + 1);
            }
            (T::Fixed { name: rn, aliases, size: rs }, T::Fixed { name: wn, size: ws, .. }) => {
                if !names_match(rn, aliases, wn) {
                    self.why.push(format!("{at}: fixed {wn} is read as {rn}"));
                    return false;
                }
                if rs != ws {
                    self.why.push(format!("{at}: fixed {rn} has size {ws}, read as {rs}"));
                    return false;
                }
                true
            }
            (
                T::Enum { name: rn, aliases, symbols: rsym, default },
                T::Enum { name: wn, symbols: wsym, .. },
            ) => {
                if !names_match(rn, aliases, wn) {
                    self.why.push(format!("{at}: enum {wn} is read as {rn}"));
                    return false;
                }
                let missing: Vec<_> = wsym.iter().filter(|s| !rsym.contains(s)).collect();
                if !missing.is_empty() && default.is_none() {
                    self.why.push(format!(
                        "{at}: enum {rn} lacks symbols {missing:?} and has no default"
                    ));
                    return false;
                }
                true
            }
            (T::Record { .. }, T::Record { .. }) => return self.records(r, w, at, depth),
            _ => false,
        };
        if !ok {
            self.why.push(format!(
                "{at}: the writer's {} cannot be read as {}",
                kind_name(wt),
                kind_name(rt)
            ));
        }
        ok
    }
}

impl Check<'_> {
    /// Records `r` (reader) and `w` (writer): same name, each reader field read from the
    /// writer's or from its default.
    fn records(&mut self, r: usize, w: usize, at: &str, depth: usize) -> bool {
        let (reader, writer) = (self.reader, self.writer);
        let (
            AvroType::Record { name: rn, aliases, fields: rf },
            AvroType::Record { name: wn, fields: wf, .. },
        ) = (&reader.types[r], &writer.types[w])
        else {
            unreachable!("called with two records");
        };
        if !names_match(rn, aliases, wn) {
            self.why.push(format!("{at}: record {wn} is read as {rn}"));
            return false;
        }
        if !self.assumed.insert((r, w)) {
            return true;
        }
        let mut ok = true;
        for f in rf {
            let written = wf
                .iter()
                .find(|x| x.name == f.name)
                .or_else(|| wf.iter().find(|x| f.aliases.contains(&x.name)));
            match written {
                Some(x) => ok &= self.can_read(f.ty, x.ty, &format!("{at}{}/", f.name), depth + 1),
                None if f.has_default => {}
                None => {
                    self.why.push(format!(
                        "{at}{}: a new field without a default (data written without it cannot \
                         be read)",
                        f.name
                    ));
                    ok = false;
                }
            }
        }
        ok
    }
}

fn names_match(reader: &str, reader_aliases: &[String], writer: &str) -> bool {
    let unqualified = |n: &str| n.rsplit('.').next().unwrap_or(n).to_string();
    reader == writer
        || reader_aliases.iter().any(|a| a == writer)
        || unqualified(reader) == unqualified(writer)
}

/// The schema in a canonical text: the JSON with sorted keys and no spaces, a primitive
/// written as `{"type": "int"}` as `"int"`. Two texts with the same canonical form are the
/// same schema (one id).
pub fn canonical(text: &str) -> crate::Result<String> {
    let json: Value = serde_json::from_str(text)
        .map_err(|e| crate::RegistryError::InvalidSchema(format!("not JSON: {e}")))?;
    Ok(collapse(json).to_string())
}

fn collapse(v: Value) -> Value {
    match v {
        Value::Object(o) => {
            if o.len() == 1
                && let Some(Value::String(t)) = o.get("type")
                && PRIMITIVES.iter().any(|(n, _)| n == t)
            {
                return Value::String(t.clone());
            }
            Value::Object(o.into_iter().map(|(k, v)| (k, collapse(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(collapse).collect()),
        other => other,
    }
}

/// Decodes Avro binary `data` written with `schema` into JSON (records as objects, enums as
/// their symbols, unions as the branch's value, bytes and fixed as `0x` hex). Lengths are
/// checked against what is left, so damaged data is an error, never a panic or a huge
/// allocation.
pub fn decode(schema: &AvroSchema, data: &[u8]) -> crate::Result<Value> {
    let mut rest = data;
    let bad =
        |why: String| crate::RegistryError::BadRequest(format!("not Avro of its schema: {why}"));
    let v = decode_one(schema, schema.root, &mut rest, 0).map_err(bad)?;
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after the value", rest.len())));
    }
    Ok(v)
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if n > b.len() {
        return Err(format!("{n} bytes wanted, {} left", b.len()));
    }
    let (head, tail) = b.split_at(n);
    *b = tail;
    Ok(head)
}

fn long(b: &mut &[u8]) -> Result<i64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = take(b, 1)?[0];
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes".into())
}

fn length(b: &mut &[u8]) -> Result<usize, String> {
    let n = long(b)?;
    usize::try_from(n).ok().filter(|n| *n <= b.len()).ok_or_else(|| format!("length {n}"))
}

fn hex(b: &[u8]) -> Value {
    Value::String(format!("0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
}

fn decode_one(s: &AvroSchema, t: usize, b: &mut &[u8], depth: usize) -> Result<Value, String> {
    use AvroType as T;
    if depth > SCHEMA_DEPTH_MAX {
        return Err(format!("nested deeper than {SCHEMA_DEPTH_MAX} levels"));
    }
    Ok(match &s.types[t] {
        T::Null => Value::Null,
        T::Boolean => Value::Bool(take(b, 1)?[0] != 0),
        T::Int | T::Long => Value::from(long(b)?),
        T::Float => {
            let x = f32::from_le_bytes(take(b, 4)?.try_into().expect("4 bytes"));
            serde_json::Number::from_f64(f64::from(x)).map_or(Value::Null, Value::Number)
        }
        T::Double => {
            let x = f64::from_le_bytes(take(b, 8)?.try_into().expect("8 bytes"));
            serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
        }
        T::Bytes => {
            let n = length(b)?;
            hex(take(b, n)?)
        }
        T::String => {
            let n = length(b)?;
            Value::String(String::from_utf8_lossy(take(b, n)?).into_owned())
        }
        T::Fixed { size, .. } => hex(take(b, usize::try_from(*size).map_err(|_| "size")?)?),
        T::Enum { symbols, .. } => {
            let i = long(b)?;
            let sym = usize::try_from(i).ok().and_then(|i| symbols.get(i));
            Value::String(sym.ok_or_else(|| format!("enum index {i}"))?.clone())
        }
        T::Union(branches) => {
            let i = long(b)?;
            let branch = usize::try_from(i).ok().and_then(|i| branches.get(i));
            decode_one(s, *branch.ok_or_else(|| format!("union index {i}"))?, b, depth + 1)?
        }
        T::Record { fields, .. } => {
            let mut o = serde_json::Map::new();
            for f in fields {
                o.insert(f.name.clone(), decode_one(s, f.ty, b, depth + 1)?);
            }
            Value::Object(o)
        }
        T::Array(items) => Value::Array(blocks(b, |b| decode_one(s, *items, b, depth + 1))?),
        T::Map(values) => {
            let pairs = blocks(b, |b| {
                let n = length(b)?;
                let k = String::from_utf8_lossy(take(b, n)?).into_owned();
                Ok(Value::Array(vec![Value::String(k), decode_one(s, *values, b, depth + 1)?]))
            })?;
            let mut o = serde_json::Map::new();
            for p in pairs {
                if let Value::Array(mut kv) = p {
                    let v = kv.pop().unwrap_or(Value::Null);
                    if let Some(Value::String(k)) = kv.pop() {
                        o.insert(k, v);
                    }
                }
            }
            Value::Object(o)
        }
    })
}

/// An array's or map's blocks: a count (negative: followed by the block's size), then its
/// items, until a count of 0.
fn blocks(
    b: &mut &[u8],
    mut item: impl FnMut(&mut &[u8]) -> Result<Value, String>,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    loop {
        let mut n = long(b)?;
        if n == 0 {
            return Ok(out);
        }
        if n < 0 {
            n = n.checked_neg().ok_or("a block count")?;
            long(b)?; // the block's size in bytes
        }
        // Every item takes at least a byte, or none for null: never more items than bytes
        // left plus a bound.
        if n as u64 > b.len() as u64 + SCHEMA_ITEMS_MAX as u64 {
            return Err(format!("a block of {n} items with {} bytes left", b.len()));
        }
        for _ in 0..n {
            out.push(item(b)?);
            if out.len() > SCHEMA_ITEMS_MAX.max(b.len()) + SCHEMA_ITEMS_MAX {
                return Err("too many items".into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compatible(reader: &str, writer: &str) -> bool {
        incompatibilities(&parse(reader).unwrap(), &parse(writer).unwrap()).is_empty()
    }

    const USER: &str = r#"{"type":"record","name":"User","namespace":"a","fields":[
        {"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;

    #[test]
    fn a_field_added_with_a_default_reads_old_data_and_without_one_does_not() {
        let with_default = r#"{"type":"record","name":"User","namespace":"a","fields":[
            {"name":"id","type":"long"},{"name":"name","type":"string"},
            {"name":"email","type":["null","string"],"default":null}]}"#;
        let without = r#"{"type":"record","name":"User","namespace":"a","fields":[
            {"name":"id","type":"long"},{"name":"name","type":"string"},
            {"name":"email","type":"string"}]}"#;
        assert!(compatible(with_default, USER));
        assert!(!compatible(without, USER));
        // The old schema reads new data either way: it skips the field.
        assert!(compatible(USER, without));
    }

    #[test]
    fn promotions_go_one_way_and_renames_need_an_alias() {
        assert!(compatible(r#""long""#, r#""int""#));
        assert!(!compatible(r#""int""#, r#""long""#));
        assert!(compatible(r#""string""#, r#""bytes""#));
        let renamed = r#"{"type":"record","name":"User","namespace":"a","fields":[
            {"name":"id","type":"long"},{"name":"full_name","type":"string"}]}"#;
        assert!(!compatible(renamed, USER));
        let aliased = r#"{"type":"record","name":"User","namespace":"a","fields":[
            {"name":"id","type":"long"},{"name":"full_name","type":"string","aliases":["name"]}]}"#;
        assert!(compatible(aliased, USER));
    }

    #[test]
    fn enums_unions_and_recursive_records_resolve() {
        let e2 = r#"{"type":"enum","name":"E","symbols":["A","B"]}"#;
        let e1 = r#"{"type":"enum","name":"E","symbols":["A"]}"#;
        let e1d = r#"{"type":"enum","name":"E","symbols":["A","Z"],"default":"Z"}"#;
        assert!(compatible(e2, e1));
        assert!(!compatible(e1, e2));
        assert!(compatible(e1d, e2));
        assert!(compatible(r#"["null","long"]"#, r#""int""#));
        assert!(!compatible(r#""int""#, r#"["null","int"]"#));
        let list = r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},
            {"name":"next","type":["null","Node"],"default":null}]}"#;
        assert!(compatible(list, list));
    }

    #[test]
    fn invalid_schemas_are_refused_with_a_reason() {
        for (bad, why) in [
            ("{", "not JSON"),
            (r#"{"type":"record","name":"R"}"#, "fields"),
            (
                r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Nope"}]}"#,
                "unknown type",
            ),
            (r#"["int","int"]"#, "twice"),
            (r#"{"type":"enum","name":"E","symbols":["A","A"]}"#, "twice"),
            (
                r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}"#,
                "default",
            ),
            (r#"{"type":"fixed","name":"1x","size":4}"#, "invalid name"),
        ] {
            let e = parse_text(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let deep =
            format!("{}\"int\"{}", "{\"type\":\"array\",\"items\":".repeat(100), "}".repeat(100));
        assert!(parse_text(&deep).unwrap_err().contains("deeper"));
    }

    #[test]
    fn binary_records_decode_to_json_and_damaged_ones_are_errors() {
        let s = parse(
            r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"},
            {"name":"name","type":"string"},{"name":"tags","type":{"type":"array","items":"string"}},
            {"name":"email","type":["null","string"]}]}"#,
        )
        .unwrap();
        // id 3 (zigzag 6), "ab", ["x"], email branch 1 "c".
        let data = [6, 4, b'a', b'b', 2, 2, b'x', 0, 2, 2, b'c'];
        let v = decode(&s, &data).unwrap();
        assert_eq!(v.to_string(), r#"{"email":"c","id":3,"name":"ab","tags":["x"]}"#);
        assert!(decode(&s, &data[..5]).is_err(), "truncated");
        assert!(decode(&s, &[6, 0x7f]).is_err(), "a string longer than the data");
        assert!(decode(&s, &[6, 0, 1, 0]).is_err(), "an array count past the data");
    }

    #[test]
    fn the_canonical_form_ignores_spacing_key_order_and_wrapped_primitives() {
        let a = canonical(r#"{"type": "array", "items": {"type": "int"}}"#).unwrap();
        let b = canonical(r#"{"items":"int","type":"array"}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, canonical(r#"{"items":"long","type":"array"}"#).unwrap());
    }
}
