//! ApiVersions: what this broker speaks. Unknown versions get the v0 answer with
//! UNSUPPORTED_VERSION (KIP-511) so the client retries lower; the answer's header is
//! always v0.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::Decodable;

use crate::api::framing::{Frame, encode_response};
use crate::api::{SUPPORTED, supported};
use crate::errors;
use crate::state::Inner;

pub(crate) fn answer(
    inner: &Arc<Inner>,
    version: i16,
    correlation: i32,
    frame: Bytes,
) -> Result<Option<Frame>, String> {
    let mut resp = ApiVersionsResponse::default().with_api_keys(
        SUPPORTED
            .iter()
            .map(|(k, lo, hi)| {
                ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*lo)
                    .with_max_version(*hi)
            })
            .collect(),
    );
    if version >= 3 {
        resp = with_features(resp);
    }
    let answer_version = if !supported(ApiKey::ApiVersions, version) {
        resp.error_code = errors::UNSUPPORTED_VERSION;
        0
    } else {
        let mut body = frame;
        let decoded =
            RequestHeader::decode(&mut body, ApiKey::ApiVersions.request_header_version(version))
                .and_then(|_| ApiVersionsRequest::decode(&mut body, version));
        if let Err(e) = decoded {
            tracing::info!(version, error = %e, "malformed ApiVersions request");
            resp.error_code = errors::INVALID_REQUEST;
        }
        version
    };
    inner.metrics.request(ApiKey::ApiVersions as i16, resp.error_code);
    encode_response(ApiKey::ApiVersions, answer_version, correlation, &resp).map(Some)
}

/// The features a v3+ answer names (KIP-584): `transaction.version` 2 finalized, so Kafka 4
/// clients use transactions version 2 (KIP-890: an epoch bump per transaction, partitions
/// and groups added implicitly by Produce v12 and TxnOffsetCommit v5); `group.version` 1,
/// the consumer group protocol (KIP-848).
fn with_features(resp: ApiVersionsResponse) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    let features = [
        (TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION),
        (GROUP_VERSION_FEATURE, GROUP_VERSION),
        (SHARE_VERSION_FEATURE, SHARE_VERSION),
    ];
    resp.with_supported_features(
        features
            .iter()
            .map(|(name, v)| {
                SupportedFeatureKey::default()
                    .with_name(crate::api::str_bytes(*name))
                    .with_min_version(0)
                    .with_max_version(*v)
            })
            .collect(),
    )
    .with_finalized_features_epoch(1)
    .with_finalized_features(
        features
            .iter()
            .map(|(name, v)| {
                FinalizedFeatureKey::default()
                    .with_name(crate::api::str_bytes(*name))
                    .with_min_version_level(*v)
                    .with_max_version_level(*v)
            })
            .collect(),
    )
}

/// The feature that enables share groups (KIP-932).
pub const SHARE_VERSION_FEATURE: &str = "share.version";
/// The share version this broker runs (1: share groups, the 4.1 RPCs).
pub const SHARE_VERSION: i16 = 1;
/// The feature that enables the consumer group protocol (KIP-848).
pub const GROUP_VERSION_FEATURE: &str = "group.version";
/// The group version this broker runs (1: the consumer protocol).
pub const GROUP_VERSION: i16 = 1;
/// The feature clients read to choose their transaction protocol.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// The transaction version this broker runs (2: KIP-890); version-1 clients are served too.
pub const TRANSACTION_VERSION: i16 = 2;
