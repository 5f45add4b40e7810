//! #24 item 2: Kafka ACLs on the raw protocol. A broker with `--authorizer` and a super
//! user; principals from SASL (and `User:ANONYMOUS` on PLAINTEXT); every kind of check
//! with Kafka's error codes: per topic (Produce, Fetch, Metadata, auto-creation), per group,
//! on the cluster (ACL and credential APIs), DENY over ALLOW, DESCRIBE implied by WRITE,
//! prefixed patterns, and a deleted binding counting at the next request.

#![allow(clippy::big_endian_bytes)] // Kafka's wire format (the shared test helpers)

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::{Conn, metadata_req};
use folio_broker::client::{
    KafkaConn, create_topics_request, delete_topics_request, produce_request,
};
use folio_broker::config::{AuthorizerConfig, ListenerConfig};
use folio_broker::errors;
use folio_broker::security::acl::{Operation, PatternType, Permission, ResourceType};
use folio_broker::security::scram::{Credential, Mechanism};
use folio_broker::security::{SecurityProtocol, credentials};
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
