//! DescribeProducers (KIP-664): the idempotent producers a partition knows, from the state
//! its owner keeps to recognise retries (`crate::domain::producers`): id, epoch, the sequence of
//! the last batch's last record and its max timestamp. No transactions here, so the
//! coordinator epoch and the transaction start offset are always -1. The partition is
//! opened on this broker if it owns it (NOT_LEADER_OR_FOLLOWER otherwise, as Kafka
//! answers on a follower); READ on each topic, refused topic by topic.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId,
};

use crate::api::{Handler, Refused};
use crate::state::Inner;

pub(crate) struct DescribeProducers;

impl Handler for DescribeProducers {
    type Request = DescribeProducersRequest;
    type Response = DescribeProducersResponse;
    const KEY: ApiKey = ApiKey::DescribeProducers;

    refuse_each!(
        topics => topics,
        Read on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.name.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: DescribeProducersRequest,
    ) -> DescribeProducersResponse {
        let mut resp = Self::error(version, &req, 0);
        for out in &mut resp.topics {
            for p in &mut out.partitions {
                let index = p.partition_index;
                match super::offsets::owned_partition(&inner, out.name.as_str(), index).await {
                    Err(code) => p.error_code = code,
                    Ok(partition) => {
                        let states = partition.producers.lock().expect("producers lock").describe();
                        let txns = partition.txns.lock().expect("txns lock");
                        p.active_producers = states
                            .into_iter()
                            .map(|s| {
                                let start = txns.open_first_offset(s.producer_id).unwrap_or(-1);
                                ProducerState::default()
                                    .with_producer_id(ProducerId(s.producer_id))
                                    .with_producer_epoch(s.epoch.into())
                                    .with_last_sequence(s.last_sequence)
                                    .with_last_timestamp(s.last_timestamp)
                                    .with_coordinator_epoch(-1)
                                    .with_current_txn_start_offset(start)
                            })
                            .collect();
                    }
                }
            }
        }
        resp
    }

    fn error(
        _version: i16,
        req: &DescribeProducersRequest,
        code: i16,
    ) -> DescribeProducersResponse {
        let topics = req.topics.iter().map(|t| {
            let partitions = t.partition_indexes.iter().map(|p| {
                PartitionResponse::default().with_partition_index(*p).with_error_code(code)
            });
            TopicResponse::default().with_name(t.name.clone()).with_partitions(partitions.collect())
        });
        DescribeProducersResponse::default().with_topics(topics.collect())
    }

    error_code_of!([topics => partitions]);
}
