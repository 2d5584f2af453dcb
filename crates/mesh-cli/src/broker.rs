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
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run(args: &BrokerArgs) -> anyhow::Result<ExitCode> {
    let BrokerCommand::SetAddress(args) = &args.command;
    let dir = args.mesh.dir()?;
    let genesis =
        Genesis::open(&dir).with_context(|| format!("reading the genesis in {}", dir.display()))?;
    let addresses = (!args.addresses.is_empty()).then_some(args.addresses.as_slice());
    let url = args.mesh.store_url()?;
    // Refused before anything is written: the store would hold addresses
    // no server of the cluster listens at.
    if genesis.replicas > 1 {
        genesis.move_broker(args.port, addresses)?;
    }
    // The store first: a store that refuses leaves the genesis as it was.
    let urls = {
        let probe = Genesis {
            port: args.port,
            addresses: addresses.map_or_else(|| genesis.addresses.clone(), <[String]>::to_vec),
            ..genesis.clone()
        };
        probe.bus_urls()
    };
    crate::block_on(async {
        let store = open_store_to_write(&url).await?;
        let r = store.set_bus_urls(&urls).await;
        store.close().await;
        anyhow::Ok(r?)
    })??;
    let moved = genesis.move_broker(args.port, addresses)?;
    output::print(&format!("broker addresses: {}\n", urls.join(", ")))?;
    output::note(format_args!(
        "every node is declared them and follows; once `mesh status` shows the nodes ready, start the broker again on {} (it listens on port {} from then on)",
        moved.path(mesh_controller::genesis::BROKER_CONF).display(),
        moved.port
    ));
    Ok(ExitCode::SUCCESS)
}
