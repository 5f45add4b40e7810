//! The REST routes of Confluent's schema registry API, from a request's method, path, query
//! and body to a status and a JSON answer. Errors answer `{"error_code", "message"}` with
//! Confluent's codes (40401 subject not found, 409 incompatible, 42201 invalid schema...).
//!
//! ```text
//! GET    /subjects                          POST   /subjects/{s}          (lookup)
//! GET    /subjects/{s}/versions             POST   /subjects/{s}/versions (register)
//! GET    /subjects/{s}/versions/{v}[/schema] DELETE /subjects/{s}[/versions/{v}]
//! GET    /schemas/ids/{id}[/schema|/versions|/subjects]    GET /schemas/types
//! GET|PUT|DELETE /config[/{s}]              GET|PUT|DELETE /mode[/{s}]
//! POST   /compatibility/subjects/{s}/versions[/{v}]
//! ```
//! `{v}` is a number from 1 or `latest`; query flags: `deleted`, `permanent`, `verbose`,
//! `defaultToGlobal`.

use serde_json::{Value, json};

use crate::{Compatibility, Mode, Registry, RegistryError, Result, Schema, SchemaType};

/// The first path segments the registry answers (the rest of an HTTP port is not its own).
pub const ROOTS: &[&str] = &["subjects", "schemas", "config", "compatibility", "mode"];

/// Whether `path` is one of the registry's.
pub fn is_registry_path(path: &str) -> bool {
    let first = path.trim_start_matches('/').split(['/', '?']).next().unwrap_or("");
    ROOTS.contains(&first)
}

/// A request as the HTTP layer read it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path without its query, still percent-encoded.
    pub path: &'a str,
    /// The query without its `?`.
    pub query: &'a str,
    pub body: &'a [u8],
}

/// The answer: an HTTP status and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

/// Answers one request.
pub async fn handle(registry: &Registry, req: Request<'_>) -> Reply {
    match route(registry, req).await {
        Ok(v) => Reply { status: 200, body: v.to_string() },
        Err(e) => {
            let (status, code) = e.status_and_code();
            if status >= 500 {
                tracing::warn!(path = req.path, error = %e, "schema registry request failed");
            }
            Reply {
                status,
                body: json!({"error_code": code, "message": e.to_string()}).to_string(),
            }
        }
    }
}

async fn route(r: &Registry, req: Request<'_>) -> Result<Value> {
    let segments: Vec<String> =
        req.path.trim_matches('/').split('/').map(percent_decode).collect::<Result<_>>()?;
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let flag = |name: &str| query_flag(req.query, name);
    match (req.method, seg.as_slice()) {
        ("GET", ["subjects"]) => Ok(json!(r.subjects(flag("deleted")).await?)),
        ("POST", ["subjects", s]) => {
            let found = r.lookup(s, &schema_of(req.body)?, flag("deleted")).await?;
            Ok(registered_json(&found))
        }
        ("DELETE", ["subjects", s]) => Ok(json!(r.delete_subject(s, flag("permanent")).await?)),
        ("GET", ["subjects", s, "versions"]) => Ok(json!(r.versions(s, flag("deleted")).await?)),
        ("POST", ["subjects", s, "versions"]) => {
            let (id, _) = r.register(s, &schema_of(req.body)?).await?;
            Ok(json!({"id": id}))
        }
        ("GET", ["subjects", s, "versions", v]) => {
            Ok(registered_json(&r.version(s, version(v)?, flag("deleted")).await?))
        }
        ("GET", ["subjects", s, "versions", v, "schema"]) => {
            raw(&r.version(s, version(v)?, flag("deleted")).await?.schema)
        }
        ("GET", ["subjects", s, "versions", v, "referencedby"]) => {
            r.version(s, version(v)?, false).await?;
            Ok(json!([]))
        }
        ("DELETE", ["subjects", s, "versions", v]) => {
            Ok(json!(r.delete_version(s, version(v)?, flag("permanent")).await?))
        }
        ("GET", ["schemas", "types"]) => {
            Ok(json!(SchemaType::ALL.iter().map(|t| t.name()).collect::<Vec<_>>()))
        }
        ("GET", ["schemas", "ids", id]) => Ok(schema_json(&r.schema(schema_id(id)?).await?)),
        ("GET", ["schemas", "ids", id, "schema"]) => raw(&r.schema(schema_id(id)?).await?),
        ("GET", ["schemas", "ids", id, "versions"]) => {
            let uses = r.uses_of(schema_id(id)?).await?;
            Ok(json!(
                uses.iter().map(|(s, v)| json!({"subject": s, "version": v})).collect::<Vec<_>>()
            ))
        }
        ("GET", ["schemas", "ids", id, "subjects"]) => {
            let mut subjects: Vec<String> =
                r.uses_of(schema_id(id)?).await?.into_iter().map(|(s, _)| s).collect();
            subjects.dedup();
            Ok(json!(subjects))
        }
        (_, ["config", rest @ ..]) if rest.len() <= 1 => {
            config(r, req, rest.first().copied()).await
        }
        (_, ["mode", rest @ ..]) if rest.len() <= 1 => mode(r, req, rest.first().copied()).await,
        ("POST", ["compatibility", "subjects", s, "versions", rest @ ..]) if rest.len() <= 1 => {
            let against = match rest.first() {
                None => Some(0),
                Some(v) => version(v)?,
            };
            let why = r.check(s, against, &schema_of(req.body)?).await?;
            let mut answer = json!({"is_compatible": why.is_empty()});
            if flag("verbose") {
                answer["messages"] = json!(why);
            }
            Ok(answer)
        }
        (method, _) => Err(RegistryError::BadRequest(format!(
            "no route {method} {}: the registry answers under /{}",
            req.path,
            ROOTS.join(", /")
        ))),
    }
}

async fn config(r: &Registry, req: Request<'_>, subject: Option<&str>) -> Result<Value> {
    match req.method {
        "GET" => {
            let level = match subject {
                Some(s) if !query_flag(req.query, "defaultToGlobal") => {
                    r.own_compatibility(Some(s)).await?.ok_or_else(|| {
                        RegistryError::SubjectNotFound(format!("{s}' has no compatibility level of its own; see /config or ?defaultToGlobal=true, subject '{s}"))
                    })?
                }
                _ => r.compatibility(subject).await?,
            };
            Ok(json!({"compatibilityLevel": level.name()}))
        }
        "PUT" => {
            let body = object(req.body)?;
            let name = body["compatibility"].as_str().ok_or_else(|| {
                RegistryError::BadRequest("the body names no \"compatibility\"".into())
            })?;
            let level = Compatibility::parse(name)?;
            r.set_compatibility(subject, level).await?;
            Ok(json!({"compatibility": level.name()}))
        }
        "DELETE" => {
            Ok(json!({"compatibilityLevel": r.delete_compatibility(subject).await?.name()}))
        }
        m => Err(RegistryError::BadRequest(format!("{m} /config: use GET, PUT or DELETE"))),
    }
}

async fn mode(r: &Registry, req: Request<'_>, subject: Option<&str>) -> Result<Value> {
    match req.method {
        "GET" => Ok(json!({"mode": r.mode(subject).await?.name()})),
        "PUT" => {
            let body = object(req.body)?;
            let name = body["mode"]
                .as_str()
                .ok_or_else(|| RegistryError::BadRequest("the body names no \"mode\"".into()))?;
            let mode = Mode::parse(name)?;
            r.set_mode(subject, mode).await?;
            Ok(json!({"mode": mode.name()}))
        }
        "DELETE" => Ok(json!({"mode": r.delete_mode(subject).await?.name()})),
        m => Err(RegistryError::BadRequest(format!("{m} /mode: use GET, PUT or DELETE"))),
    }
}

fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(RegistryError::BadRequest("the body is not a JSON object".into())),
        Err(e) => Err(RegistryError::BadRequest(format!("the body is not JSON: {e}"))),
    }
}

/// The schema a register, lookup or compatibility body holds.
fn schema_of(body: &[u8]) -> Result<Schema> {
    let o = object(body)?;
    let text = o.get("schema").and_then(Value::as_str).ok_or_else(|| {
        RegistryError::InvalidSchema("the body holds no \"schema\" string".into())
    })?;
    match o.get("references") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => {
            return Err(RegistryError::InvalidSchema(
                "schema references are not supported yet: register the schema whole".into(),
            ));
        }
    }
    let ty = SchemaType::parse(o.get("schemaType").and_then(Value::as_str))?;
    Ok(Schema { ty, text: text.to_string() })
}

fn schema_json(s: &Schema) -> Value {
    let mut v = json!({"schema": s.text});
    if s.ty != SchemaType::Avro {
        v["schemaType"] = json!(s.ty.name());
    }
    v
}

fn registered_json(r: &crate::Registered) -> Value {
    let mut v = schema_json(&r.schema);
    v["subject"] = json!(r.subject);
    v["version"] = json!(r.version);
    v["id"] = json!(r.id);
    if r.deleted {
        v["deleted"] = json!(true);
    }
    v
}

/// A schema's text as the answer itself (Avro and JSON Schema are JSON already).
fn raw(s: &Schema) -> Result<Value> {
    Ok(serde_json::from_str(&s.text).unwrap_or_else(|_| Value::String(s.text.clone())))
}

fn version(v: &str) -> Result<Option<u32>> {
    match v {
        "latest" | "-1" => Ok(None),
        n => match n.parse::<u32>() {
            Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(Some(n)),
            _ => Err(RegistryError::InvalidVersion(v.to_string())),
        },
    }
}

fn schema_id(id: &str) -> Result<u64> {
    id.parse().map_err(|_| RegistryError::SchemaNotFound(id.to_string()))
}

fn query_flag(query: &str, name: &str) -> bool {
    query.split('&').any(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, "true"));
        k == name && v.eq_ignore_ascii_case("true")
    })
}

fn percent_decode(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let b =
                hex.ok_or_else(|| RegistryError::BadRequest(format!("a bad escape in {s:?}")))?;
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| RegistryError::BadRequest(format!("{s:?} is not UTF-8")))
}
