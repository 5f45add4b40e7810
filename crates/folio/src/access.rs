//! What a process shows to the rest of its cluster: the cluster secret bookies require
//! (`folio_proto::auth`) and the user and TLS files of a secured etcd. Every command that
//! reaches a cluster takes the same flags, each also from its environment variable, so
//! one `export` covers a shell's commands. Below every `*_cmd` module: it imports none.

use std::path::PathBuf;

use folio_proto::auth::ClusterSecret;

/// The cluster secret and etcd credentials, as flags (or environment variables).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AccessArgs {
    /// A file holding the cluster secret the bookies require (at least 16 bytes; trailing
    /// white space is not part of it). Every bookie, broker and tool of a cluster gives the
    /// same file.
    #[arg(long, env = "FOLIO_CLUSTER_SECRET_FILE", value_name = "FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// etcd user (etcd's `auth enable`); the password comes from --etcd-password-file.
    #[arg(long, env = "FOLIO_ETCD_USER", requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// A file whose first line is the etcd user's password.
    #[arg(long, env = "FOLIO_ETCD_PASSWORD_FILE", value_name = "FILE", requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
    /// TLS to etcd: the CA (PEM) that signed etcd's certificate.
    #[arg(long, env = "FOLIO_ETCD_CA_FILE", value_name = "FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// TLS to etcd: a client certificate (PEM), for etcd's `--client-cert-auth`.
    #[arg(long, env = "FOLIO_ETCD_CERT_FILE", value_name = "FILE", requires = "etcd_key_file")]
    pub etcd_cert_file: Option<PathBuf>,
    /// TLS to etcd: the client certificate's key (PEM).
    #[arg(long, env = "FOLIO_ETCD_KEY_FILE", value_name = "FILE", requires = "etcd_cert_file")]
    pub etcd_key_file: Option<PathBuf>,
}

/// How to reach etcd, resolved (password read): what `open_metadata` takes.
#[derive(Clone, Default)]
pub struct EtcdOptions {
    pub user: Option<(String, String)>,
    pub ca_file: Option<PathBuf>,
    pub client: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("ca_file", &self.ca_file)
            .field("client", &self.client)
            .finish()
    }
}

impl AccessArgs {
    /// The cluster secret, read from its file, if one is given.
    pub fn cluster_secret(&self) -> Result<Option<ClusterSecret>, String> {
        self.cluster_secret_file
            .as_deref()
            .map(ClusterSecret::from_file)
            .transpose()
            .map_err(|e| e.to_string())
    }

    /// The etcd options, with the password read from its file.
    pub fn etcd(&self) -> Result<EtcdOptions, String> {
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(u), Some(p)) => Some((u.clone(), first_line(p, "password")?)),
            (None, None) => None,
            _ => return Err("give both --etcd-user and --etcd-password-file".into()),
        };
        if self.etcd_ca_file.is_none() && self.etcd_cert_file.is_some() {
            return Err("--etcd-cert-file needs --etcd-ca-file (TLS to etcd)".into());
        }
        let client = match (&self.etcd_cert_file, &self.etcd_key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err("give both --etcd-cert-file and --etcd-key-file".into()),
        };
        Ok(EtcdOptions { user, ca_file: self.etcd_ca_file.clone(), client })
    }
}

/// The first line of a file holding a password or token (`what`, for errors).
pub fn first_line(path: &std::path::Path, what: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the {what} file {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.is_empty() {
        return Err(format!("the {what} file {} is empty", path.display()));
    }
    Ok(line)
}

#[cfg(feature = "etcd")]
impl EtcdOptions {
    /// The etcd backend's form of these options.
    pub fn access(&self) -> folio_meta::etcd::EtcdAccess {
        folio_meta::etcd::EtcdAccess {
            user: self.user.clone(),
            tls: self
                .ca_file
                .clone()
                .map(|ca_file| folio_meta::etcd::EtcdTls { ca_file, client: self.client.clone() }),
        }
    }
}
