//! The console's JSON under `/api/v1/`: one function per page, each a few Kafka requests
//! as the session's user (`kafka.rs`) plus, for the data lifecycle, the broker's own view.
//!
//! ```text
//! GET    /api/v1/overview                    brokers, controller, bookies, backend
//! GET    /api/v1/topics                      topics with partitions, offsets, bytes
//! GET    /api/v1/topics/{t}                  partitions (owner, offsets, ledgers), configs
//! DELETE /api/v1/topics/{t}                  DeleteTopics
//! GET    /api/v1/topics/{t}/messages         ?partition&from=offset|time|end&offset&time
//!                                            &limit&key&text
//! GET    /api/v1/groups                      groups with state and total lag
//! GET    /api/v1/groups/{g}                  members, committed offsets, lag per partition
//! POST   /api/v1/groups/{g}/reset            {"to": earliest|latest|time, "time", "dry_run"}
//! GET    /api/v1/lifecycle                   deletions, trash, GC, audit, under-replicated
//! POST   /api/v1/gc                          a GC pass on this process's bookies
//! ```

use std::collections::BTreeMap;

use folio_log::records::LogRecord;
use serde_json::{Value, json};

use super::kafka::{Client, code_name};
use super::{Answer, Console};
use crate::limits::{CONSOLE_FETCH_BYTES_MAX, CONSOLE_MESSAGES_MAX, CONSOLE_SCAN_FETCHES_MAX};

/// Answers one `/api/v1/` request as `principal` (`User:<name>`, or ANONYMOUS).
pub(super) async fn route(
    c: &Console,
    k: &mut Client,
    req: &crate::http::request::Request,
    principal: &str,
) -> Answer {
    use folio_broker::acl::Operation;
    // What Kafka has no request for is checked against the cluster's ACLs as Kafka would:
    // reading the data lifecycle is DESCRIBE on the cluster, running GC is ALTER.
    let needs = match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/api/v1/lifecycle") => Some(Operation::Describe),
        ("POST", "/api/v1/gc") => Some(Operation::Alter),
        _ => None,
    };
    if let Some(op) = needs
        && !c.broker.cluster_allowed(principal, op)
    {
        return Answer::error(403, format!("{principal} may not {op:?} the cluster"));
    }
    let rest = req.path.trim_start_matches("/api/v1/");
    let seg: Vec<String> = rest.split('/').map(decode).collect();
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    let q = query(&req.query);
    let result = match (req.method.as_str(), seg.as_slice()) {
        ("GET", ["overview"]) => overview(c, k).await,
        ("GET", ["topics"]) => topics(k).await,
        ("GET", ["topics", t]) => topic(c, k, t).await,
        ("DELETE", ["topics", t]) => k.delete_topic(t).await.map(|()| json!({"deleted": t})),
        ("GET", ["topics", t, "messages"]) => messages(c, k, t, &q).await,
        ("GET", ["groups"]) => groups(k).await,
        ("GET", ["groups", g]) => group(k, g).await,
        ("POST", ["groups", g, "reset"]) => reset(k, g, &req.body).await,
        ("GET", ["lifecycle"]) => return lifecycle(c, k).await,
        ("POST", ["gc"]) => {
            return Answer::new(200, "text/plain", crate::http::admin::gc_now(&c.bookies).await);
        }
        (m, _) => return Answer::error(404, format!("no console route {m} {}", req.path)),
    };
    match result {
        Ok(v) => Answer::json(200, v),
        Err(folio_kafka_client::ClientError::Refused { api, code, message }) => {
            let status = if [29, 30, 31].contains(&code) { 403 } else { 409 };
            Answer::error(status, format!("{api}: {} {message}", code_name(code)))
        }
        Err(e) => Answer::error(502, e.to_string()),
    }
}

type Result<T> = std::result::Result<T, folio_kafka_client::ClientError>;

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%').then(|| s.get(i + 1..i + 3)).flatten();
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(x) => {
                out.push(x);
                i += 3;
            }
            None => {
                out.push(if b[i] == b'+' { b' ' } else { b[i] });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

async fn overview(c: &Console, k: &mut Client) -> Result<Value> {
    let (brokers, controller, topics) = k.metadata(None).await?;
    let bookies = c.bookies.read().await;
    let local: Vec<Value> = bookies
        .iter()
        .map(|b| {
            let (total, free) = b.disk_space().unwrap_or((0, 0));
            json!({"id": b.id(), "read_only": b.is_read_only(), "disk_total": total,
                   "disk_free": free, "disk_used": total.saturating_sub(free),
                   "usage": b.disk_usage(), "threshold": b.disk_usage_threshold()})
        })
        .collect();
    let registered = |read_only: bool| async move {
        let prefix = if read_only { c.keys.bookies_readonly() } else { c.keys.bookies_writable() };
        folio_meta::list_all(c.meta.as_ref(), &prefix)
            .await
            .map(|v| v.iter().map(|x| x.key[prefix.len()..].to_string()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    Ok(json!({
        "brokers": brokers.iter().map(|(id, addr)| json!({"id": id, "addr": addr})).collect::<Vec<_>>(),
        "controller": controller,
        "this_broker": c.broker.node_id(),
        "topics": topics.len(),
        "backend": c.backend,
        "bookies_here": local,
        "bookies_writable": registered(false).await,
        "bookies_read_only": registered(true).await,
    }))
}

async fn topics(k: &mut Client) -> Result<Value> {
    let (_, _, mut topics) = k.metadata(None).await?;
    let mut out = Vec::new();
    for t in &mut topics {
        if t.error == 0 {
            k.with_offsets(t).await?;
        }
        let records: i64 = t.partitions.iter().map(|p| (p.end - p.start).max(0)).sum();
        out.push(
            json!({"name": t.name, "id": t.id, "error": (t.error != 0).then(|| code_name(t.error)),
            "partitions": t.partitions.len(), "records": records}),
        );
    }
    Ok(json!(out))
}

async fn topic(c: &Console, k: &mut Client, name: &str) -> Result<Value> {
    let (_, _, mut topics) = k.metadata(Some(&[name.to_string()])).await?;
    let Some(t) = topics.first_mut() else { return Ok(json!({"error": "no such topic"})) };
    if t.error != 0 {
        return Err(folio_kafka_client::ClientError::Refused {
            api: "Metadata",
            code: t.error,
            message: code_name(t.error),
        });
    }
    k.with_offsets(t).await?;
    let configs = k.configs(name).await.unwrap_or_default();
    let mut partitions = Vec::new();
    for p in &t.partitions {
        // The partition's managed log (ledgers and bytes): readable only once Metadata
        // showed the topic to this user.
        let log = format!("kafka-{}-{}", t.id.replace('-', ""), p.partition);
        let ledgers = match c.meta.get(&c.keys.log(&log)).await {
            Ok(Some(v)) => {
                match <LogRecord as folio_meta::records::Record>::decode(&v.key, &v.value) {
                    Ok(r) => r
                        .ledgers
                        .iter()
                        .map(|l| {
                            json!({"ledger": l.ledger_id, "first_offset": l.first_offset,
                        "entries": l.entries, "bytes": l.bytes})
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        partitions.push(json!({"partition": p.partition, "leader": p.leader, "start": p.start,
            "end": p.end, "log": log, "ledgers": ledgers}));
    }
    let configs: Vec<Value> =
        configs.iter().map(|(n, v, own)| json!({"name": n, "value": v, "set": own})).collect();
    Ok(json!({"name": t.name, "id": t.id, "partitions": partitions, "configs": configs}))
}

/// A record's bytes as the browser shows them: UTF-8 text, or hex (or, with a registered
/// schema, decoded: [`Decoder`]).
fn shown(b: &Option<Vec<u8>>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => json!(s),
            _ => json!(format!("0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())),
        },
    }
}

/// Decodes record bytes framed for the schema registry (magic byte 0, a 4-byte id) with
/// their Avro or JSON schema; `None` when they are not, or do not decode.
struct Decoder {
    registry: folio_registry::Registry,
    schemas: BTreeMap<u32, Option<folio_registry::Parsed>>,
}

impl Decoder {
    #[allow(clippy::big_endian_bytes)] // the registry's framing: a big-endian schema id
    async fn decode(&mut self, b: &Option<Vec<u8>>) -> Option<(u32, Value)> {
        let [0, a, b2, c, d, payload @ ..] = b.as_deref()? else { return None };
        let id = u32::from_be_bytes([*a, *b2, *c, *d]);
        if !self.schemas.contains_key(&id) {
            let parsed = match self.registry.schema(u64::from(id)).await {
                Ok(s) => s.parse().ok(),
                Err(_) => None,
            };
            self.schemas.insert(id, parsed);
        }
        let v = match self.schemas.get(&id)?.as_ref()? {
            folio_registry::Parsed::Avro(s) => folio_registry::avro::decode(s, payload).ok()?,
            folio_registry::Parsed::Json(_) => serde_json::from_slice(payload).ok()?,
            folio_registry::Parsed::Protobuf(_) => return None,
        };
        Some((id, v))
    }
}

async fn messages(
    c: &Console,
    k: &mut Client,
    topic: &str,
    q: &BTreeMap<String, String>,
) -> Result<Value> {
    let registry = folio_registry::Registry::new(c.meta.clone(), &c.keys);
    let mut decoder = Decoder { registry, schemas: BTreeMap::new() };
    let int = |n: &str, d: i64| q.get(n).and_then(|v| v.parse().ok()).unwrap_or(d);
    let limit = int("limit", 50).clamp(1, CONSOLE_MESSAGES_MAX as i64) as usize;
    let (_, _, mut topics) = k.metadata(Some(&[topic.to_string()])).await?;
    let Some(t) = topics.first_mut() else { return Ok(json!([])) };
    k.with_offsets(t).await?;
    let wanted = q.get("partition").and_then(|p| p.parse::<i32>().ok());
    let key = q.get("key").filter(|s| !s.is_empty());
    let text = q.get("text").filter(|s| !s.is_empty());
    let mut out = Vec::new();
    for p in t.partitions.iter().filter(|p| wanted.is_none_or(|w| w == p.partition)) {
        let mut at = match q.get("from").map(String::as_str) {
            Some("time") => {
                let at = k.offsets(topic, &[p.partition], int("time", 0)).await?;
                at.get(&p.partition).copied().filter(|o| *o >= 0).unwrap_or(p.end)
            }
            Some("end") => (p.end - limit as i64).max(p.start),
            _ => int("offset", p.start).max(p.start),
        };
        let (mut found, mut fetches) = (0, 0);
        // A search stops after CONSOLE_SCAN_FETCHES_MAX fetches per partition: a filter
        // that matches nothing never reads a whole large partition.
        while at < p.end && found < limit && fetches < CONSOLE_SCAN_FETCHES_MAX {
            fetches += 1;
            let batch = k.fetch(topic, p.partition, at, CONSOLE_FETCH_BYTES_MAX).await?;
            let Some(last) = batch.last() else { break };
            at = last.offset + 1;
            for m in batch {
                let matches = |b: &Option<Vec<u8>>, s: &String| {
                    b.as_ref().is_some_and(|b| String::from_utf8_lossy(b).contains(s.as_str()))
                };
                if key.is_some_and(|s| m.key.as_deref() != Some(s.as_bytes()))
                    || text.is_some_and(|s| !matches(&m.value, s) && !matches(&m.key, s))
                {
                    continue;
                }
                found += 1;
                let mut row = json!({"partition": m.partition, "offset": m.offset,
                    "timestamp": m.timestamp, "key": shown(&m.key), "value": shown(&m.value)});
                for (field, bytes) in [("key", &m.key), ("value", &m.value)] {
                    if let Some((id, v)) = decoder.decode(bytes).await {
                        row[field] = v;
                        row[format!("{field}_schema")] = json!(id);
                    }
                }
                out.push(row);
                if found >= limit {
                    break;
                }
            }
        }
    }
    Ok(json!(out))
}

/// A group's lag per partition: (topic, partition, committed, end, lag).
async fn lags(k: &mut Client, group: &str) -> Result<Vec<(String, i32, i64, i64, i64)>> {
    let committed = k.committed(group).await?;
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in committed.keys() {
        by_topic.entry(t.clone()).or_default().push(*p);
    }
    let mut out = Vec::new();
    for (t, parts) in by_topic {
        let ends = k.offsets(&t, &parts, -1).await?;
        for p in parts {
            let c = committed[&(t.clone(), p)];
            let end = ends.get(&p).copied().unwrap_or(-1);
            out.push((t.clone(), p, c, end, (end - c).max(0)));
        }
    }
    Ok(out)
}

async fn groups(k: &mut Client) -> Result<Value> {
    let mut out = Vec::new();
    for (g, state, protocol) in k.groups().await? {
        let lag: i64 = lags(k, &g).await.map(|l| l.iter().map(|x| x.4).sum()).unwrap_or(-1);
        out.push(json!({"group": g, "state": state, "protocol": protocol, "lag": lag}));
    }
    Ok(json!(out))
}

async fn group(k: &mut Client, g: &str) -> Result<Value> {
    let (code, state, protocol, members) = k.describe_group(g).await?;
    if code != 0 {
        return Err(folio_kafka_client::ClientError::Refused {
            api: "DescribeGroups",
            code,
            message: code_name(code),
        });
    }
    let lag: Vec<Value> = lags(k, g)
        .await?
        .iter()
        .map(|(t, p, c, e, l)| json!({"topic": t, "partition": p, "committed": c, "end": e, "lag": l}))
        .collect();
    let members: Vec<Value> = members
        .iter()
        .map(|(m, client, host)| json!({"member": m, "client_id": client, "host": host}))
        .collect();
    Ok(json!({"group": g, "state": state, "assignor": protocol, "members": members, "lag": lag}))
}

/// Moves a group's committed offsets (every partition it has one for) to the start, the
/// end or a time; with `dry_run`, only says where they would go.
async fn reset(k: &mut Client, g: &str, body: &[u8]) -> Result<Value> {
    let body: Value = serde_json::from_slice(body).unwrap_or_default();
    let at = match body["to"].as_str() {
        Some("earliest") => -2,
        Some("latest") => -1,
        Some("time") => body["time"].as_i64().unwrap_or(0),
        _ => return Ok(json!({"error": "\"to\" is earliest, latest or time"})),
    };
    let dry_run = body["dry_run"].as_bool().unwrap_or(true);
    let mut targets = BTreeMap::new();
    for (t, p, ..) in lags(k, g).await? {
        let found = k.offsets(&t, &[p], at).await?;
        let end = k.offsets(&t, &[p], -1).await?;
        let o = found.get(&p).copied().filter(|o| *o >= 0).or(end.get(&p).copied()).unwrap_or(0);
        targets.insert((t, p), o);
    }
    if !dry_run {
        k.commit(g, &targets).await?;
    }
    let shown: Vec<Value> = targets
        .iter()
        .map(|((t, p), o)| json!({"topic": t, "partition": p, "offset": o}))
        .collect();
    Ok(json!({"group": g, "dry_run": dry_run, "offsets": shown}))
}

async fn lifecycle(c: &Console, k: &mut Client) -> Answer {
    // Only a user who may see every topic sees the whole data lifecycle (it names them).
    if let Err(e) = k.metadata(None).await {
        return Answer::error(502, e.to_string());
    }
    let deletions = match c.broker.deletions().await {
        Ok(d) => {
            serde_json::from_str(&crate::http::admin::deletions_json(&d)).unwrap_or(Value::Null)
        }
        Err(e) => json!({"error": e.to_string()}),
    };
    let trash: Vec<Value> = match c.broker.trash().list().await {
        Ok(list) => list
            .iter()
            .map(|r| {
                json!({"ledger": r.ledger_id, "log": r.log, "reason": r.reason,
                "time_ms": r.time_ms, "attempts": r.attempts, "last_error": r.last_error})
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let gc: Vec<Value> = c
        .bookies
        .read()
        .await
        .iter()
        .map(|b| {
            let s = b.gc_status();
            json!({"bookie": b.id(), "passes": s.passes, "failures": s.failures,
                "last_run_ms": s.last_run_unix_ms, "bytes_reclaimed": s.bytes_reclaimed_total})
        })
        .collect();
    let under = folio_meta::list_all(c.meta.as_ref(), &c.keys.under_replicated()).await;
    let under: Vec<Value> = under
        .unwrap_or_default()
        .iter()
        .filter_map(|v| c.keys.parse_under_replicated(&v.key))
        .map(|id| json!(id))
        .collect();
    let audit = c.broker.last_audit().map(|a| {
        a.totals
            .iter()
            .map(|(class, (ledgers, bytes))| json!({"class": format!("{class:?}"), "ledgers": ledgers, "bytes": bytes}))
            .collect::<Vec<_>>()
    });
    let autorecovery = folio_repair::autorecovery::process_stats().map(|s| {
        let l = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        json!({"auditor": l(&s.auditor) == 1, "marks": l(&s.marks),
            "oldest_mark_age_ms": l(&s.oldest_mark_age_ms), "ledgers_healed": l(&s.ledgers_healed),
            "entries_copied": l(&s.entries_copied), "bytes_copied": l(&s.bytes_copied),
            "copy_errors": l(&s.copy_errors)})
    });
    Answer::json(
        200,
        json!({"deletions": deletions, "trash": trash, "trash_deleter_active": c.broker.trash_deleter_active(),
            "gc": gc, "under_replicated": under, "autorecovery": autorecovery, "audit": audit}),
    )
}
