//! JSON Schema: a schema is JSON (an object or a boolean); compatibility is "the reader
//! accepts every document the writer accepts", checked over the keywords that narrow a
//! schema: `type`, `enum`/`const`, bounds (`minimum`, `maxLength`, `minItems`...),
//! `pattern`, `required`, `properties` with `additionalProperties` (the content model),
//! `items`. Keywords that combine schemas (`allOf`, `anyOf`, `oneOf`, `not`, `$ref`, `if`)
//! are compared as text: a change to them is reported as incompatible, never let through.

use serde_json::{Map, Value};

use crate::limits::SCHEMA_DEPTH_MAX;

/// Parses a JSON Schema: JSON whose root is an object or a boolean.
pub fn parse(text: &str) -> crate::Result<Value> {
    parse_text(text).map_err(crate::RegistryError::InvalidSchema)
}

fn parse_text(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if !(v.is_object() || v.is_boolean()) {
        return Err("a JSON Schema is an object or a boolean".into());
    }
    check_depth(&v, 0)?;
    Ok(v)
}

fn check_depth(v: &Value, depth: usize) -> Result<(), String> {
    if depth > SCHEMA_DEPTH_MAX {
        return Err(format!("nested deeper than {SCHEMA_DEPTH_MAX} levels"));
    }
    match v {
        Value::Object(o) => o.values().try_for_each(|x| check_depth(x, depth + 1)),
        Value::Array(a) => a.iter().try_for_each(|x| check_depth(x, depth + 1)),
        _ => Ok(()),
    }
}

/// Why some document the writer accepts would be refused by the reader: empty when none.
pub fn incompatibilities(reader: &Value, writer: &Value) -> Vec<String> {
    let mut why = Vec::new();
    accepts_all(reader, writer, "#", &mut why);
    why
}

const COMBINATORS: &[&str] = &["allOf", "anyOf", "oneOf", "not", "$ref", "if", "then", "else"];
/// Lower bounds: a reader's must not be above the writer's.
const LOWER: &[&str] = &["minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"];
/// Upper bounds: a reader's must not be below the writer's.
const UPPER: &[&str] = &["maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"];

fn accepts_all(r: &Value, w: &Value, at: &str, why: &mut Vec<String>) {
    let (r, w) = match (r, w) {
        (Value::Bool(true), _) | (_, Value::Bool(false)) => return,
        (Value::Bool(false), _) => return why.push(format!("{at}: the reader accepts nothing")),
        (Value::Object(r), Value::Object(w)) => (r, w),
        (Value::Object(r), _) if r.is_empty() => return,
        (Value::Object(_), _) => {
            return why.push(format!("{at}: the reader constrains what the writer left open"));
        }
        _ => return why.push(format!("{at}: not a schema")),
    };
    for k in COMBINATORS {
        if r.get(*k) != w.get(*k) {
            why.push(format!("{at}: {k} changed (compared only as text)"));
        }
    }
    if let Some(rt) = types(r) {
        match types(w) {
            None => why.push(format!("{at}: the reader allows only {rt:?}, the writer any type")),
            Some(wt) => {
                // Every integer is a number.
                let reads = |t: &String| {
                    rt.contains(t) || (t == "integer" && rt.iter().any(|r| r == "number"))
                };
                for t in wt.iter().filter(|t| !reads(t)) {
                    why.push(format!(
                        "{at}: the writer's {t} is not among the reader's types {rt:?}"
                    ));
                }
            }
        }
    }
    for k in ["enum", "const"] {
        if let Some(rv) = r.get(k) {
            let allowed = |v: &Value| {
                if k == "enum" { rv.as_array().is_some_and(|a| a.contains(v)) } else { v == rv }
            };
            let written: Vec<&Value> = match (w.get("enum"), w.get("const")) {
                (Some(Value::Array(a)), _) => a.iter().collect(),
                (_, Some(c)) => vec![c],
                _ => {
                    why.push(format!("{at}: the reader adds {k}"));
                    continue;
                }
            };
            if let Some(v) = written.into_iter().find(|v| !allowed(v)) {
                why.push(format!("{at}: {v} is no longer allowed ({k})"));
            }
        }
    }
    bounds(r, w, at, why);
    if r.get("pattern").is_some() && r.get("pattern") != w.get("pattern") {
        why.push(format!("{at}: pattern added or changed"));
    }
    object(r, w, at, why);
    match (r.get("items"), w.get("items")) {
        (Some(ri), Some(wi)) => accepts_all(ri, wi, &format!("{at}/items"), why),
        (Some(ri), None) => accepts_all(ri, &Value::Bool(true), &format!("{at}/items"), why),
        _ => {}
    }
}

fn types(o: &Map<String, Value>) -> Option<Vec<String>> {
    match o.get("type")? {
        Value::String(t) => Some(vec![t.clone()]),
        Value::Array(a) => Some(a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect()),
        _ => None,
    }
}

fn bounds(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, why: &mut Vec<String>) {
    let num = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_f64);
    for (keys, tighter) in [(LOWER, true), (UPPER, false)] {
        for k in keys {
            let Some(rb) = num(r, k) else { continue };
            match num(w, k) {
                None => why.push(format!("{at}: {k} {rb} added")),
                Some(wb) if (tighter && rb > wb) || (!tighter && rb < wb) => {
                    why.push(format!("{at}: {k} went from {wb} to {rb}"));
                }
                Some(_) => {}
            }
        }
    }
}

fn object(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, why: &mut Vec<String>) {
    let empty = Map::new();
    let props = |o: &'_ Map<String, Value>| -> Map<String, Value> {
        o.get("properties").and_then(Value::as_object).unwrap_or(&empty).clone()
    };
    let (rp, wp) = (props(r), props(w));
    let open = Value::Bool(true);
    let (ra, wa) = (
        r.get("additionalProperties").unwrap_or(&open),
        w.get("additionalProperties").unwrap_or(&open),
    );
    let required = |o: &Map<String, Value>| -> Vec<String> {
        o.get("required")
            .and_then(Value::as_array)
            .map_or(vec![], |a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
    };
    let wreq = required(w);
    for p in required(r).into_iter().filter(|p| !wreq.contains(p)) {
        why.push(format!("{at}: property {p:?} is now required"));
    }
    for (name, rs) in &rp {
        let here = format!("{at}/properties/{name}");
        match wp.get(name) {
            Some(ws) => accepts_all(rs, ws, &here, why),
            // The writer may have written anything its additionalProperties allow.
            None => accepts_all(rs, wa, &here, why),
        }
    }
    for (name, ws) in wp.iter().filter(|(n, _)| !rp.contains_key(*n)) {
        accepts_all(ra, ws, &format!("{at}/properties/{name} (removed)"), why);
    }
    if !rp.is_empty() || !wp.is_empty() || r.contains_key("additionalProperties") {
        accepts_all(ra, wa, &format!("{at}/additionalProperties"), why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compatible(r: &str, w: &str) -> bool {
        incompatibilities(&parse(r).unwrap(), &parse(w).unwrap()).is_empty()
    }

    #[test]
    fn a_new_required_property_and_a_narrowed_type_break_and_an_optional_one_does_not() {
        // A closed writer wrote no other property, so a new optional one reads all it wrote;
        // an open writer may have written "email" as anything (Confluent's
        // PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL).
        let old = r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
            "additionalProperties":false}"#;
        let open = r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#;
        let optional = r#"{"type":"object","properties":{"id":{"type":"integer"},
            "email":{"type":"string"}},"required":["id"]}"#;
        assert!(!compatible(optional, open));
        let required = r#"{"type":"object","properties":{"id":{"type":"integer"},
            "email":{"type":"string"}},"required":["id","email"]}"#;
        let narrowed = r#"{"type":"object","properties":{"id":{"type":"string"}}}"#;
        let widened = r#"{"type":"object","properties":{"id":{"type":"number"}}}"#;
        assert!(compatible(optional, old));
        assert!(!compatible(required, old));
        assert!(!compatible(narrowed, old));
        assert!(compatible(widened, old));
        assert!(!compatible(open, widened));
    }

    #[test]
    fn a_closed_content_model_refuses_what_an_open_one_wrote() {
        let open = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
        let closed = r#"{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}"#;
        assert!(!compatible(closed, open));
        assert!(compatible(open, closed));
        assert!(!compatible(r#"{"maxLength":5}"#, r#"{"maxLength":10}"#));
        assert!(compatible(r#"{"enum":["a","b"]}"#, r#"{"enum":["a"]}"#));
        assert!(parse("[1]").is_err());
    }
}
