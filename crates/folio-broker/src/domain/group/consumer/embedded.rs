//! The consumer protocol embedded in classic groups' JoinGroup and SyncGroup bytes, read and
//! written by the coordinator only where a group holds members of both protocols (a
//! classic member's subscription becomes its consumer-group subscription; its assignment is
//! computed here and sent back in SyncGroup).
//!
//! Big-endian, not flexible; strings are i16 length + UTF-8, arrays i32 count, nullable
//! bytes i32 length (-1 null):
//! ```text
//! Subscription  version i16 | topics [string] | user_data bytes?
//!               v1+: owned_partitions [topic string | partitions [i32]]
//!               v2+: generation_id i32        v3+: rack_id string? (i16 -1 null)
//! Assignment    version i16 | assigned_partitions [topic string | partitions [i32]]
//!               | user_data bytes?            (the same in versions 0 to 3)
//! ```
//! A version above 3 is read as 3 (newer clients append fields). Counts and lengths are
//! checked against the bytes left, so nothing malformed allocates or panics.

use std::collections::{BTreeMap, BTreeSet};

/// Topic name → partitions: an embedded assignment or owned-partition list.
pub type NamedPartitions = BTreeMap<String, BTreeSet<i32>>;

/// Why embedded bytes were not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed embedded consumer protocol: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// A classic member's subscription, as its JoinGroup carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    pub owned: NamedPartitions,
    pub rack: Option<String>,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self, what: &'static str) -> Result<i16, Malformed> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An array's count, at most what the bytes left can hold at `min_size` bytes each.
    fn count(&mut self, min_size: usize, what: &'static str) -> Result<usize, Malformed> {
        let n = usize::try_from(self.i32(what)?).map_err(|_| Malformed(what))?;
        if n.saturating_mul(min_size) > self.0.len() {
            return Err(Malformed(what));
        }
        Ok(n)
    }

    fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, Malformed> {
        let len = self.i16(what)?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize, what)?;
        std::str::from_utf8(b).map(|s| Some(s.to_string())).map_err(|_| Malformed(what))
    }

    fn string(&mut self, what: &'static str) -> Result<String, Malformed> {
        self.nullable_string(what)?.ok_or(Malformed(what))
    }

    fn skip_nullable_bytes(&mut self, what: &'static str) -> Result<(), Malformed> {
        let len = self.i32(what)?;
        if len >= 0 {
            self.take(len as usize, what)?;
        }
        Ok(())
    }

    fn partitions(&mut self, what: &'static str) -> Result<NamedPartitions, Malformed> {
        let mut out = NamedPartitions::new();
        for _ in 0..self.count(6, what)? {
            let topic = self.string(what)?;
            let ps = out.entry(topic).or_default();
            for _ in 0..self.count(4, what)? {
                ps.insert(self.i32(what)?);
            }
        }
        Ok(out)
    }
}

/// Reads a subscription (a JoinGroup protocol's metadata).
pub fn subscription(b: &[u8]) -> Result<Subscription, Malformed> {
    let mut r = Reader(b);
    let version = r.i16("subscription version")?;
    if version < 0 {
        return Err(Malformed("a negative subscription version"));
    }
    let mut topics = Vec::new();
    for _ in 0..r.count(2, "subscribed topics")? {
        topics.push(r.string("a subscribed topic")?);
    }
    r.skip_nullable_bytes("subscription user data")?;
    let mut s = Subscription { version, topics, ..Subscription::default() };
    if version >= 1 {
        s.owned = r.partitions("owned partitions")?;
    }
    if version >= 2 {
        r.i32("generation id")?;
    }
    if version >= 3 {
        s.rack = r.nullable_string("rack id")?;
    }
    Ok(s)
}

/// Reads an assignment (a SyncGroup assignment's bytes; empty bytes: nothing assigned).
pub fn assignment(b: &[u8]) -> Result<NamedPartitions, Malformed> {
    if b.is_empty() {
        return Ok(NamedPartitions::new());
    }
    let mut r = Reader(b);
    if r.i16("assignment version")? < 0 {
        return Err(Malformed("a negative assignment version"));
    }
    let parts = r.partitions("assigned partitions")?;
    r.skip_nullable_bytes("assignment user data")?;
    Ok(parts)
}

/// Writes an assignment at `version` (the member's subscription version, at most 3), with
/// no user data.
pub fn encode_assignment(version: i16, parts: &NamedPartitions) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&version.clamp(0, 3).to_be_bytes());
    out.extend_from_slice(&(parts.len() as i32).to_be_bytes());
    for (topic, ps) in parts {
        out.extend_from_slice(&(topic.len() as i16).to_be_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    /// A v3 subscription as Kafka's clients write it.
    fn subscription_v3() -> Vec<u8> {
        let mut b = vec![0, 3, 0, 0, 0, 2];
        string(&mut b, "orders");
        string(&mut b, "clicks");
        b.extend_from_slice(&[0, 0, 0, 2, 7, 7]); // user data
        b.extend_from_slice(&[0, 0, 0, 1]);
        string(&mut b, "orders");
        b.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3]);
        b.extend_from_slice(&[0, 0, 0, 9]); // generation
        string(&mut b, "rack-a");
        b
    }

    #[test]
    fn subscriptions_of_every_version_read_and_assignments_round_trip() {
        let s = subscription(&subscription_v3()).unwrap();
        assert_eq!(s.topics, ["orders", "clicks"]);
        assert_eq!(s.owned, [("orders".to_string(), [1, 3].into())].into());
        assert_eq!(s.rack.as_deref(), Some("rack-a"));
        // v0: topics and user data only (null user data).
        let mut v0 = vec![0, 0, 0, 0, 0, 1];
        string(&mut v0, "orders");
        v0.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        let s0 = subscription(&v0).unwrap();
        assert_eq!((s0.topics.len(), s0.owned.len(), s0.rack), (1, 0, None));

        let parts: NamedPartitions =
            [("a".to_string(), [0, 2].into()), ("b".to_string(), [1].into())].into();
        for v in [0, 1, 3, 9] {
            assert_eq!(assignment(&encode_assignment(v, &parts)).unwrap(), parts);
        }
        assert_eq!(assignment(&[]).unwrap(), NamedPartitions::new(), "no assignment yet");
    }

    /// What this module reads is what an independent encoder (the kafka-protocol crate's
    /// generated messages) writes, at every version, and the other way round.
    #[test]
    fn the_format_agrees_with_kafka_protocols_encoder() {
        use kafka_protocol::messages::consumer_protocol_assignment as a;
        use kafka_protocol::messages::consumer_protocol_subscription as s;
        use kafka_protocol::messages::{
            ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
        };
        use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
        let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
        for v in 0..=3i16 {
            let sub = ConsumerProtocolSubscription::default()
                .with_topics(vec![StrBytes::from_static_str("orders")])
                .with_user_data(Some(bytes::Bytes::from_static(b"u")))
                .with_owned_partitions(if v >= 1 {
                    vec![
                        s::TopicPartition::default()
                            .with_topic(name("orders"))
                            .with_partitions(vec![2, 5]),
                    ]
                } else {
                    Vec::new()
                })
                .with_generation_id(if v >= 2 { 7 } else { -1 })
                .with_rack_id((v >= 3).then(|| StrBytes::from_static_str("r1")));
            let mut b = bytes::BytesMut::new();
            b.extend_from_slice(&v.to_be_bytes());
            sub.encode(&mut b, v).unwrap();
            let read = subscription(&b).unwrap();
            assert_eq!(read.topics, ["orders"], "v{v}");
            let owned: NamedPartitions = if v >= 1 {
                [("orders".to_string(), [2, 5].into())].into()
            } else {
                NamedPartitions::new()
            };
            assert_eq!(read.owned, owned, "v{v}");
            assert_eq!(read.rack.as_deref(), (v >= 3).then_some("r1"), "v{v}");

            let parts: NamedPartitions = [("orders".to_string(), [0, 3].into())].into();
            let mut ours = bytes::Bytes::from(encode_assignment(v, &parts));
            assert_eq!(i16::from_be_bytes([ours[0], ours[1]]), v);
            let theirs = ConsumerProtocolAssignment::decode(&mut ours.split_off(2), v).unwrap();
            let expected = vec![
                a::TopicPartition::default().with_topic(name("orders")).with_partitions(vec![0, 3]),
            ];
            assert_eq!(theirs.assigned_partitions, expected, "v{v}");
        }
    }

    #[test]
    fn malformed_bytes_are_refused_and_never_panic() {
        let good = subscription_v3();
        for cut in 0..good.len() {
            assert!(subscription(&good[..cut]).is_err(), "a cut at {cut} is refused");
        }
        let huge = [0, 1, 0x7f, 0xff, 0xff, 0xff];
        assert!(subscription(&huge).is_err(), "a count larger than the bytes is not trusted");
        assert!(subscription(&[0xff, 0xff, 0, 0, 0, 0]).is_err(), "a negative version");
        let bad_utf8 = [0, 0, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(subscription(&bad_utf8).is_err());
        let a = encode_assignment(0, &[("t".to_string(), [0].into())].into());
        for cut in 1..a.len() {
            assert!(assignment(&a[..cut]).is_err(), "an assignment cut at {cut} is refused");
        }
    }
}
