//! `folio acls …`: Kafka ACLs, written to and read from the cluster's metadata store
//! directly (the same records as CreateAcls and DeleteAcls; brokers see a change through
//! their watch at once). Checked by brokers started with `--authorizer`.

use folio_broker::acl::{
    self, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType,
};

use crate::cluster::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

/// One binding, as `kafka-acls` takes it.
#[derive(Debug, clap::Args)]
struct Binding {
    /// The principal, `User:NAME` or `User:*`.
    #[arg(long)]
    principal: String,
    /// Topic, Group, Cluster or TransactionalId.
    #[arg(long = "resource-type")]
    resource_type: String,
    /// The resource's name (`*` for every one of its type; the cluster is
    /// `kafka-cluster`).
    #[arg(long)]
    name: String,
    /// Literal or Prefixed.
    #[arg(long, default_value = "Literal")]
    pattern: String,
    /// Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite, ClusterAction or All (repeatable).
    #[arg(long = "operation", required = true)]
    operations: Vec<String>,
    /// Deny instead of allow.
    #[arg(long)]
    deny: bool,
    /// The client address the binding applies to (`*`: any).
    #[arg(long, default_value = "*")]
    host: String,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Adds bindings (one per operation).
    Add(Binding),
    /// Every binding: resource, pattern, principal, host, operation, permission.
    List,
    /// Removes the bindings that match exactly.
    Delete(Binding),
}

fn bindings(b: &Binding) -> Result<Vec<AclBinding>, String> {
    let resource_type = ResourceType::parse(&b.resource_type).ok_or_else(|| {
        format!("--resource-type {:?}: Topic, Group, Cluster or TransactionalId", b.resource_type)
    })?;
    let pattern = PatternType::parse(&b.pattern)
        .ok_or_else(|| format!("--pattern {:?}: Literal or Prefixed", b.pattern))?;
    let permission = if b.deny { Permission::Deny } else { Permission::Allow };
    let mut out = Vec::new();
    for op in &b.operations {
        let operation =
            Operation::parse(op).ok_or_else(|| format!("--operation {op:?} is unknown"))?;
        let binding = AclBinding {
            resource_type,
            pattern,
            name: b.name.clone(),
            principal: b.principal.clone(),
            host: b.host.clone(),
            operation,
            permission,
        };
        binding.validate()?;
        out.push(binding);
    }
    Ok(out)
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, _client) = args.cluster.connect().await?;
        match args.command {
            Command::Add(b) => {
                for binding in bindings(&b)? {
                    acl::create(meta.as_ref(), &keys, &binding).await.map_err(|e| e.to_string())?;
                    println!("added {}", show(&binding));
                }
            }
            Command::List => {
                let all = acl::list(meta.as_ref(), &keys).await.map_err(|e| e.to_string())?;
                if all.is_empty() {
                    println!("no ACLs");
                }
                for b in all {
                    println!("{}", show(&b));
                }
            }
            Command::Delete(b) => {
                let mut n = 0;
                for binding in bindings(&b)? {
                    let f = AclFilter {
                        resource_type: binding.resource_type.code(),
                        name: Some(binding.name.clone()),
                        pattern: binding.pattern.code(),
                        principal: Some(binding.principal.clone()),
                        host: Some(binding.host.clone()),
                        operation: binding.operation.code(),
                        permission: binding.permission.code(),
                    };
                    let deleted = acl::delete(meta.as_ref(), &keys, |x| f.matches(x))
                        .await
                        .map_err(|e| e.to_string())?;
                    for d in deleted {
                        println!("deleted {}", show(&d));
                        n += 1;
                    }
                }
                if n == 0 {
                    return Err("no ACL matches".into());
                }
            }
        }
        Ok(())
    })
}

fn show(b: &AclBinding) -> String {
    format!(
        "{}:{}:{} principal={} host={} operation={} permission={}",
        b.resource_type.name(),
        b.pattern.name(),
        b.name,
        b.principal,
        b.host,
        b.operation.name(),
        b.permission.name()
    )
}
