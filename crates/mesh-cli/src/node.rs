//! `mesh node add|forget` and `mesh nodes`: the nodes of the mesh, and the
//! one-time token a new node enrols with.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_controller::Genesis;
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{NameArgs, NodeAddArgs, NodeSetArgs};
use mesh_core::token::Token;
use mesh_state::views::NodeView;

use crate::authority::{open_existing_store, open_store_to_write};
use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    pub command: NodeCommand,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Record a node (if new) and print a one-time enrolment token for it.
    #[command(after_help = "Examples:
  mesh node add n1
  mesh node add n2 --ttl 10m > n2.token")]
    Add(AddArgs),
    /// Forget a node: its host's and modules' credentials, assignments,
    /// tokens, declarations and reports.
    #[command(after_help = "Example:\n  mesh node forget n1")]
    Forget(ForgetArgs),
    /// Where other nodes reach a node, and the ports it gives seats: what
    /// `${seat:SEAT:PORT}` is filled with (the node's given port, over the
    /// manifest's number).
    #[command(after_help = "Examples:
  mesh node set n1 --address 10.0.0.7
  mesh node set n1 --port db=6432
  mesh node set n1 --no-port db")]
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub name: String,
    /// Where other nodes reach it: an IP address or DNS name.
    #[arg(long)]
    pub address: Option<String>,
    /// SEAT=PORT: the port this node gives that seat's holder on it.
    #[arg(long = "port", value_name = "SEAT=PORT", value_parser = parse_seat_port)]
    pub ports: Vec<(Name, u16)>,
    /// SEAT: back to the manifest's number.
    #[arg(long = "no-port", value_name = "SEAT")]
    pub no_ports: Vec<String>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// `db=6432`.
fn parse_seat_port(s: &str) -> Result<(Name, u16), String> {
    const HELP: &str = "write SEAT=PORT, as db=6432";
    let (seat, port) = s.split_once('=').ok_or_else(|| format!("{s:?}: {HELP}"))?;
    let seat = Name::new(seat).map_err(|e| format!("{seat:?} is not a seat name: {e}"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{port:?} is not a port (1 to 65535); {HELP}"))?;
    Ok((seat, port))
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The node's name (lowercase letters, digits and '-').
    pub name: String,
    /// How long the token stays usable: a number with s, m, h or d.
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    pub ttl: Duration,
    /// The broker's certificate, if not the one genesis made (the token pins
    /// its DER SHA-256).
    #[arg(long, value_name = "PEM")]
    pub broker_cert: Option<PathBuf>,
    /// For a node recorded as enrolled whose host was never heard from (it
    /// gave up before it kept its enrolment): forget the host key it
    /// enrolled with and issue a new token; its assignments stay.
    #[arg(long)]
    pub reissue: bool,
    /// Where other nodes reach this node (IP address or DNS name); its host
    /// may say so itself with `mesh host --advertise`.
    #[arg(long)]
    pub address: Option<String>,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    pub name: String,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// `30s`, `10m`, `1h`, `7d`: a positive whole number and a unit (a token's
/// life, the store window's bound).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    const HELP: &str = "write a whole number and a unit: 30s, 10m, 1h or 7d";
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?}: {HELP}"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: {HELP}")),
    };
    if n == 0 {
        return Err(format!(
            "{s:?}: a token valid for no time cannot be used; {HELP}"
        ));
    }
    n.checked_mul(secs)
        .filter(|t| *t <= 365 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?}: at most a year (365d)"))
}

fn node_name(s: &str) -> anyhow::Result<Name> {
    Name::new(s).with_context(|| format!("{s:?} is not a node name"))
}

pub fn run(args: &NodeArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(async {
        match &args.command {
            NodeCommand::Add(a) => add(a).await,
            NodeCommand::Forget(a) => forget(a).await,
            NodeCommand::Set(a) => set(a).await,
        }
    })?
}

async fn add(args: &AddArgs) -> anyhow::Result<ExitCode> {
    let request = NodeAddArgs {
        node: node_name(&args.name)?,
        ttl_secs: args.ttl.as_secs(),
        reissue: args.reissue,
        address: args.address.clone(),
    };
    let node = &request.node;
    let token = if let Some(ctx) = args.mesh.remote()? {
        if args.broker_cert.is_some() {
            bail!(
                "--broker-cert is read on the controller's machine: from your own, the token pins the certificate the controller's genesis made"
            );
        }
        let (_, data) =
            crate::remote::ask_current(ctx, Operation::NodeAdd, serde_json::to_value(&request)?)
                .await?;
        let token = data
            .get("token")
            .and_then(|t| t.as_str())
            .context("the controller's answer to `node-add` carries no token")?;
        mesh_core::secret::Secret::new(token.to_string())
    } else {
        let dir = args.mesh.dir()?;
        let genesis = Genesis::open(&dir)
            .with_context(|| format!("reading the genesis in {}", dir.display()))?;
        // Read from the certificate on disk, never configured: a
        // fingerprint typed in would be a second truth that drifts.
        let cert_sha256 = match &args.broker_cert {
            Some(p) => mesh_bus::fingerprint_of_pem_file(p)?,
            None => genesis.cert_sha256.clone(),
        };
        let store = open_store_to_write(&args.mesh.store_url()?).await?;
        let result = async {
            let issued = mesh_state::operations::node_add(&store, &request).await?;
            crate::audit::record_local(&store, Operation::NodeAdd, serde_json::to_value(&request)?)
                .await?;
            // A mesh moved onto another bus: the node enrols there.
            let urls = store.moved_bus_urls().await?;
            anyhow::Ok((issued, urls))
        }
        .await;
        store.close().await;
        let (issued, moved_urls) = result?;
        Token {
            bus_urls: moved_urls.unwrap_or_else(|| genesis.bus_urls()),
            cert_sha256,
            controller_key: genesis.signing_key.clone(),
            node: node.clone(),
            enrolment_seed: issued.secret,
            expires_at: u64::try_from(issued.expires_at).unwrap_or(0),
        }
        .encode()
    };
    // The token alone on stdout, so `> file` or a pipe carries nothing else.
    output::print(&format!("{}\n", token.expose()))?;
    output::note(format_args!(
        "token for node {node}, usable once within {}: on the node give it on standard input, `mesh host --token - < FILE`, or in MESH_TOKEN, never as an argument (any user of that machine can read a command line); a controller must be running",
        humane(args.ttl)
    ));
    Ok(ExitCode::SUCCESS)
}

async fn set(args: &SetArgs) -> anyhow::Result<ExitCode> {
    let request = NodeSetArgs {
        node: node_name(&args.name)?,
        address: args.address.clone(),
        ports: args.ports.clone(),
        no_ports: args
            .no_ports
            .iter()
            .map(|s| Name::new(s).with_context(|| format!("{s:?} is not a seat name")))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    let value = serde_json::to_value(&request)?;
    let said = crate::operate::change(&args.mesh, Operation::NodeSet, value, |store| async move {
        let r = mesh_state::operations::node_set(&store, &request).await;
        (store, r)
    })
    .await?;
    output::print(&format!("{said}\n"))?;
    Ok(ExitCode::SUCCESS)
}

async fn forget(args: &ForgetArgs) -> anyhow::Result<ExitCode> {
    let name = node_name(&args.name)?;
    let value = serde_json::to_value(NameArgs { name: name.clone() })?;
    let said = crate::operate::change(
        &args.mesh,
        Operation::NodeForget,
        value,
        |store| async move {
            let r = mesh_state::operations::node_forget(&store, &name).await;
            (store, r)
        },
    )
    .await?;
    output::print(&format!("{said}\n"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_list(args: &NodesArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(list(args))?
}

async fn list(args: &NodesArgs) -> anyhow::Result<ExitCode> {
    let rows: Vec<NodeView> = if let Some(ctx) = args.mesh.remote()? {
        crate::remote::read(ctx, mesh_core::operation::Operation::Nodes).await?
    } else {
        let store = open_existing_store(&args.mesh.store_url()?).await?;
        let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
        let read = mesh_state::views::nodes(&store, now).await;
        store.close().await;
        read?
    };
    match args.output {
        ListFormat::Json => crate::output::print_json(&rows)?,
        ListFormat::Text => print_table(&rows)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(rows: &[NodeView]) -> anyhow::Result<()> {
    let mut out = output::Stdout::lock();
    if rows.is_empty() {
        out.line("no nodes; add one with `mesh node add <name>`")?;
        out.flush()?;
        return Ok(());
    }
    let now = mesh_store::now_ms();
    let width = rows.iter().map(|r| r.node.len()).max().unwrap_or(4).max(4);
    let addr_width = rows
        .iter()
        .map(|r| r.address.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(7)
        .max(7);
    out.line(format_args!(
        "{:<width$}  {:<12}  {:<7}  {:<10}  {:<addr_width$}  HOST KEY",
        "NODE", "STATE", "LIVE", "LAST SEEN", "ADDRESS"
    ))?;
    for r in rows {
        let seen = match r.last_seen_at {
            Some(at) => format!(
                "{} ago",
                humane(Duration::from_millis((now - at).max(0) as u64))
            ),
            None => "never".into(),
        };
        out.line(format_args!(
            "{:<width$}  {:<12}  {:<7}  {:<10}  {:<addr_width$}  {}",
            r.node,
            r.state,
            r.liveness,
            seen,
            r.address.as_deref().unwrap_or("-"),
            r.host_key.as_deref().unwrap_or("-")
        ))?;
        for (seat, port) in &r.ports {
            out.line(format_args!("{:width$}    port {port} for seat {seat}", ""))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `45s`, `12m`, `3h`, `2d`: the largest whole unit.
pub(crate) fn humane(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_a_number_and_a_unit() {
        assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_ttl("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_ttl("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "h", "10", "1.5h", "-1h", "1 h", "1w", "0s"] {
            let e = parse_ttl(bad).unwrap_err();
            assert!(e.contains("30s, 10m, 1h or 7d"), "{bad}: {e}");
        }
        assert!(parse_ttl("366d").unwrap_err().contains("at most a year"));
        assert!(
            parse_ttl("99999999999999999999d")
                .unwrap_err()
                .contains("30s")
        );
    }

    #[test]
    fn durations_read_in_their_largest_unit() {
        assert_eq!(humane(Duration::from_secs(59)), "59s");
        assert_eq!(humane(Duration::from_secs(61)), "1m");
        assert_eq!(humane(Duration::from_secs(7200)), "2h");
        assert_eq!(humane(Duration::from_secs(86_400 * 3)), "3d");
    }
}
