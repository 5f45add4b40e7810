//! What the commands acting on a cluster share: where its metadata lives (`ClusterArgs`,
//! `open_metadata`) and how a `KEY=VALUE` setting is read (`parse_override`). Below every
//! `*_cmd` module: it imports none of them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use folio_client::LedgerClient;
use folio_meta::MetadataStore;
use folio_meta::keys::Keys;

/// Where a cluster's metadata lives: shared by the commands that act on a cluster.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The cluster's metadata: `etcd://host:port[,host:port…]` or `embedded:<dir>`.
    #[arg(long)]
    metadata: String,
    /// Key root in the metadata store.
    #[arg(long, default_value = "folio")]
    root: String,
    #[command(flatten)]
    access: crate::access::AccessArgs,
}

impl ClusterArgs {
    /// The metadata store as the console names it: its endpoints and root.
    pub fn describe(&self) -> String {
        format!("{} (root {})", self.metadata, self.root)
    }

    /// The metadata store, the key layout and a ledger client (5 s request timeout) that
    /// proves the cluster secret, if one is given.
    pub async fn connect(
        &self,
    ) -> Result<(std::sync::Arc<dyn folio_meta::MetadataStore>, Keys, LedgerClient), String> {
        let spec = self.metadata.replacen("etcd://", "etcd:", 1);
        let meta = open_metadata(&spec, &self.access.etcd()?).await?;
        let keys = Keys::new(self.root.clone());
        let client = LedgerClient::new(meta.clone(), keys.clone())
            .with_request_timeout(Duration::from_secs(5))
            .with_cluster_secret(self.access.cluster_secret()?);
        Ok((meta, keys, client))
    }
}

/// Opens the metadata store named by `spec` (`embedded:<dir>` or `etcd:<endpoints>`, the
/// latter with `etcd`'s user and TLS).
pub async fn open_metadata(
    spec: &str,
    etcd: &crate::access::EtcdOptions,
) -> Result<Arc<dyn MetadataStore>, String> {
    if let Some(dir) = spec.strip_prefix("embedded:") {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {dir}: {e}"))?;
        let s = folio_meta::embedded::EmbeddedStore::open(Path::new(dir))
            .map_err(|e| format!("metadata {spec}: {e}"))?;
        return Ok(Arc::new(s));
    }
    if let Some(eps) = spec.strip_prefix("etcd:") {
        return open_etcd(eps, etcd).await;
    }
    Err(format!("metadata = {spec:?}: expected \"embedded:<dir>\" or \"etcd:<host:port>,…\""))
}

#[cfg(feature = "etcd")]
async fn open_etcd(
    eps: &str,
    etcd: &crate::access::EtcdOptions,
) -> Result<Arc<dyn MetadataStore>, String> {
    let eps: Vec<String> = eps.split(',').map(str::to_string).collect();
    let s = folio_meta::etcd::EtcdStore::connect_with(&eps, &etcd.access())
        .await
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(s))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _eps: &str,
    _etcd: &crate::access::EtcdOptions,
) -> Result<Arc<dyn MetadataStore>, String> {
    Err("this folio was built without etcd support: rebuild with `--features etcd`".into())
}

/// Parses `KEY=VALUE`, reading VALUE as TOML and falling back to a plain string.
pub fn parse_override(s: &str) -> Result<(String, toml::Value), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("--override {s:?} is not KEY=VALUE"))?;
    let value = format!("v = {v}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}
