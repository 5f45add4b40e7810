//! Protobuf schemas: the `.proto` text a client registers, parsed for what compatibility
//! needs (messages with their fields' numbers, types and labels, oneofs, enums), and the
//! wire-compatibility rules: a message that readers expect may not go; a field number
//! kept keeps a type its old data decodes as (the varint types `int32`, `int64`, `uint32`,
//! `uint64`, `bool` among themselves, `sint32`/`sint64`, `fixed32`/`sfixed32`,
//! `fixed64`/`sfixed64`, `string`/`bytes`; messages and enums by name) and its label
//! (repeated or not, in a oneof or not); a new `required` field breaks. Imports are
//! refused: references between schemas are not kept yet.

use std::collections::BTreeMap;

use crate::limits::{SCHEMA_DEPTH_MAX, SCHEMA_ITEMS_MAX};

/// A parsed `.proto` file: its messages by full name, in declaration order of the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoSchema {
    pub package: String,
    /// Full name (`package.Outer.Inner`) -> the message's fields by number.
    pub messages: BTreeMap<String, BTreeMap<i64, ProtoField>>,
    /// The first message declared: the one a serializer writes.
    pub first: Option<String>,
}

/// A message field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoField {
    pub name: String,
    pub ty: String,
    pub label: String,
    pub oneof: Option<String>,
}

/// Parses `.proto` text.
pub fn parse(text: &str) -> crate::Result<ProtoSchema> {
    parse_text(text).map_err(crate::RegistryError::InvalidSchema)
}

fn parse_text(text: &str) -> Result<ProtoSchema, String> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        t: tokens,
        i: 0,
        out: ProtoSchema { package: String::new(), messages: BTreeMap::new(), first: None },
        items: 0,
    };
    while p.i < p.t.len() {
        match p.next()?.as_str() {
            "syntax" | "edition" | "option" => p.skip_statement()?,
            "package" => {
                p.out.package = p.next()?;
                p.expect(";")?;
            }
            "import" => return Err("imports (schema references) are not supported yet".into()),
            "message" => {
                let prefix = p.out.package.clone();
                p.message(&prefix, 0)?;
            }
            "enum" | "service" | "extend" => {
                p.next()?;
                p.skip_block()?;
            }
            ";" => {}
            other => return Err(format!("unexpected {other:?} at the top level")),
        }
    }
    if p.out.messages.is_empty() {
        return Err("no message declared".into());
    }
    Ok(p.out)
}

fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                loop {
                    let Some(c) = chars.next() else { return Err("an unclosed comment".into()) };
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' | '\'' => {
                let mut s = String::from(c);
                loop {
                    let Some(x) = chars.next() else { return Err("an unclosed string".into()) };
                    s.push(x);
                    if x == '\\' {
                        s.extend(chars.next());
                    } else if x == c {
                        break;
                    }
                }
                out.push(s);
            }
            c if c.is_alphanumeric() || c == '_' || c == '.' || c == '-' || c == '+' => {
                let mut s = String::from(c);
                while let Some(&x) = chars.peek() {
                    if !(x.is_alphanumeric() || x == '_' || x == '.') {
                        break;
                    }
                    s.push(x);
                    chars.next();
                }
                out.push(s);
            }
            c => out.push(c.to_string()),
        }
        if out.len() > SCHEMA_ITEMS_MAX {
            return Err(format!("more than {SCHEMA_ITEMS_MAX} tokens"));
        }
    }
    Ok(out)
}

struct Parser {
    t: Vec<String>,
    i: usize,
    out: ProtoSchema,
    items: usize,
}

impl Parser {
    fn next(&mut self) -> Result<String, String> {
        let t = self.t.get(self.i).cloned().ok_or("the text ends early")?;
        self.i += 1;
        Ok(t)
    }

    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(String::as_str)
    }

    fn expect(&mut self, what: &str) -> Result<(), String> {
        let t = self.next()?;
        if t != what {
            return Err(format!("expected {what:?}, found {t:?}"));
        }
        Ok(())
    }

    fn skip_statement(&mut self) -> Result<(), String> {
        while self.next()? != ";" {}
        Ok(())
    }

    /// Skips from an opening `{` to its closing `}`.
    fn skip_block(&mut self) -> Result<(), String> {
        while self.peek() != Some("{") {
            self.next()?;
        }
        let mut depth = 0usize;
        loop {
            match self.next()?.as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    }

    fn message(&mut self, prefix: &str, depth: usize) -> Result<(), String> {
        if depth > SCHEMA_DEPTH_MAX {
            return Err(format!("messages nested deeper than {SCHEMA_DEPTH_MAX} levels"));
        }
        let name = self.next()?;
        let full = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        if self.out.messages.contains_key(&full) {
            return Err(format!("message {full} declared twice"));
        }
        self.out.first.get_or_insert_with(|| full.clone());
        self.out.messages.insert(full.clone(), BTreeMap::new());
        self.expect("{")?;
        self.body(&full, None, depth)
    }

    fn body(&mut self, full: &str, oneof: Option<&str>, depth: usize) -> Result<(), String> {
        loop {
            let t = self.next()?;
            match t.as_str() {
                "}" => return Ok(()),
                ";" => {}
                "message" => self.message(full, depth + 1)?,
                "enum" | "extend" => {
                    self.next()?;
                    self.skip_block()?;
                }
                "option" | "reserved" | "extensions" => self.skip_statement()?,
                "oneof" => {
                    let name = self.next()?;
                    self.expect("{")?;
                    self.body(full, Some(&name), depth + 1)?;
                }
                _ => self.field(full, t, oneof)?,
            }
        }
    }

    fn field(&mut self, full: &str, first: String, oneof: Option<&str>) -> Result<(), String> {
        let (label, mut ty) = match first.as_str() {
            "repeated" | "optional" | "required" => (first.clone(), self.next()?),
            _ => (String::new(), first),
        };
        if ty == "map" {
            // map<K, V>: on the wire a repeated message of key and value.
            let mut inner = String::new();
            loop {
                let t = self.next()?;
                inner.push_str(&t);
                if t == ">" {
                    break;
                }
            }
            ty = format!("map{inner}");
        }
        let name = self.next()?;
        self.expect("=")?;
        let number = self.next()?;
        let number: i64 = number.parse().map_err(|_| format!("field {name}: number {number:?}"))?;
        if self.peek() == Some("[") {
            while self.next()? != "]" {}
        }
        self.expect(";")?;
        self.items += 1;
        if self.items > SCHEMA_ITEMS_MAX {
            return Err(format!("more than {SCHEMA_ITEMS_MAX} fields"));
        }
        let fields = self.out.messages.get_mut(full).expect("declared before its body");
        if fields.contains_key(&number) {
            return Err(format!("message {full}: field number {number} used twice"));
        }
        let field = ProtoField { name, ty, label, oneof: oneof.map(str::to_string) };
        fields.insert(number, field);
        Ok(())
    }
}

/// The text with comments and spacing taken out: its tokens, one space apart.
pub fn canonical(text: &str) -> String {
    tokenize(text).map_or_else(|_| text.to_string(), |t| t.join(" "))
}

/// The wire group a scalar type decodes within; other types (messages, enums) by name.
fn wire_group(ty: &str) -> &str {
    match ty {
        "int32" | "int64" | "uint32" | "uint64" | "bool" => "varint",
        "sint32" | "sint64" => "zigzag",
        "fixed32" | "sfixed32" => "fixed32",
        "fixed64" | "sfixed64" => "fixed64",
        "string" | "bytes" => "bytes",
        other => other.rsplit('.').next().unwrap_or(other),
    }
}

/// Why data written with `writer` cannot be read with `reader`: empty when it can.
pub fn incompatibilities(reader: &ProtoSchema, writer: &ProtoSchema) -> Vec<String> {
    let mut why = Vec::new();
    if reader.first != writer.first {
        why.push(format!(
            "the first message changed from {:?} to {:?}",
            writer.first, reader.first
        ));
    }
    for (name, wfields) in &writer.messages {
        let Some(rfields) = reader.messages.get(name) else {
            why.push(format!("message {name} was removed"));
            continue;
        };
        for (n, r) in rfields {
            let Some(w) = wfields.get(n) else {
                if r.label == "required" {
                    why.push(format!("{name}: required field {} ({n}) was added", r.name));
                }
                continue;
            };
            if wire_group(&r.ty) != wire_group(&w.ty) {
                why.push(format!("{name}: field {n} changed type from {} to {}", w.ty, r.ty));
            }
            if (r.label == "repeated") != (w.label == "repeated") {
                why.push(format!("{name}: field {n} changed between repeated and single"));
            }
            if r.oneof.is_some() != w.oneof.is_some() {
                why.push(format!("{name}: field {n} moved into or out of a oneof"));
            }
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"syntax = "proto3"; package shop;
        // An order.
        message Order { int64 id = 1; string note = 2; repeated Item items = 3;
          message Item { string sku = 1; int32 count = 2 [deprecated = true]; } }"#;

    #[test]
    fn fields_added_and_removed_keep_compatibility_and_retyped_ones_break_it() {
        let v1 = parse(V1).unwrap();
        assert_eq!(v1.first.as_deref(), Some("shop.Order"));
        assert!(v1.messages.contains_key("shop.Order.Item"));
        let added =
            parse(&V1.replace("string note = 2;", "string note = 2; bytes blob = 4;")).unwrap();
        assert!(incompatibilities(&added, &v1).is_empty());
        assert!(incompatibilities(&v1, &added).is_empty());
        let widened = parse(&V1.replace("int32 count", "int64 count")).unwrap();
        assert!(incompatibilities(&widened, &v1).is_empty());
        let retyped = parse(&V1.replace("string note = 2", "double note = 2")).unwrap();
        assert!(!incompatibilities(&retyped, &v1).is_empty());
        let repeated = parse(&V1.replace("string note = 2", "repeated string note = 2")).unwrap();
        assert!(!incompatibilities(&repeated, &v1).is_empty());
        let item = "message Item { string sku = 1; int32 count = 2 [deprecated = true]; }";
        let removed = parse(&V1.replace(item, "")).unwrap();
        let why = incompatibilities(&removed, &v1);
        assert!(why.iter().any(|w| w.contains("shop.Order.Item was removed")), "{why:?}");
    }

    #[test]
    fn broken_text_and_imports_are_refused_with_a_reason() {
        assert!(
            parse_text("message A { int32 a = 1; int32 b = 1; }").unwrap_err().contains("twice")
        );
        assert!(parse_text("message A { int32 a = ").unwrap_err().contains("ends early"));
        assert!(parse_text("import \"x.proto\"; message A {}").unwrap_err().contains("imports"));
        assert!(parse_text("syntax = \"proto3\";").unwrap_err().contains("no message"));
    }
}
