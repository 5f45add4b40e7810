//! `folio users …`: the SCRAM users SASL listeners authenticate (PLAIN checks its password
//! against the same credential), written to and read from the cluster's metadata store
//! directly, as Kafka's `kafka-configs --entity-type users` does through
//! AlterUserScramCredentials. Brokers read a credential at each authentication, so a change
//! counts at once. Only salted credentials are stored, never a password.

use folio_broker::security::credentials;
use folio_broker::security::scram::{self, Credential, Mechanism};

use crate::cluster::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Creates a user or sets its password (a new salt each time).
    Add {
        name: String,
        /// The password (visible to other users of this machine in `ps`: prefer
        /// --password-file).
        #[arg(long, conflicts_with = "password_file", required_unless_present = "password_file")]
        password: Option<String>,
        /// A file whose first line is the password.
        #[arg(long)]
        password_file: Option<std::path::PathBuf>,
        /// SCRAM-SHA-512, SCRAM-SHA-256 or both (the default: any client finds its own).
        #[arg(long, default_value = "both")]
        mechanism: String,
        /// PBKDF2 iterations (4096..=16384).
        #[arg(long, default_value_t = scram::ITERATIONS_MIN)]
        iterations: u32,
    },
    /// Every user and the mechanisms and iterations it has.
    List,
    /// Removes a user's credentials (every mechanism unless --mechanism); its open
    /// connections stay until they end or re-authenticate.
    Delete {
        name: String,
        #[arg(long, default_value = "both")]
        mechanism: String,
    },
}

fn mechanisms(s: &str) -> Result<Vec<Mechanism>, String> {
    if s.eq_ignore_ascii_case("both") {
        return Ok(Mechanism::SCRAM.to_vec());
    }
    match Mechanism::parse(s) {
        Some(m) if m != Mechanism::Plain => Ok(vec![m]),
        _ => Err(format!(
            "--mechanism {s:?}: expected SCRAM-SHA-512, SCRAM-SHA-256 or both (PLAIN uses the SCRAM credential)"
        )),
    }
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, _client) = args.cluster.connect().await?;
        match args.command {
            Command::Add { name, password, password_file, mechanism, iterations } => {
                credentials::check_user(&name)?;
                let iterations = scram::check_iterations(iterations as i64)?;
                let password = match (password, password_file) {
                    (Some(p), _) => p,
                    (None, Some(f)) => std::fs::read_to_string(&f)
                        .map_err(|e| format!("reading {}: {e}", f.display()))?
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                    (None, None) => return Err("give --password or --password-file".into()),
                };
                if password.is_empty() {
                    return Err("an empty password".into());
                }
                for m in mechanisms(&mechanism)? {
                    let c = Credential::new(m, &password, iterations);
                    credentials::put(meta.as_ref(), &keys, m, &name, &c)
                        .await
                        .map_err(|e| e.to_string())?;
                    println!("user {name}: {} credential set ({iterations} iterations)", m.name());
                }
            }
            Command::List => {
                let users =
                    credentials::list(meta.as_ref(), &keys).await.map_err(|e| e.to_string())?;
                if users.is_empty() {
                    println!("no users");
                }
                for (user, creds) in users {
                    let c: Vec<String> = creds
                        .iter()
                        .map(|(m, i)| format!("{} ({i} iterations)", m.name()))
                        .collect();
                    println!("{user}\t{}", c.join(", "));
                }
            }
            Command::Delete { name, mechanism } => {
                let mut any = false;
                for m in mechanisms(&mechanism)? {
                    if credentials::delete(meta.as_ref(), &keys, m, &name)
                        .await
                        .map_err(|e| e.to_string())?
                    {
                        println!("user {name}: {} credential removed", m.name());
                        any = true;
                    }
                }
                if !any {
                    return Err(format!("user {name} has no such credential"));
                }
            }
        }
        Ok(())
    })
}
