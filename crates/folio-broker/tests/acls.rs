//! #24 item 2: Kafka ACLs on the raw protocol. A broker with `--authorizer` and a super
//! user; principals from SASL (and `User:ANONYMOUS` on PLAINTEXT); every kind of check
//! with Kafka's error codes: per topic (Produce, Fetch, Metadata, auto-creation), per group,
//! on the cluster (ACL and credential APIs), DENY over ALLOW, DESCRIBE implied by WRITE,
//! prefixed patterns, and a deleted binding counting at the next request.

use crate::common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::{Conn, metadata_req};
use folio_broker::acl::{Operation, PatternType, Permission, ResourceType};
use folio_broker::config::{AuthorizerConfig, ListenerConfig};
use folio_broker::errors;
use folio_broker::security::scram::{Credential, Mechanism};
use folio_broker::security::{SecurityProtocol, credentials};
use folio_testkit::kafka::{
    KafkaConn, create_topics_request, delete_topics_request, produce_request,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, CreateAclsRequest,
    CreateAclsResponse, CreateTopicsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DeleteTopicsResponse, DescribeAclsRequest, DescribeAclsResponse, FetchResponse,
    JoinGroupRequest, JoinGroupResponse, MetadataResponse, ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn acl(
    rtype: ResourceType,
    pattern: PatternType,
    name: &str,
    who: &str,
    op: Operation,
    perm: Permission,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rtype.code())
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern.code())
        .with_principal(s(who))
        .with_host(s("*"))
        .with_operation(op.code())
        .with_permission_type(perm.code())
}

async fn login(at: SocketAddr, user: &str) -> KafkaConn {
    let mut c = KafkaConn::connect(at).await.unwrap();
    c.authenticate(Mechanism::ScramSha256, user, "pw").await.unwrap();
    c
}

async fn produce(c: &mut KafkaConn, topic: &str) -> i16 {
    let req = produce_request(topic, 0, Bytes::from(common::batch(1, 1)), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await.unwrap();
    r.responses[0].partition_responses[0].error_code
}

async fn fetch(c: &mut KafkaConn, topic: &str) -> i16 {
    let req = common::fetch_req(topic, uuid::Uuid::nil(), 0);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await.unwrap();
    r.responses[0].partitions[0].error_code
}

async fn topics(c: &mut KafkaConn, names: Option<&[&str]>) -> Vec<(String, i16)> {
    let mut req = metadata_req(names.unwrap_or(&[]));
    if names.is_none() {
        req.topics = None;
    }
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &req).await.unwrap();
    let mut out: Vec<(String, i16)> = r
        .topics
        .iter()
        .map(|t| (t.name.as_ref().map_or(String::new(), |n| n.to_string()), t.error_code))
        .collect();
    out.sort();
    out
}

async fn join(c: &mut KafkaConn, group: &str) -> i16 {
    let req = JoinGroupRequest::default()
        .with_group_id(kafka_protocol::messages::GroupId(s(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"));
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &req).await.unwrap();
    r.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_allow_and_deny_per_api_with_kafkas_error_codes() {
    use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
    let setup = common::start(1, |c| {
        c.listeners = vec![
            ListenerConfig::plaintext("127.0.0.1:0".parse().unwrap()),
            ListenerConfig::new(SecurityProtocol::SaslPlaintext, "127.0.0.1:0".parse().unwrap()),
        ];
        c.authorizer = Some(AuthorizerConfig {
            super_users: vec!["User:admin".into()],
            allow_if_no_acl: false,
        });
    })
    .await;
    let (meta, keys) = (setup.cluster.meta.as_ref(), folio_meta::keys::Keys::default());
    for user in ["admin", "alice", "bob"] {
        let c = Credential::new(Mechanism::ScramSha256, "pw", 4096);
        credentials::put(meta, &keys, Mechanism::ScramSha256, user, &c).await.unwrap();
    }
    let sasl = setup.broker.listener_addr("SASL_PLAINTEXT").unwrap();
    let mut anon = Conn::open(setup.broker.addr()).await;
    let (mut admin, mut alice, mut bob) =
        (login(sasl, "admin").await, login(sasl, "alice").await, login(sasl, "bob").await);

    // The super user creates topics and ACLs; nobody else may.
    let names = vec!["orders-eu".to_string(), "secret".to_string()];
    let r: CreateTopicsResponse =
        admin.call(ApiKey::CreateTopics, 5, &create_topics_request(&names, 1)).await.unwrap();
    assert!(r.topics.iter().all(|t| t.error_code == 0), "{r:?}");
    let req = CreateAclsRequest::default().with_creations(vec![
        acl(Topic, Prefixed, "orders-", "User:alice", Write, Allow),
        acl(Topic, Literal, "orders-eu", "User:alice", Read, Allow),
        acl(Group, Literal, "g1", "User:alice", Read, Allow),
        acl(Topic, Literal, "orders-eu", "User:bob", Describe, Allow),
        acl(Topic, Literal, "orders-eu", "User:*", Write, Deny),
        acl(Topic, Literal, "x", "alice", Read, Allow), // no User: prefix
    ]);
    let r: CreateAclsResponse = admin.call(ApiKey::CreateAcls, 3, &req).await.unwrap();
    let codes: Vec<i16> = r.results.iter().map(|x| x.error_code).collect();
    assert_eq!(codes, [0, 0, 0, 0, 0, errors::INVALID_REQUEST]);
    let r: CreateAclsResponse = alice.call(ApiKey::CreateAcls, 3, &req).await.unwrap();
    assert!(r.results.iter().all(|x| x.error_code == errors::CLUSTER_AUTHORIZATION_FAILED));
    let alter = AlterUserScramCredentialsRequest::default();
    let r: AlterUserScramCredentialsResponse =
        anon.call(ApiKey::AlterUserScramCredentials, 0, &alter).await;
    assert!(r.results.iter().all(|x| x.error_code == errors::CLUSTER_AUTHORIZATION_FAILED));
    let r: DescribeAclsResponse = bob.call(ApiKey::DescribeAcls, 3, &describe_all()).await.unwrap();
    assert_eq!(r.error_code, errors::CLUSTER_AUTHORIZATION_FAILED);

    // DENY wins: even alice may not write orders-eu (User:* is denied); she may write
    // other orders- topics (prefix), read orders-eu, and nothing of `secret`.
    assert_eq!(produce(&mut alice, "orders-eu").await, errors::TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(produce(&mut alice, "secret").await, errors::TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(produce(&mut admin, "orders-eu").await, 0, "super users are never denied");
    assert_eq!(fetch(&mut alice, "orders-eu").await, 0);
    assert_eq!(fetch(&mut alice, "secret").await, errors::TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(
        fetch(&mut bob, "orders-eu").await,
        errors::TOPIC_AUTHORIZATION_FAILED,
        "DESCRIBE does not read"
    );
    // Metadata hides what a principal may not describe; named, it says so; creating
    // needs CREATE.
    assert_eq!(topics(&mut alice, None).await, [("orders-eu".to_string(), 0)]);
    assert_eq!(topics(&mut bob, None).await, [("orders-eu".to_string(), 0)]);
    assert_eq!(topics(&mut anon.0, None).await, []);
    assert_eq!(
        topics(&mut anon.0, Some(&["secret"])).await,
        [("secret".to_string(), errors::TOPIC_AUTHORIZATION_FAILED)]
    );
    assert_eq!(
        topics(&mut alice, Some(&["orders-new"])).await,
        [("orders-new".to_string(), errors::TOPIC_AUTHORIZATION_FAILED)],
        "WRITE implies DESCRIBE, not CREATE"
    );
    let r: MetadataResponse = admin.call(ApiKey::Metadata, 12, &metadata_req(&[])).await.unwrap();
    assert!(r.topics.is_empty());
    // Groups and deletion.
    assert_ne!(join(&mut alice, "g1").await, errors::GROUP_AUTHORIZATION_FAILED);
    assert_eq!(join(&mut alice, "g2").await, errors::GROUP_AUTHORIZATION_FAILED);
    let r: DeleteTopicsResponse =
        alice.call(ApiKey::DeleteTopics, 6, &delete_topics_request(&names[..1])).await.unwrap();
    assert_eq!(r.responses[0].error_code, errors::TOPIC_AUTHORIZATION_FAILED);

    // The admin removes the DENY: alice writes orders-eu at her next request.
    let r: DescribeAclsResponse =
        admin.call(ApiKey::DescribeAcls, 3, &describe_all()).await.unwrap();
    assert_eq!(r.resources.iter().map(|x| x.acls.len()).sum::<usize>(), 5);
    let f = DeleteAclsFilter::default()
        .with_resource_type_filter(Topic.code())
        .with_resource_name_filter(Some(s("orders-eu")))
        .with_pattern_type_filter(Literal.code())
        .with_principal_filter(Some(s("User:*")))
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(Deny.code());
    let r: DeleteAclsResponse = admin
        .call(ApiKey::DeleteAcls, 3, &DeleteAclsRequest::default().with_filters(vec![f]))
        .await
        .unwrap();
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(produce(&mut alice, "orders-eu").await, 0);
    assert_eq!(produce(&mut bob, "orders-eu").await, errors::TOPIC_AUTHORIZATION_FAILED);
}

fn describe_all() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)
}

/// Without an authorizer everything is allowed (today's behaviour) and the ACL APIs say
/// SECURITY_DISABLED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_the_acl_apis_say_security_disabled() {
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let r: DescribeAclsResponse = c.call(ApiKey::DescribeAcls, 3, &describe_all()).await;
    assert_eq!(r.error_code, errors::SECURITY_DISABLED);
    let req = CreateAclsRequest::default().with_creations(vec![acl(
        ResourceType::Topic,
        PatternType::Literal,
        "t",
        "User:a",
        Operation::Read,
        Permission::Allow,
    )]);
    let r: CreateAclsResponse = c.call(ApiKey::CreateAcls, 3, &req).await;
    assert_eq!(r.results[0].error_code, errors::SECURITY_DISABLED);
    assert_eq!(topics(&mut c.0, Some(&["anything"])).await, [("anything".to_string(), 0)]);
    assert_eq!(produce(&mut c.0, "anything").await, 0, "auto-created, then written");
}

/// Kafka answers refused topics, groups and config resources one by one and serves the
/// rest of the request: alice may create, alter, describe and delete `mine-*` topics, read
/// `mine-1`, and use group `g-mine`; every multi-resource API that also names `theirs` or
/// `g-other` serves her part and refuses the other with its own code. ListGroups and
/// OffsetFetch of all topics leave out what she may not describe; a topic deleted by id is
/// checked by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_refuse_per_resource_and_serve_the_rest_of_a_request() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::*;
    use {Operation::*, PatternType::*, Permission::*, ResourceType::*};
    let setup = common::start(1, |c| {
        c.listeners = vec![ListenerConfig::new(
            SecurityProtocol::SaslPlaintext,
            "127.0.0.1:0".parse().unwrap(),
        )];
        c.authorizer = Some(AuthorizerConfig {
            super_users: vec!["User:admin".into()],
            allow_if_no_acl: false,
        });
    })
    .await;
    let (meta, keys) = (setup.cluster.meta.as_ref(), folio_meta::keys::Keys::default());
    for user in ["admin", "alice"] {
        let c = Credential::new(Mechanism::ScramSha256, "pw", 4096);
        credentials::put(meta, &keys, Mechanism::ScramSha256, user, &c).await.unwrap();
    }
    let sasl = setup.broker.listener_addr("SASL_PLAINTEXT").unwrap();
    let (mut admin, mut alice) = (login(sasl, "admin").await, login(sasl, "alice").await);
    let names = vec!["mine-1".to_string(), "theirs".to_string()];
    let r: CreateTopicsResponse =
        admin.call(ApiKey::CreateTopics, 5, &create_topics_request(&names, 1)).await.unwrap();
    assert!(r.topics.iter().all(|t| t.error_code == 0), "{r:?}");
    let mut grants = vec![acl(Topic, Literal, "mine-1", "User:alice", Read, Allow)];
    for op in [Create, Alter, Delete, DescribeConfigs] {
        grants.push(acl(Topic, Prefixed, "mine-", "User:alice", op, Allow));
    }
    for op in [Read, Delete] {
        grants.push(acl(Group, Literal, "g-mine", "User:alice", op, Allow));
    }
    let req = CreateAclsRequest::default().with_creations(grants);
    let r: CreateAclsResponse = admin.call(ApiKey::CreateAcls, 3, &req).await.unwrap();
    assert!(r.results.iter().all(|x| x.error_code == 0), "{r:?}");
    // Both groups hold offsets of both topics (the super user commits them).
    for g in ["g-mine", "g-other"] {
        for t in ["mine-1", "theirs"] {
            let c = common::offset_commit_req(g.into(), t, 7);
            let r: OffsetCommitResponse = admin.call(ApiKey::OffsetCommit, 7, &c).await.unwrap();
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
        }
    }
    let code_of = |v: Vec<(String, i16)>, name: &str| {
        v.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} in {v:?}")).1
    };
    const TOPIC: i16 = errors::TOPIC_AUTHORIZATION_FAILED;
    const GROUP: i16 = errors::GROUP_AUTHORIZATION_FAILED;

    // CreateTopics: mine-2 is made, theirs-2 refused.
    let two = vec!["mine-2".to_string(), "theirs-2".to_string()];
    let r: CreateTopicsResponse =
        alice.call(ApiKey::CreateTopics, 5, &create_topics_request(&two, 1)).await.unwrap();
    let got = r.topics.iter().map(|t| (t.name.to_string(), t.error_code)).collect::<Vec<_>>();
    assert_eq!((code_of(got.clone(), "mine-2"), code_of(got, "theirs-2")), (0, TOPIC));
    assert_eq!(topics(&mut admin, Some(&["mine-2"])).await, [("mine-2".to_string(), 0)]);

    // CreatePartitions, ListOffsets, DescribeConfigs (a broker needs the cluster).
    let grow = |n: &str| CreatePartitionsTopic::default().with_name(TopicName(s(n))).with_count(2);
    let req = CreatePartitionsRequest::default()
        .with_topics(vec![grow("mine-1"), grow("theirs")])
        .with_timeout_ms(10_000);
    let r: CreatePartitionsResponse = alice.call(ApiKey::CreatePartitions, 3, &req).await.unwrap();
    let got = r.results.iter().map(|t| (t.name.to_string(), t.error_code)).collect::<Vec<_>>();
    assert_eq!((code_of(got.clone(), "mine-1"), code_of(got, "theirs")), (0, TOPIC));
    let offsets = |n: &str| {
        ListOffsetsTopic::default().with_name(TopicName(s(n))).with_partitions(vec![
            ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1),
        ])
    };
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![offsets("mine-1"), offsets("theirs")]);
    let r: ListOffsetsResponse = alice.call(ApiKey::ListOffsets, 7, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.topics.iter().map(|t| (t.name.to_string(), t.partitions[0].error_code)).collect();
    assert_eq!((code_of(got.clone(), "mine-1"), code_of(got, "theirs")), (0, TOPIC));
    let res = |t: i8, n: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configuration_keys(None)
    };
    let req = DescribeConfigsRequest::default().with_resources(vec![
        res(2, "mine-1"),
        res(2, "theirs"),
        res(4, "1"),
    ]);
    let r: DescribeConfigsResponse = alice.call(ApiKey::DescribeConfigs, 4, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.results.iter().map(|x| (x.resource_name.to_string(), x.error_code)).collect();
    assert_eq!(
        (code_of(got.clone(), "mine-1"), code_of(got.clone(), "theirs"), code_of(got, "1")),
        (0, TOPIC, errors::CLUSTER_AUTHORIZATION_FAILED)
    );
    let mine = r.results.iter().find(|x| x.resource_name.as_str() == "mine-1").unwrap();
    assert!(!mine.configs.is_empty(), "the allowed resource is described");

    // OffsetCommit and OffsetFetch in g-mine: the refused topic per partition; "all topics"
    // leaves it out. OffsetFetch v8 and DescribeGroups refuse g-other by itself.
    let mut c = common::offset_commit_req("g-mine".into(), "mine-1", 9);
    c.topics.extend(common::offset_commit_req("g-mine".into(), "theirs", 9).topics);
    let r: OffsetCommitResponse = alice.call(ApiKey::OffsetCommit, 7, &c).await.unwrap();
    let got: Vec<(String, i16)> =
        r.topics.iter().map(|t| (t.name.to_string(), t.partitions[0].error_code)).collect();
    assert_eq!((code_of(got.clone(), "mine-1"), code_of(got, "theirs")), (0, TOPIC));
    let wanted = |n: &str| {
        OffsetFetchRequestTopic::default()
            .with_name(TopicName(s(n)))
            .with_partition_indexes(vec![0])
    };
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("g-mine")))
        .with_topics(Some(vec![wanted("mine-1"), wanted("theirs")]));
    let r: OffsetFetchResponse = alice.call(ApiKey::OffsetFetch, 7, &req).await.unwrap();
    let got: Vec<(String, i16, i64)> = r
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions[0].error_code, t.partitions[0].committed_offset))
        .collect();
    assert_eq!(
        got,
        [("mine-1".to_string(), 0, 9), ("theirs".to_string(), TOPIC, -1)],
        "nothing of theirs' offset is told"
    );
    let all = OffsetFetchRequest::default().with_group_id(GroupId(s("g-mine"))).with_topics(None);
    let r: OffsetFetchResponse = alice.call(ApiKey::OffsetFetch, 7, &all).await.unwrap();
    let listed: Vec<String> = r.topics.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(listed, ["mine-1"]);
    let r: OffsetFetchResponse = admin.call(ApiKey::OffsetFetch, 7, &all).await.unwrap();
    assert_eq!(r.topics.len(), 2, "the super user sees both");
    let group = |g: &str| {
        OffsetFetchRequestGroup::default().with_group_id(GroupId(s(g))).with_topics(Some(vec![
            OffsetFetchRequestTopics::default()
                .with_name(TopicName(s("mine-1")))
                .with_partition_indexes(vec![0]),
        ]))
    };
    let req = OffsetFetchRequest::default().with_groups(vec![group("g-mine"), group("g-other")]);
    let r: OffsetFetchResponse = alice.call(ApiKey::OffsetFetch, 8, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.groups.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect();
    assert_eq!((code_of(got.clone(), "g-mine"), code_of(got, "g-other")), (0, GROUP));
    let mine = r.groups.iter().find(|g| g.group_id.as_str() == "g-mine").unwrap();
    assert_eq!(mine.topics[0].partitions[0].committed_offset, 9);
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(s("g-mine")), GroupId(s("g-other"))]);
    let r: DescribeGroupsResponse = alice.call(ApiKey::DescribeGroups, 5, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.groups.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect();
    assert_eq!((code_of(got.clone(), "g-mine"), code_of(got, "g-other")), (0, GROUP));
    let req = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s("g-mine"), s("g-other")]);
    let r: FindCoordinatorResponse = alice.call(ApiKey::FindCoordinator, 4, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.coordinators.iter().map(|c| (c.key.to_string(), c.error_code)).collect();
    assert_eq!((code_of(got.clone(), "g-mine"), code_of(got, "g-other")), (0, GROUP));

    // ListGroups without DESCRIBE on the cluster: only the groups she may describe.
    let r: ListGroupsResponse =
        alice.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await.unwrap();
    let listed: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
    assert_eq!((r.error_code, listed), (0, vec!["g-mine".to_string()]));
    let r: ListGroupsResponse =
        admin.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await.unwrap();
    assert_eq!(r.groups.len(), 2);

    // DeleteGroups and DeleteTopics: hers go, the others stay; a topic named by id is
    // checked by its name.
    let req = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(s("g-mine")), GroupId(s("g-other"))]);
    let r: DeleteGroupsResponse = alice.call(ApiKey::DeleteGroups, 2, &req).await.unwrap();
    let got: Vec<(String, i16)> =
        r.results.iter().map(|g| (g.group_id.to_string(), g.error_code)).collect();
    assert_eq!((code_of(got.clone(), "g-mine"), code_of(got, "g-other")), (0, GROUP));
    let theirs_id = {
        let r: MetadataResponse =
            admin.call(ApiKey::Metadata, 12, &metadata_req(&["theirs"])).await.unwrap();
        r.topics[0].topic_id
    };
    let req = DeleteTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        DeleteTopicState::default().with_name(Some(TopicName(s("mine-2")))),
        DeleteTopicState::default().with_topic_id(theirs_id),
    ]);
    let r: DeleteTopicsResponse = alice.call(ApiKey::DeleteTopics, 6, &req).await.unwrap();
    let got: Vec<(String, i16)> = r
        .responses
        .iter()
        .map(|t| (t.name.as_ref().map_or(t.topic_id.to_string(), |n| n.to_string()), t.error_code))
        .collect();
    assert_eq!(got.iter().find(|(n, _)| n == "mine-2").map(|x| x.1), Some(0), "{got:?}");
    // #44 item 6: alice may not describe `theirs`: by id it is unknown to her, its name
    // told nowhere in the answer.
    let by_id = r.responses.iter().find(|t| t.topic_id == theirs_id).expect("answered");
    assert_eq!(by_id.error_code, folio_broker::errors::UNKNOWN_TOPIC_ID, "{by_id:?}");
    assert!(by_id.name.is_none(), "{by_id:?}");
    let message = by_id.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    assert!(!message.contains("theirs"), "the name leaked: {message}");
    assert_eq!(topics(&mut admin, Some(&["theirs"])).await, [("theirs".to_string(), 0)]);
}
