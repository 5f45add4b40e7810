//! Kafka ACLs: who may do what to which resource, stored in the metadata store and cached
//! on every broker with a watch.
//!
//! A binding is (resource type, pattern type, resource name, principal, host, operation,
//! permission), Kafka's codes throughout. The bindings of one resource pattern are one key,
//! `<root>/acls/<type code>/<pattern code>/<name>`, one binding per line
//! (`principal TAB host TAB operation TAB permission`), changed by compare-and-set.
//!
//! [`Acls::authorize`] is Kafka's `StandardAuthorizer`: super users may do everything; a
//! matching DENY wins; an ALLOW of the operation, of ALL, or for DESCRIBE of READ, WRITE,
//! DELETE or ALTER (for DESCRIBE_CONFIGS of ALTER_CONFIGS) allows; with no binding on the
//! resource at all `allow.everyone.if.no.acl.found` decides (default: refuse). A binding
//! matches a resource when its name is the resource's (LITERAL), `*` (LITERAL, every
//! resource of the type) or a prefix of it (PREFIXED); its principal is the session's or
//! `User:*`; its host the session's address or `*`.

use std::sync::{Arc, RwLock};

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::{Expect, MetaError, MetadataStore, list_all};
use folio_proto::InvalidConfig;

pub use crate::limits::ACL_FIELD_BYTES_MAX;
pub use crate::limits::BINDINGS_PER_RESOURCE_MAX;

/// Who is on a connection, and through which listener.
#[derive(Debug, Clone)]
pub struct Session {
    /// The listener's name.
    pub listener: Arc<str>,
    /// Kafka's principal: `User:<name>` after SASL, `User:<subject>` with a client
    /// certificate, else `User:ANONYMOUS`.
    pub principal: Arc<str>,
    /// The client's IP address (ACL bindings name hosts).
    pub host: Arc<str>,
}

impl Session {
    /// An unauthenticated connection on `listener` from `host`.
    pub fn anonymous(listener: Arc<str>, host: Arc<str>) -> Session {
        Session { listener, principal: ANONYMOUS.into(), host }
    }
}

/// The principal of a connection nobody authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

macro_rules! kafka_enum {
    ($(#[$m:meta])* $name:ident { $($v:ident = $code:literal => $text:literal),* $(,)? }) => {
        $(#[$m])*
        ///
        /// Kafka's codes and names (`code`, `from_code`, `name`, `parse`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($v),* }

        impl $name {
            /// Kafka's code.
            pub fn code(self) -> i8 {
                match self { $($name::$v => $code),* }
            }

            /// The value of a Kafka code.
            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$v),)* _ => None }
            }

            /// Kafka's name (`Topic`, `Read`, …), as `kafka-acls` prints it.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $text),* }
            }

            /// The value named `s` (case-insensitive, `_` optional).
            pub fn parse(s: &str) -> Option<$name> {
                let want = s.replace(['_', '-'], "").to_ascii_lowercase();
                [$($name::$v),*].into_iter().find(|v| v.name().replace('_', "").to_ascii_lowercase() == want)
            }
        }
    };
}

kafka_enum!(
    /// What a binding is about.
    ResourceType { Topic = 2 => "Topic", Group = 3 => "Group", Cluster = 4 => "Cluster", TransactionalId = 5 => "TransactionalId" }
);
kafka_enum!(
    /// How a binding's name matches.
    PatternType { Literal = 3 => "Literal", Prefixed = 4 => "Prefixed" }
);
kafka_enum!(
    /// What a principal does.
    Operation {
        All = 2 => "All", Read = 3 => "Read", Write = 4 => "Write", Create = 5 => "Create",
        Delete = 6 => "Delete", Alter = 7 => "Alter", Describe = 8 => "Describe",
        ClusterAction = 9 => "ClusterAction", DescribeConfigs = 10 => "DescribeConfigs",
        AlterConfigs = 11 => "AlterConfigs", IdempotentWrite = 12 => "IdempotentWrite",
    }
);
kafka_enum!(
    /// Allow or deny.
    Permission { Deny = 2 => "Deny", Allow = 3 => "Allow" }
);

/// Kafka's filter codes for "any" and "match" (DescribeAcls, DeleteAcls).
pub const FILTER_ANY: i8 = 1;
/// A pattern-type filter that matches every pattern naming the resource.
pub const FILTER_MATCH: i8 = 2;
/// The one cluster resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One ACL binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub pattern: PatternType,
    pub name: String,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// A binding's host other than `*`: one address or a CIDR block (KIP-1276), IPv4-mapped
/// IPv6 addresses (`::ffff:10.0.0.1`) taken as the IPv4 address they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostPattern {
    V4 { net: u32, prefix: u32 },
    V6 { net: u128, prefix: u32 },
}

impl HostPattern {
    /// `addr` or `addr/prefix`; `None` if it is neither.
    fn parse(s: &str) -> Option<HostPattern> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u32>().ok()?)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = addr.parse().ok()?;
        // A mapped address with a prefix counts the mapped form's bits (96 + the IPv4 ones).
        let (addr, prefix) = match (addr, prefix) {
            (std::net::IpAddr::V6(v6), Some(p)) if v6.to_ipv4_mapped().is_some() && p >= 96 => {
                (std::net::IpAddr::V4(v6.to_ipv4_mapped().expect("mapped")), Some(p - 96))
            }
            (a, p) => (a.to_canonical(), p),
        };
        let mask = |bits: u32, prefix: u32| -> Option<u128> {
            (prefix <= bits).then(|| if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) })
        };
        Some(match addr {
            std::net::IpAddr::V4(v4) => {
                let prefix = prefix.unwrap_or(32);
                let m = (mask(32, prefix)? >> 96) as u32;
                HostPattern::V4 { net: u32::from(v4) & m, prefix }
            }
            std::net::IpAddr::V6(v6) => {
                let prefix = prefix.unwrap_or(128);
                HostPattern::V6 { net: u128::from(v6) & mask(128, prefix)?, prefix }
            }
        })
    }

    fn contains(&self, peer: std::net::IpAddr) -> bool {
        match (*self, peer.to_canonical()) {
            (HostPattern::V4 { net, prefix }, std::net::IpAddr::V4(p)) => {
                let m = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
                u32::from(p) & m == net
            }
            (HostPattern::V6 { net, prefix }, std::net::IpAddr::V6(p)) => {
                let m = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
                u128::from(p) & m == net
            }
            _ => false,
        }
    }
}

/// Whether a binding's host (`*`, an address, or a CIDR block) covers the session's peer
/// address, both compared canonically: a client from 127.0.0.1 on a dual-stack listener
/// (seen as `::ffff:127.0.0.1`) is 127.0.0.1 to every binding.
pub fn host_matches(binding: &str, peer: &str) -> bool {
    if binding == "*" {
        return true;
    }
    match (HostPattern::parse(binding), peer.parse::<std::net::IpAddr>()) {
        (Some(p), Ok(peer)) => p.contains(peer),
        _ => binding == peer,
    }
}

impl AclBinding {
    /// Checks the fields a client sent: principal `User:<name>` (or `User:*`), host `*` or an
    /// IP address, no control characters, bounded lengths, a name for the resource.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        for (what, v) in [("principal", &self.principal), ("host", &self.host)] {
            if v.is_empty() || v.len() > ACL_FIELD_BYTES_MAX || v.chars().any(char::is_control) {
                return Err(InvalidConfig::new(format!(
                    "{what} {v:?}: 1..={ACL_FIELD_BYTES_MAX} bytes, no control characters"
                )));
            }
        }
        if !self.principal.starts_with("User:") || self.principal.len() == 5 {
            return Err(InvalidConfig::new(format!(
                "principal {:?}: expected User:<name>",
                self.principal
            )));
        }
        if self.host != "*" && HostPattern::parse(&self.host).is_none() {
            return Err(InvalidConfig::new(format!(
                "host {:?}: expected *, an IP address, or a CIDR block (10.0.0.0/8, fd00::/8)",
                self.host
            )));
        }
        if self.name.is_empty() || self.name.len() > folio_meta::KEY_BYTES_MAX / 2 {
            return Err(InvalidConfig::new(
                "a resource name must not be empty or longer than 2048 bytes",
            ));
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Err(InvalidConfig::new(format!(
                "the cluster resource is named {CLUSTER_NAME}"
            )));
        }
        Ok(())
    }

    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}",
            self.principal,
            self.host,
            self.operation.code(),
            self.permission.code()
        )
    }

    fn matches(&self, rtype: ResourceType, name: &str) -> bool {
        self.resource_type == rtype
            && match self.pattern {
                PatternType::Literal => self.name == name || self.name == "*",
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }
}

/// What DescribeAcls and DeleteAcls select, Kafka's codes (`FILTER_ANY` for any).
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource_type: i8,
    /// `None`: any name.
    pub name: Option<String>,
    /// A pattern type, `FILTER_ANY`, or `FILTER_MATCH` (every binding that applies to the
    /// named resource: literal, `*` and prefixes).
    pub pattern: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Checks the codes (an unknown one is INVALID_REQUEST in Kafka).
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let any_or = |code: i8, known: bool, what: &str| {
            if code == FILTER_ANY || known {
                Ok(())
            } else {
                Err(InvalidConfig::new(format!("unknown {what} {code}")))
            }
        };
        any_or(
            self.resource_type,
            ResourceType::from_code(self.resource_type).is_some(),
            "resource type",
        )?;
        let pattern_ok =
            self.pattern == FILTER_MATCH || PatternType::from_code(self.pattern).is_some();
        any_or(self.pattern, pattern_ok, "pattern type")?;
        any_or(self.operation, Operation::from_code(self.operation).is_some(), "operation")?;
        any_or(self.permission, Permission::from_code(self.permission).is_some(), "permission")
    }

    /// Whether `b` is selected.
    pub fn matches(&self, b: &AclBinding) -> bool {
        let code_ok = |want: i8, have: i8| want == FILTER_ANY || want == have;
        let name_ok = match (&self.name, self.pattern) {
            (None, _) => true,
            (Some(n), FILTER_MATCH) => b.matches(b.resource_type, n),
            (Some(n), _) => *n == b.name,
        };
        let pattern_ok =
            matches!(self.pattern, FILTER_ANY | FILTER_MATCH) || self.pattern == b.pattern.code();
        code_ok(self.resource_type, b.resource_type.code())
            && name_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && code_ok(self.operation, b.operation.code())
            && code_ok(self.permission, b.permission.code())
    }
}

/// The key of a resource pattern's bindings.
fn key(keys: &Keys, rtype: ResourceType, pattern: PatternType, name: &str) -> String {
    format!("{}{}/{}/{name}", prefix(keys), rtype.code(), pattern.code())
}

fn prefix(keys: &Keys) -> String {
    format!("{}/acls/", keys.root())
}

/// Reads every binding (a damaged value is reported).
pub async fn list(meta: &dyn MetadataStore, keys: &Keys) -> Result<Vec<AclBinding>, MetaError> {
    let p = prefix(keys);
    let mut out = Vec::new();
    for v in list_all(meta, &p).await? {
        out.extend(
            parse(&v.key[p.len()..], &v.value)
                .map_err(|e| folio_meta::records::corrupt(&v.key, e))?,
        );
    }
    Ok(out)
}

fn parse(rest: &str, value: &[u8]) -> Result<Vec<AclBinding>, String> {
    let mut parts = rest.splitn(3, '/');
    let code = |s: Option<&str>| s.and_then(|s| s.parse::<i8>().ok());
    let rtype = code(parts.next()).and_then(ResourceType::from_code).ok_or("bad resource type")?;
    let pattern = code(parts.next()).and_then(PatternType::from_code).ok_or("bad pattern type")?;
    let name = parts.next().ok_or("no resource name")?.to_string();
    let text = std::str::from_utf8(value).map_err(|_| "not UTF-8")?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [principal, host, op, perm] = f[..] else { return Err(format!("line {line:?}")) };
        out.push(AclBinding {
            resource_type: rtype,
            pattern,
            name: name.clone(),
            principal: principal.into(),
            host: host.into(),
            operation: code(Some(op)).and_then(Operation::from_code).ok_or("bad operation")?,
            permission: code(Some(perm)).and_then(Permission::from_code).ok_or("bad permission")?,
        });
    }
    Ok(out)
}

/// Why an ACL change was not made.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The binding is not valid (INVALID_REQUEST).
    #[error(transparent)]
    Invalid(#[from] InvalidConfig),
    /// One resource pattern would hold more than `BINDINGS_PER_RESOURCE_MAX` bindings.
    #[error("above {BINDINGS_PER_RESOURCE_MAX} bindings on one resource")]
    TooMany,
    /// The store failed (or holds a record that does not decode).
    #[error("{key}: {source}")]
    Store {
        key: String,
        #[source]
        source: MetaError,
    },
    /// The resource's record changed under every attempt.
    #[error("{key} keeps changing; try again")]
    Contended { key: String },
}

impl AclError {
    /// The Kafka code a CreateAcls or DeleteAcls result is answered with.
    pub fn code(&self) -> i16 {
        match self {
            AclError::Invalid(_) | AclError::TooMany => crate::errors::INVALID_REQUEST,
            AclError::Store { .. } | AclError::Contended { .. } => {
                crate::errors::KAFKA_STORAGE_ERROR
            }
        }
    }
}

/// Changes the bindings of one resource pattern by compare-and-set: `change` gets the
/// current ones and edits them. Retries on a concurrent change.
async fn update(
    meta: &dyn MetadataStore,
    keys: &Keys,
    (rtype, pattern, name): (ResourceType, PatternType, &str),
    change: impl Fn(&mut Vec<AclBinding>),
) -> Result<(), AclError> {
    let k = key(keys, rtype, pattern, name);
    let store = |source| AclError::Store { key: k.clone(), source };
    for _ in 0..16 {
        let current = meta.get(&k).await.map_err(store)?;
        let (mut bindings, expect) = match &current {
            Some(v) => {
                let bindings = parse(&k[prefix(keys).len()..], &v.value)
                    .map_err(|e| store(folio_meta::records::corrupt(&k, e)))?;
                (bindings, Expect::Version(v.version))
            }
            None => (Vec::new(), Expect::Absent),
        };
        change(&mut bindings);
        bindings.sort();
        bindings.dedup();
        if bindings.len() > BINDINGS_PER_RESOURCE_MAX {
            return Err(AclError::TooMany);
        }
        let r = if bindings.is_empty() {
            match current {
                None => return Ok(()),
                Some(v) => meta.delete(&k, Expect::Version(v.version)).await.map(drop),
            }
        } else {
            let text: Vec<String> = bindings.iter().map(AclBinding::line).collect();
            meta.put(&k, Bytes::from(text.join("\n")), expect).await.map(drop)
        };
        match r {
            Ok(()) => return Ok(()),
            Err(MetaError::Conflict { .. }) => continue,
            Err(e) => return Err(store(e)),
        }
    }
    Err(AclError::Contended { key: k })
}

/// Adds `b` (a binding already there is kept once).
pub async fn create(meta: &dyn MetadataStore, keys: &Keys, b: &AclBinding) -> Result<(), AclError> {
    b.validate()?;
    update(meta, keys, (b.resource_type, b.pattern, &b.name), |v| v.push(b.clone())).await
}

/// Removes the bindings `pick` selects; returns them.
pub async fn delete(
    meta: &dyn MetadataStore,
    keys: &Keys,
    pick: impl Fn(&AclBinding) -> bool,
) -> Result<Vec<AclBinding>, AclError> {
    let doomed: Vec<AclBinding> = list(meta, keys)
        .await
        .map_err(|source| AclError::Store { key: prefix(keys), source })?
        .into_iter()
        .filter(|b| pick(b))
        .collect();
    let mut resources: Vec<(ResourceType, PatternType, &str)> =
        doomed.iter().map(|b| (b.resource_type, b.pattern, b.name.as_str())).collect();
    resources.sort();
    resources.dedup();
    for r in resources {
        update(meta, keys, r, |v| v.retain(|b| !doomed.contains(b))).await?;
    }
    Ok(doomed)
}

/// The authorizer's settings (`authorizer.class.name` set, in Kafka's terms).
#[derive(Debug, Clone, Default)]
pub struct AuthorizerConfig {
    /// `super.users`: principals that may do everything (`User:admin`).
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

/// Every broker's cached copy of the bindings (see the module doc).
#[derive(Debug)]
pub struct Acls {
    config: AuthorizerConfig,
    bindings: RwLock<Arc<Vec<AclBinding>>>,
}

impl Acls {
    /// An authorizer with no bindings loaded yet ([`Acls::reload`], or `watched::keep_current`).
    pub fn new(config: AuthorizerConfig) -> Arc<Acls> {
        Arc::new(Acls { config, bindings: RwLock::new(Arc::new(Vec::new())) })
    }

    /// Lists the bindings again.
    pub async fn reload(&self, meta: &dyn MetadataStore, keys: &Keys) -> Result<(), MetaError> {
        let all = list(meta, keys).await?;
        *self.bindings.write().expect("acl lock") = Arc::new(all);
        Ok(())
    }

    /// Whether `session` may do `op` on the resource `(rtype, name)`.
    pub fn authorize(
        &self,
        session: &Session,
        op: Operation,
        rtype: ResourceType,
        name: &str,
    ) -> bool {
        if self.config.super_users.iter().any(|s| **s == *session.principal) {
            return true;
        }
        let all = self.bindings.read().expect("acl lock").clone();
        let on_resource: Vec<&AclBinding> = all.iter().filter(|b| b.matches(rtype, name)).collect();
        let applies = |b: &&&AclBinding| {
            (b.principal == *session.principal || b.principal == "User:*")
                && host_matches(&b.host, &session.host)
        };
        let implied: &[Operation] = match op {
            Operation::Describe => {
                &[Operation::Read, Operation::Write, Operation::Delete, Operation::Alter]
            }
            Operation::DescribeConfigs => &[Operation::AlterConfigs],
            _ => &[],
        };
        let mine: Vec<&&AclBinding> = on_resource.iter().filter(applies).collect();
        if mine.iter().any(|b| {
            b.permission == Permission::Deny && (b.operation == op || b.operation == Operation::All)
        }) {
            return false;
        }
        if mine.iter().any(|b| {
            b.permission == Permission::Allow
                && (b.operation == op
                    || b.operation == Operation::All
                    || implied.contains(&b.operation))
        }) {
            return true;
        }
        on_resource.is_empty() && self.config.allow_if_no_acl
    }

    /// Whether `session` may write some topic (an idempotent producer without
    /// IDEMPOTENT_WRITE on the cluster needs that, as in Kafka 3.x).
    pub fn may_write_some_topic(&self, session: &Session) -> bool {
        self.config.super_users.iter().any(|s| **s == *session.principal)
            || self.bindings().iter().any(|b| {
                b.resource_type == ResourceType::Topic
                    && b.permission == Permission::Allow
                    && matches!(b.operation, Operation::Write | Operation::All)
                    && (b.principal == *session.principal || b.principal == "User:*")
            })
    }

    /// The bindings now in the cache.
    pub fn bindings(&self) -> Arc<Vec<AclBinding>> {
        self.bindings.read().expect("acl lock").clone()
    }
}

impl crate::domain::watched::Watched for Acls {
    const WHAT: &'static str = "ACL";

    fn prefix(keys: &Keys) -> String {
        prefix(keys)
    }

    async fn reload(&self, meta: &dyn MetadataStore, keys: &Keys) -> Result<(), MetaError> {
        Acls::reload(self, meta, keys).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(
        rtype: ResourceType,
        pattern: PatternType,
        name: &str,
        who: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rtype,
            pattern,
            name: name.into(),
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn session(who: &str) -> Session {
        Session { listener: "SASL_SSL".into(), principal: who.into(), host: "10.0.0.1".into() }
    }

    #[test]
    fn kafkas_rules_deny_wins_describe_is_implied_prefixes_and_wildcards_match() {
        use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
        let acls = Acls::new(AuthorizerConfig {
            super_users: vec!["User:admin".into()],
            allow_if_no_acl: false,
        });
        *acls.bindings.write().unwrap() = Arc::new(vec![
            b(Topic, Prefixed, "orders-", "User:alice", Write, Allow),
            b(Topic, Literal, "orders-secret", "User:alice", All, Deny),
            b(Topic, Literal, "*", "User:*", Read, Allow),
            b(Group, Literal, "g1", "User:bob", Read, Allow),
        ]);
        let (alice, bob, eve) = (session("User:alice"), session("User:bob"), session("User:eve"));
        assert!(acls.authorize(&alice, Write, Topic, "orders-eu"));
        assert!(acls.authorize(&alice, Describe, Topic, "orders-eu"), "WRITE implies DESCRIBE");
        assert!(!acls.authorize(&alice, Write, Topic, "orders-secret"), "DENY wins");
        assert!(!acls.authorize(&alice, Read, Topic, "orders-secret"), "DENY ALL denies READ");
        assert!(acls.authorize(&eve, Read, Topic, "anything"), "the wildcard topic, any user");
        assert!(!acls.authorize(&eve, Write, Topic, "orders-eu"));
        assert!(acls.authorize(&bob, Read, Group, "g1"));
        assert!(!acls.authorize(&bob, Read, Group, "g2"), "no ACL: refused by default");
        assert!(!acls.authorize(&bob, Create, Cluster, CLUSTER_NAME));
        assert!(acls.authorize(&session("User:admin"), Alter, Cluster, CLUSTER_NAME), "super user");
        let open = Acls::new(AuthorizerConfig { super_users: vec![], allow_if_no_acl: true });
        assert!(open.authorize(&bob, Read, Group, "g2"), "allow.everyone.if.no.acl.found");
        let mut host = b(Group, Literal, "g3", "User:bob", Read, Allow);
        host.host = "10.0.0.2".into();
        *open.bindings.write().unwrap() = Arc::new(vec![host]);
        assert!(!open.authorize(&bob, Read, Group, "g3"), "another host's binding");
    }

    #[test]
    fn bindings_are_validated_and_stored_by_resource() {
        use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
        let ok = b(Topic, Literal, "t", "User:alice", Read, Allow);
        assert!(ok.validate().is_ok());
        for bad in [
            AclBinding { principal: "alice".into(), ..ok.clone() },
            AclBinding { principal: "User:".into(), ..ok.clone() },
            AclBinding { host: "example.com".into(), ..ok.clone() },
            AclBinding { principal: "User:a\nb".into(), ..ok.clone() },
            AclBinding { name: String::new(), ..ok.clone() },
            AclBinding { resource_type: Cluster, name: "other".into(), ..ok.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let line = ok.line();
        let back = parse("2/3/t", line.as_bytes()).unwrap();
        assert_eq!(back, vec![ok]);
        assert!(parse("9/3/t", line.as_bytes()).is_err());
        assert!(parse("2/3/t", b"User:a\t*\t3").is_err());
    }

    /// #44 item 6: a DENY for 127.0.0.1 applies to a client from 127.0.0.1 on a dual-stack
    /// listener (its peer reads `::ffff:127.0.0.1`), and CIDR blocks (KIP-1276) match.
    #[test]
    fn hosts_compare_canonically_and_cidr_blocks_match() {
        use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
        let acls = Acls::new(AuthorizerConfig { super_users: vec![], allow_if_no_acl: false });
        let with_host = |h: &str, perm| AclBinding {
            host: h.into(),
            ..b(Topic, Literal, "t", "User:*", Read, perm)
        };
        *acls.bindings.write().unwrap() = Arc::new(vec![
            with_host("*", Allow),
            with_host("127.0.0.1", Deny),
            with_host("10.1.0.0/16", Deny),
            with_host("fd00::/8", Deny),
        ]);
        let from = |host: &str| Session {
            listener: "PLAINTEXT".into(),
            principal: "User:eve".into(),
            host: host.into(),
        };
        for denied in ["127.0.0.1", "::ffff:127.0.0.1", "10.1.2.3", "::ffff:10.1.255.1", "fd12::1"]
        {
            assert!(!acls.authorize(&from(denied), Read, Topic, "t"), "{denied} got through");
        }
        for allowed in ["127.0.0.2", "10.2.0.1", "::1", "fe80::1", "::ffff:127.0.0.2"] {
            assert!(acls.authorize(&from(allowed), Read, Topic, "t"), "{allowed} refused");
        }
        assert!(host_matches("::ffff:10.0.0.0/104", "10.0.0.9"), "a mapped block");
        assert!(host_matches("0.0.0.0/0", "192.0.2.1"));
        for bad in ["10.0.0.0/33", "fd00::/129", "10.0.0.0/", "10.0.0.0/x", "host/8"] {
            assert!(with_host(bad, Allow).validate().is_err(), "{bad}");
        }
        for good in ["10.0.0.0/8", "fd00::/8", "::ffff:127.0.0.1", "0.0.0.0/0"] {
            assert!(with_host(good, Allow).validate().is_ok(), "{good}");
        }
    }
}
