//! DescribeUserScramCredentials and AlterUserScramCredentials: the SCRAM users in the
//! metadata store (`security::credentials`), with Kafka's rules and error codes.
//!
//! Alter takes what Kafka clients send, the salted password (the password itself never
//! leaves the client), and stores the derived credential. Per user: a mechanism named
//! twice, or a user both deleted and upserted for one mechanism, is DUPLICATE_RESOURCE;
//! an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations outside 4096..=16384, an
//! empty salt or salted password, or an empty user UNACCEPTABLE_CREDENTIAL; deleting a
//! credential that does not exist RESOURCE_NOT_FOUND. A user with any error has nothing
//! of its request applied.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::{Handler, str_bytes};
use crate::domain::acl::Operation;
use crate::errors;
use crate::security::credentials;
use crate::security::scram::{self, Credential, Mechanism};
use crate::state::Inner;

pub(crate) struct DescribeUserScramCredentials;

impl Handler for DescribeUserScramCredentials {
    type Request = DescribeUserScramCredentialsRequest;
    type Response = DescribeUserScramCredentialsResponse;
    const KEY: ApiKey = ApiKey::DescribeUserScramCredentials;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Describe)
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeUserScramCredentialsRequest,
    ) -> DescribeUserScramCredentialsResponse {
        let all = match credentials::list(inner.env.meta.as_ref(), &inner.env.keys).await {
            Ok(all) => all,
            Err(e) => {
                return DescribeUserScramCredentialsResponse::default()
                    .with_error_code(errors::KAFKA_STORAGE_ERROR)
                    .with_error_message(Some(str_bytes(e.to_string())));
            }
        };
        let infos = |creds: &[(Mechanism, u32)]| {
            creds
                .iter()
                .map(|(m, i)| {
                    CredentialInfo::default()
                        .with_mechanism(m.kafka_code())
                        .with_iterations(*i as i32)
                })
                .collect()
        };
        let result =
            |user: &str| DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
        let asked: Vec<String> = req.users.iter().flatten().map(|u| u.name.to_string()).collect();
        let mut resp = DescribeUserScramCredentialsResponse::default();
        if asked.is_empty() {
            resp.results =
                all.iter().map(|(u, c)| result(u).with_credential_infos(infos(c))).collect();
            return resp;
        }
        let mut seen = HashSet::new();
        let twice: HashSet<&String> = asked.iter().filter(|u| !seen.insert(*u)).collect();
        let mut done = HashSet::new();
        for user in &asked {
            if !done.insert(user) {
                continue;
            }
            let r = if twice.contains(user) {
                result(user).with_error_code(errors::DUPLICATE_RESOURCE).with_error_message(Some(
                    str_bytes(format!("Cannot describe SCRAM credentials for the same user twice in a single request: {user}")),
                ))
            } else {
                match all.iter().find(|(u, _)| u == user) {
                    Some((_, c)) => result(user).with_credential_infos(infos(c)),
                    None => result(user)
                        .with_error_code(errors::RESOURCE_NOT_FOUND)
                        .with_error_message(Some(str_bytes(format!(
                            "Attempt to describe a user credential that does not exist: {user}"
                        )))),
                }
            };
            resp.results.push(r);
        }
        resp
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        DescribeUserScramCredentialsResponse::default().with_error_code(code)
    }

    error_code_of!(top, [results]);
}

pub(crate) struct AlterUserScramCredentials;

/// One user's part of an alter request.
#[derive(Default)]
struct UserChange {
    deletions: Vec<Mechanism>,
    upsertions: Vec<(Mechanism, Credential)>,
    /// The first error, which cancels the user's whole change.
    error: Option<(i16, String)>,
}

impl UserChange {
    fn fail(&mut self, code: i16, msg: String) {
        self.error.get_or_insert((code, msg));
    }

    fn names(&self, m: Mechanism) -> bool {
        self.deletions.contains(&m) || self.upsertions.iter().any(|(u, _)| *u == m)
    }
}

impl Handler for AlterUserScramCredentials {
    type Request = AlterUserScramCredentialsRequest;
    type Response = AlterUserScramCredentialsResponse;
    const KEY: ApiKey = ApiKey::AlterUserScramCredentials;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Alter)
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: AlterUserScramCredentialsRequest,
    ) -> AlterUserScramCredentialsResponse {
        let mut users: BTreeMap<String, UserChange> = BTreeMap::new();
        for d in &req.deletions {
            let c = users.entry(d.name.to_string()).or_default();
            match Mechanism::from_kafka_code(d.mechanism) {
                None => c.fail(
                    errors::UNSUPPORTED_SASL_MECHANISM,
                    format!("Unknown SCRAM mechanism {}", d.mechanism),
                ),
                Some(m) if c.names(m) => c.fail(
                    errors::DUPLICATE_RESOURCE,
                    format!(
                        "A user credential cannot be altered twice in the same request: {}",
                        d.name.as_str()
                    ),
                ),
                Some(m) => c.deletions.push(m),
            }
        }
        for u in &req.upsertions {
            let c = users.entry(u.name.to_string()).or_default();
            let Some(m) = Mechanism::from_kafka_code(u.mechanism) else {
                c.fail(
                    errors::UNSUPPORTED_SASL_MECHANISM,
                    format!("Unknown SCRAM mechanism {}", u.mechanism),
                );
                continue;
            };
            if c.names(m) {
                c.fail(
                    errors::DUPLICATE_RESOURCE,
                    format!(
                        "A user credential cannot be altered twice in the same request: {}",
                        u.name.as_str()
                    ),
                );
                continue;
            }
            match scram::check_iterations(u.iterations as i64) {
                Err(e) => c.fail(errors::UNACCEPTABLE_CREDENTIAL, e.to_string()),
                Ok(_) if u.salt.is_empty() || u.salted_password.is_empty() => {
                    c.fail(
                        errors::UNACCEPTABLE_CREDENTIAL,
                        "an empty salt or salted password".into(),
                    );
                }
                Ok(i) => c
                    .upsertions
                    .push((m, Credential::from_salted(m, &u.salt, &u.salted_password, i))),
            }
        }
        let mut resp = AlterUserScramCredentialsResponse::default();
        for (user, change) in users {
            let (code, msg) = match change.error {
                Some(e) => e,
                None => match apply(&inner, &user, change).await {
                    Ok(()) => (errors::NONE, String::new()),
                    Err(e) => e,
                },
            };
            if code == errors::NONE {
                tracing::info!(user = %user, "SCRAM credentials altered");
            }
            resp.results.push(
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(user))
                    .with_error_code(code)
                    .with_error_message((code != 0).then(|| str_bytes(msg))),
            );
        }
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        let users: std::collections::BTreeSet<String> = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(
            users
                .into_iter()
                .map(|u| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(u))
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([results]);
}

/// Applies one user's checked change: deletions first (each must exist), then upsertions.
async fn apply(inner: &Inner, user: &str, change: UserChange) -> Result<(), (i16, String)> {
    let (meta, keys) = (inner.env.meta.as_ref(), &inner.env.keys);
    let storage = |e: credentials::CredentialError| (errors::KAFKA_STORAGE_ERROR, e.to_string());
    if let Err(e) = credentials::check_user(user) {
        return Err((errors::UNACCEPTABLE_CREDENTIAL, e.to_string()));
    }
    for m in &change.deletions {
        if credentials::get(meta, keys, *m, user).await.map_err(storage)?.is_none() {
            return Err((
                errors::RESOURCE_NOT_FOUND,
                format!(
                    "Attempt to delete a user credential that does not exist: {user} {}",
                    m.name()
                ),
            ));
        }
    }
    for m in &change.deletions {
        credentials::delete(meta, keys, *m, user).await.map_err(storage)?;
    }
    for (m, c) in &change.upsertions {
        credentials::put(meta, keys, *m, user, c).await.map_err(storage)?;
    }
    Ok(())
}
