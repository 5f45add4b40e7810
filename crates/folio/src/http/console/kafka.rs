//! The console's Kafka client: every topic, offset, record and group it shows, and every
//! change it makes, goes through the broker's own Kafka listener, as the logged-in user
//! (SASL) when the broker has users. So the console sees and does exactly what that user's
//! ACLs allow a Kafka client to, with no second authorization path.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use folio_broker::security::Mechanism;
use folio_kafka_client::{ClientError, KafkaConn};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// A connection to the broker for one console request.
pub struct Client {
    conn: KafkaConn,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("console::kafka::Client")
    }
}

/// A partition as Metadata and ListOffsets describe it.
#[derive(Debug, Clone)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub start: i64,
    pub end: i64,
}

/// A topic as Metadata describes it (refused ones carry their error).
#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub id: String,
    pub error: i16,
    pub partitions: Vec<PartitionInfo>,
}

/// One record the message browser shows.
#[derive(Debug, Clone)]
pub struct Message {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A Kafka error code as the console shows it.
pub fn code_name(code: i16) -> String {
    kafka_protocol::ResponseError::try_from_code(code)
        .map_or_else(|| format!("error {code}"), |e| format!("{e:?}"))
}

impl Client {
    /// Connects to `addr`, authenticating as `user` with `mechanism` when given.
    pub async fn connect(
        addr: SocketAddr,
        login: Option<(Mechanism, &str, &str)>,
    ) -> Result<Client, ClientError> {
        let mut conn = KafkaConn::connect(addr).await?;
        if let Some((mechanism, user, password)) = login {
            conn.authenticate(mechanism, user, password).await?;
        }
        Ok(Client { conn })
    }

    /// Brokers (id, host:port), the controller, and topics (`None`: every topic).
    pub async fn metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<(Vec<(i32, String)>, i32, Vec<TopicInfo>), ClientError> {
        let req = MetadataRequest::default().with_topics(topics.map(|t| {
            t.iter().map(|n| MetadataRequestTopic::default().with_name(Some(name(n)))).collect()
        }));
        let r: MetadataResponse = self.conn.call(ApiKey::Metadata, 12, &req).await?;
        let brokers =
            r.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
        let mut out: Vec<TopicInfo> = r
            .topics
            .iter()
            .map(|t| TopicInfo {
                name: t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                id: t.topic_id.to_string(),
                error: t.error_code,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| PartitionInfo {
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        start: -1,
                        end: -1,
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        for t in &mut out {
            t.partitions.sort_by_key(|p| p.partition);
        }
        Ok((brokers, r.controller_id.0, out))
    }

    /// The offset of each of `partitions` of `topic` at `timestamp` (-2 earliest, -1
    /// latest, else the first record at or after that time; -1 when none).
    pub async fn offsets(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        let parts = partitions
            .iter()
            .map(|p| {
                ListOffsetsPartition::default().with_partition_index(*p).with_timestamp(timestamp)
            })
            .collect();
        let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            ListOffsetsTopic::default().with_name(name(topic)).with_partitions(parts),
        ]);
        let r: ListOffsetsResponse = self.conn.call(ApiKey::ListOffsets, 7, &req).await?;
        Ok(r.topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.partition_index, if p.error_code == 0 { p.offset } else { -1 }))
            .collect())
    }

    /// Fills in each partition's start and end offsets.
    pub async fn with_offsets(&mut self, t: &mut TopicInfo) -> Result<(), ClientError> {
        let ids: Vec<i32> = t.partitions.iter().map(|p| p.partition).collect();
        let start = self.offsets(&t.name, &ids, -2).await?;
        let end = self.offsets(&t.name, &ids, -1).await?;
        for p in &mut t.partitions {
            p.start = start.get(&p.partition).copied().unwrap_or(-1);
            p.end = end.get(&p.partition).copied().unwrap_or(-1);
        }
        Ok(())
    }

    /// Up to `max_bytes` of records of `topic`'s `partition` from `offset`.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Vec<Message>, ClientError> {
        let part = FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(max_bytes);
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(max_bytes)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default().with_topic(name(topic)).with_partitions(vec![part]),
            ]);
        let r: FetchResponse = self.conn.call(ApiKey::Fetch, 12, &req).await?;
        let mut out = Vec::new();
        for p in r.responses.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code != 0 {
                return Err(ClientError::Refused {
                    api: "Fetch",
                    code: p.error_code,
                    message: code_name(p.error_code),
                });
            }
            let Some(records) = &p.records else { continue };
            decode(records, partition, &mut out);
        }
        out.retain(|m| m.offset >= offset);
        Ok(out)
    }

    /// Every group (id, state, protocol type).
    pub async fn groups(&mut self) -> Result<Vec<(String, String, String)>, ClientError> {
        let r: ListGroupsResponse =
            self.conn.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await?;
        let mut out: Vec<_> = r
            .groups
            .iter()
            .map(|g| {
                (g.group_id.to_string(), g.group_state.to_string(), g.protocol_type.to_string())
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// A group's state, protocol and members (member id, client id, host).
    pub async fn describe_group(
        &mut self,
        group: &str,
    ) -> Result<(i16, String, String, Vec<(String, String, String)>), ClientError> {
        let req = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
        let r: DescribeGroupsResponse = self.conn.call(ApiKey::DescribeGroups, 5, &req).await?;
        let Some(g) = r.groups.first() else {
            return Ok((0, "Dead".into(), String::new(), Vec::new()));
        };
        let members = g
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.client_id.to_string(), m.client_host.to_string()))
            .collect();
        Ok((g.error_code, g.group_state.to_string(), g.protocol_data.to_string(), members))
    }

    /// A group's committed offsets: (topic, partition) -> offset.
    pub async fn committed(
        &mut self,
        group: &str,
    ) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(None);
        let r: OffsetFetchResponse = self.conn.call(ApiKey::OffsetFetch, 7, &req).await?;
        if r.error_code != 0 {
            return Err(refused("OffsetFetch", r.error_code));
        }
        Ok(r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
            .filter(|(_, p)| p.committed_offset >= 0)
            .map(|(t, p)| ((t.name.to_string(), p.partition_index), p.committed_offset))
            .collect())
    }

    /// Commits `offsets` for `group` as an admin does (no generation: the group must have
    /// no members).
    pub async fn commit(
        &mut self,
        group: &str,
        offsets: &BTreeMap<(String, i32), i64>,
    ) -> Result<(), ClientError> {
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((t, p), o) in offsets {
            topics.entry(t).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*p)
                    .with_committed_offset(*o),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default().with_name(name(t)).with_partitions(ps)
                    })
                    .collect(),
            );
        let r: OffsetCommitResponse = self.conn.call(ApiKey::OffsetCommit, 8, &req).await?;
        let code = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .find(|c| *c != 0);
        match code {
            Some(c) => Err(refused("OffsetCommit", c)),
            None => Ok(()),
        }
    }

    /// Deletes `topic`.
    pub async fn delete_topic(&mut self, topic: &str) -> Result<(), ClientError> {
        let req = DeleteTopicsRequest::default()
            .with_topic_names(vec![name(topic)])
            .with_timeout_ms(30_000);
        let r: DeleteTopicsResponse = self.conn.call(ApiKey::DeleteTopics, 5, &req).await?;
        match r.responses.iter().map(|t| t.error_code).find(|c| *c != 0) {
            Some(c) => Err(refused("DeleteTopics", c)),
            None => Ok(()),
        }
    }

    /// A topic's configs (name, value, whether set on the topic).
    pub async fn configs(
        &mut self,
        topic: &str,
    ) -> Result<Vec<(String, String, bool)>, ClientError> {
        let res = DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(None);
        let req = DescribeConfigsRequest::default().with_resources(vec![res]);
        let r: DescribeConfigsResponse = self.conn.call(ApiKey::DescribeConfigs, 4, &req).await?;
        let mut out = Vec::new();
        for res in &r.results {
            if res.error_code != 0 {
                return Err(refused("DescribeConfigs", res.error_code));
            }
            for c in &res.configs {
                let value = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                out.push((c.name.to_string(), value, c.config_source == 1));
            }
        }
        Ok(out)
    }
}

fn refused(api: &'static str, code: i16) -> ClientError {
    ClientError::Refused { api, code, message: code_name(code) }
}

/// The records of fetched batches, control batches left out.
#[allow(clippy::big_endian_bytes)] // Kafka's batch header: base offset and length, big-endian
fn decode(records: &bytes::Bytes, partition: i32, out: &mut Vec<Message>) {
    let mut rest: &[u8] = records;
    while rest.len() >= 12 {
        let len = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let Ok(len) = usize::try_from(len) else { return };
        let total = 12 + len;
        if total > rest.len() {
            return; // a partial batch at the end of a fetch
        }
        let batch = &rest[..total];
        let base_offset = i64::from_be_bytes(batch[..8].try_into().expect("12 bytes at least"));
        rest = &rest[total..];
        let Ok((h, plain)) = folio_broker::records::records_bytes(batch) else { return };
        if h.is_control() {
            continue;
        }
        let Ok(decoded) = folio_broker::records::decode_records(&h, &plain) else { return };
        for r in decoded {
            out.push(Message {
                partition,
                offset: base_offset + i64::from(r.offset_delta),
                timestamp: r.timestamp,
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
            });
        }
    }
}
