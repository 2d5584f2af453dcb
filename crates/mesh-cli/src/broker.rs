//! `mesh broker set-address`: move the broker to another port (or other
//! addresses) without enrolling any node again. The genesis's bus file and
//! the broker's own configuration are written anew, the addresses recorded;
//! the controller then declares them to every node, and each host follows
//! the broker there, keeping its key. Nodes pin the broker's certificate,
//! not its names, so the certificate stays.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use mesh_controller::Genesis;
use mesh_controller::broker_address::set_broker_address;
use mesh_core::operation::Operation;

use crate::authority::open_store_to_write;
use crate::output;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct BrokerArgs {
    #[command(subcommand)]
    pub command: BrokerCommand,
}

#[derive(Debug, Subcommand)]
pub enum BrokerCommand {
    /// Move the broker to another client port, or other addresses: every
    /// node is declared them and follows, keeping its enrolment. Start the
    /// broker again on its configuration once the nodes have them.
    #[command(after_help = "Examples:
  mesh broker set-address --port 4333
  mesh broker set-address --port 4222 --address 10.0.0.7")]
    SetAddress(SetAddressArgs),
}

#[derive(Debug, Args)]
pub struct SetAddressArgs {
    /// The broker's new client port.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// The addresses nodes reach the broker at (IP or DNS name), replacing
    /// those given at genesis; none given: kept as they are.
    #[arg(long = "address")]
    pub addresses: Vec<String>,
    /// How long to wait for every node to apply the addresses before
    /// saying which have not.
    #[arg(long, default_value = "30s", value_parser = crate::node::parse_ttl)]
    pub timeout: std::time::Duration,
    /// Return once recorded, naming no node.
    #[arg(long, conflicts_with = "timeout")]
    pub no_wait: bool,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run(args: &BrokerArgs) -> anyhow::Result<ExitCode> {
    let BrokerCommand::SetAddress(args) = &args.command;
    let request = mesh_core::operation::wire::BrokerArgs {
        port: args.port,
        addresses: args.addresses.clone(),
    };
    if let Some(ctx) = args.mesh.remote()? {
        if !args.no_wait {
            output::note(
                "from your own machine the command returns once recorded (as --no-wait): `mesh status` names the nodes behind",
            );
        }
        let said = crate::remote::change(ctx, Operation::BrokerSetAddress, &request)?;
        output::print(&format!("{said}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let dir = args.mesh.dir()?;
    let genesis =
        Genesis::open(&dir).with_context(|| format!("reading the genesis in {}", dir.display()))?;
    let addresses = (!args.addresses.is_empty()).then_some(args.addresses.as_slice());
    let url = args.mesh.store_url()?;
    let (store, moved) = crate::block_on(async {
        let store = open_store_to_write(&url).await?;
        match set_broker_address(&genesis, &store, args.port, addresses).await {
            Ok(moved) => {
                if let Err(e) = crate::audit::record_local(
                    &store,
                    Operation::BrokerSetAddress,
                    serde_json::to_value(&request)?,
                )
                .await
                {
                    store.close().await;
                    return Err(e);
                }
                anyhow::Ok((store, moved))
            }
            Err(e) => {
                store.close().await;
                Err(anyhow::Error::from(e))
            }
        }
    })??;
    let urls = moved.urls;
    let port = args.port;
    let behind = match (&moved.conf, args.no_wait) {
        (Ok(_), false) => crate::block_on(followed(&store, &urls, args.timeout))?,
        _ => Ok(Vec::new()),
    };
    crate::block_on(store.close())?;
    let conf = moved.conf?;
    let behind = behind?;
    output::print(&format!("broker addresses: {}\n", urls.join(", ")))?;
    if args.no_wait {
        output::note(format_args!(
            "every node is declared them and follows; once `mesh status` names no node behind the broker, start the broker again on {} (it listens on port {port} from then on)",
            conf.display()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    if behind.is_empty() {
        output::note(format_args!(
            "every node has applied them: start the broker again on {} (it listens on port {port} from then on)",
            conf.display()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    // Such a host keeps the old addresses: once the broker has moved, it
    // cannot be told. It is the one to wait for.
    for b in &behind {
        output::note(format_args!(
            "node {} has not applied them (declaration {} carries them): start its host now, while the broker still listens where it was; if it cannot be, once the broker has moved run on it `mesh host --state DIR --broker {}`",
            b.node, b.sequence, urls[0]
        ));
    }
    output::note(format_args!(
        "start the broker again on {} once `mesh status` names no node behind it",
        conf.display()
    ));
    Ok(ExitCode::FAILURE)
}

/// Waits (within `timeout`) for the controller to declare the addresses
/// and for every enrolled node to report them applied; the nodes that have
/// not by then. A node the controller has not declared them to yet is
/// waited for as well.
async fn followed(
    store: &mesh_store::Store,
    urls: &[String],
    timeout: std::time::Duration,
) -> anyhow::Result<Vec<mesh_state::views::Behind>> {
    let revision = store.records_revision().await?;
    let deadline = std::time::Instant::now() + timeout;
    let progress =
        crate::progress::Progress::start("waiting for every node to apply the addresses");
    loop {
        let declared = store
            .declared_through()
            .await?
            .is_some_and(|d| d >= revision);
        let mut behind = Vec::new();
        for n in store.nodes().await? {
            if n.enrolled_at.is_none() {
                continue;
            }
            let d = store.latest_declaration(&n.name).await?;
            let r = store.latest_report(&n.name).await?;
            let sequence = d.as_ref().map_or(0, |d| d.version);
            let b = mesh_state::views::behind(
                n.name.as_str(),
                urls,
                d.as_ref().map(|d| (d.version, d.body.as_str())),
                r.as_ref().map(|r| r.report.declaration_version),
            );
            // Not declared yet counts as behind too: the wait is for the
            // host to have them.
            behind.extend(b.or_else(|| {
                (!declared).then(|| mesh_state::views::Behind {
                    node: n.name.to_string(),
                    sequence,
                    urls: urls.to_vec(),
                    rollout: None,
                })
            }));
        }
        if behind.is_empty() || std::time::Instant::now() > deadline {
            progress.finish(None);
            return Ok(behind);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
