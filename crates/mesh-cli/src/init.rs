//! `mesh init [--dir D]`: genesis. Makes the controller's keys, a CA and the
//! broker's certificate, the broker's own configuration and the store,
//! records the controller's public key, and writes the first users file —
//! the controller alone — beside the broker's configuration, which includes
//! it. From then on the file is the controller's to compose.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use mesh_controller::genesis::{self, AmqpPorts, BusKind, Genesis, GenesisOptions};
use mesh_core::authority::{self, CONTROLLER};
use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::records::{ControllerSpec, Records};
use mesh_core::users_file::{self, UserCredential};

use crate::{authority as cli_authority, files, output};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The mesh's directory (created 0700; must not hold a genesis)
    /// [default: `MESH_DIR`, else `.mesh` in the working directory].
    #[arg(
        long,
        env = "MESH_DIR",
        hide_env = true,
        default_value = ".mesh",
        hide_default_value = true
    )]
    pub dir: PathBuf,
    /// Another address the broker is reached at (IP or DNS name), besides
    /// 127.0.0.1 and localhost; put in its certificate. May be repeated.
    #[arg(long = "address")]
    pub addresses: Vec<String>,
    /// The bus the mesh runs on, for good: NATS with JetStream, or AMQP
    /// (RabbitMQ, one server).
    #[arg(long, default_value = "nats", value_parser = parse_bus)]
    pub bus: BusKind,
    /// The broker's client port on 127.0.0.1 [default: 4222 on NATS, 5671 on AMQP].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// RabbitMQ's management API port, on 127.0.0.1 [default: --port + 10000].
    #[arg(long, requires_all = ["epmd_port", "dist_port"], value_parser = clap::value_parser!(u16).range(1..))]
    pub management_port: Option<u16>,
    /// RabbitMQ's Erlang port mapper's port [default: --port + 30000].
    #[arg(long, requires_all = ["management_port", "dist_port"], value_parser = clap::value_parser!(u16).range(1..))]
    pub epmd_port: Option<u16>,
    /// RabbitMQ's distribution port [default: --port + 20000].
    #[arg(long, requires_all = ["management_port", "epmd_port"], value_parser = clap::value_parser!(u16).range(1..))]
    pub dist_port: Option<u16>,
    /// How many servers the broker is (1, 3 or 5; more than one: a NATS
    /// cluster, every stream kept on each). With no --address, all run on this machine at --port and
    /// the ports after it; else give one --address per server, each on its
    /// own machine at --port, routing to the others at 6222.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,
    /// The store (`sqlite://PATH` or `postgres://...`); default: `mesh.db`
    /// in the state directory.
    // The URL may carry the database password: `--help` must not print it.
    #[arg(long, env = "MESH_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// A file holding the store's URL (its password on no command line).
    #[arg(
        long,
        env = "MESH_STORE_FILE",
        value_name = "FILE",
        conflicts_with = "store"
    )]
    pub store_file: Option<PathBuf>,
}

fn parse_bus(s: &str) -> Result<BusKind, String> {
    s.parse()
}

impl InitArgs {
    /// The port given, or the bus's own.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.bus {
            BusKind::Nats => 4222,
            BusKind::Amqp => 5671,
        })
    }

    /// RabbitMQ's other ports, when given.
    fn amqp_ports(&self) -> anyhow::Result<Option<AmqpPorts>> {
        let given = match (self.management_port, self.epmd_port, self.dist_port) {
            (Some(management), Some(epmd), Some(dist)) => Some(AmqpPorts {
                management,
                epmd,
                dist,
            }),
            _ => None,
        };
        if given.is_some() && self.bus != BusKind::Amqp {
            bail!(
                "--management-port, --epmd-port and --dist-port are RabbitMQ's: give them with --bus amqp, or leave them out"
            );
        }
        Ok(given)
    }
}

pub fn run(args: &InitArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(init(args))?
}

async fn init(args: &InitArgs) -> anyhow::Result<ExitCode> {
    let default_db = args.dir.join("mesh.db");
    let url = match (&args.store, &args.store_file) {
        (Some(url), _) => url.clone(),
        (None, Some(file)) => crate::state::read_store_file(file)?,
        (None, None) => {
            // A store beside a new genesis would adopt another mesh's records.
            if default_db.exists() {
                bail!(
                    "{} already holds a store; a new genesis beside it would make a second controller for its records: use that mesh, or choose an empty --dir",
                    default_db.display()
                );
            }
            format!("sqlite://{}", default_db.display())
        }
    };
    shared_store(args.replicas, &args.addresses, &url)?;
    let opts = GenesisOptions {
        port: args.port(),
        replicas: args.replicas,
        bus: args.bus,
        amqp_ports: args.amqp_ports()?,
    };
    let (genesis, users) = make_with(&args.dir, &args.addresses, &opts, &url).await?;
    // A store other than the directory's own `mesh.db` is named in the
    // directory, beside the keys (0600, as they are): every command and
    // controller given the directory — on each machine it is copied to —
    // reads it there, instead of opening an empty `mesh.db` of its own.
    let named = (url != format!("sqlite://{}", default_db.display()))
        .then(|| args.dir.join(crate::state::STORE_URL_FILE));
    if let Some(file) = &named {
        files::write_private(file, format!("{url}\n").as_bytes())
            .with_context(|| format!("writing the store's URL to {}", file.display()))?;
    }
    let mut out = output::Stdout::lock();
    out.line(format_args!("genesis in {}", args.dir.display()))?;
    out.line(format_args!(
        "  controller key   {}",
        genesis.controller_nkey
    ))?;
    out.line(format_args!("  signing key      {}", genesis.signing_key))?;
    out.line(format_args!(
        "  broker cert      sha256:{}",
        genesis.cert_sha256
    ))?;
    out.line(format_args!(
        "  store            {}",
        mesh_store::redact_url(&url)
    ))?;
    if let Some(file) = &named {
        out.line(format_args!("  store's URL in   {}", file.display()))?;
    }
    if genesis.bus == BusKind::Amqp {
        out.line(format_args!(
            "  bus              amqp (RabbitMQ) at {}",
            genesis.local_url()
        ))?;
        out.line(format_args!(
            "  broker config    {} (the controller's user in {})",
            genesis.path(genesis::RABBITMQ_CONF).display(),
            genesis.path(genesis::RABBITMQ_DEFINITIONS).display()
        ))?;
        out.line(format_args!(
            "start the mesh with: mesh up --dir {}",
            args.dir.display()
        ))?;
    } else if genesis.replicas == 1 {
        out.line(format_args!(
            "  broker config    {} (includes {})",
            genesis.path(genesis::BROKER_CONF).display(),
            users.display()
        ))?;
        out.line(format_args!(
            "start the broker with: nats-server -c {}",
            genesis.path(genesis::BROKER_CONF).display()
        ))?;
    } else {
        print_cluster(&mut out, &genesis, &users)?;
    }
    out.flush()?;
    if genesis.replicas > 1 && !genesis.addresses.is_empty() {
        // Each configuration names the certificate, key, CA and users file
        // by their paths here.
        output::note(format_args!(
            "each server's machine needs its configuration, {}, {}, {} and {} at the same paths as here",
            genesis.path(genesis::BROKER_CERT).display(),
            genesis.path(genesis::BROKER_KEY).display(),
            genesis.path(genesis::CA_CERT).display(),
            users.display(),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A clustered bus over several machines runs a controller beside each
/// server, and each machine's controller writes its server's users file
/// from the store: a SQLite file lives on one machine only, so the others
/// would never get one (their servers would refuse every new principal,
/// and no composition would ever be live). Refused before anything is
/// made, naming what to give instead.
fn shared_store(replicas: u8, addresses: &[String], url: &str) -> anyhow::Result<()> {
    if replicas > 1 && !addresses.is_empty() && url.starts_with("sqlite:") {
        bail!(
            "--replicas {replicas} with --address puts the bus's servers on {} machines, and a controller beside each must read one store: {} is a file on this machine alone. Give a PostgreSQL database every machine reaches: --store-file FILE holding postgres://mesh:PASSWORD@DBHOST:5432/mesh (README: \"Several machines\" makes one), or leave out --address to run every server here",
            addresses.len(),
            mesh_store::redact_url(url)
        );
    }
    Ok(())
}

/// A cluster's configurations, and the command that starts each server
/// (on its own machine, when addresses were given).
fn print_cluster(
    out: &mut output::Stdout,
    genesis: &Genesis,
    users: &std::path::Path,
) -> anyhow::Result<()> {
    let servers = genesis.servers();
    let names: Vec<String> = servers
        .iter()
        .map(|s| genesis.path(&s.conf).display().to_string())
        .collect();
    out.line(format_args!(
        "  broker configs   {} (each includes {})",
        names.join(", "),
        users.display()
    ))?;
    out.line(format_args!(
        "start the broker's {} servers with:",
        genesis.replicas
    ))?;
    for (s, conf) in servers.iter().zip(&names) {
        match &s.machine {
            Some(machine) => out.line(format_args!("  nats-server -c {conf}   (on {machine})"))?,
            None => out.line(format_args!("  nats-server -c {conf}"))?,
        }
    }
    Ok(())
}

/// [`make_with`] a single broker server at `port`.
pub async fn make(
    dir: &std::path::Path,
    addresses: &[String],
    port: u16,
    url: &str,
) -> anyhow::Result<(Genesis, PathBuf)> {
    let opts = GenesisOptions {
        port,
        ..GenesisOptions::default()
    };
    make_with(dir, addresses, &opts, url).await
}

/// Genesis in `dir` with its store at `url`: keys, certificates, broker
/// configuration, the controller's key recorded, and the first users file.
/// Returns the genesis and the users file's path.
pub async fn make_with(
    dir: &std::path::Path,
    addresses: &[String],
    opts: &GenesisOptions,
    url: &str,
) -> anyhow::Result<(Genesis, PathBuf)> {
    mesh_store::check_url(url)?;
    // A store on a server is reached first: one that cannot be (down, a
    // wrong password) leaves no half-made genesis that the next `mesh
    // init`, the fix given, would refuse.
    let early = match url.starts_with("sqlite:") {
        true => None,
        false => Some(cli_authority::open_store(url).await?),
    };
    let genesis = Genesis::create_with(dir, addresses, opts)?;
    let store = match early {
        Some(store) => store,
        None => cli_authority::open_store(url).await?,
    };
    let adopted = store
        .adopt_controller_key_if_absent(&genesis.controller_nkey)
        .await;
    store.close().await;
    if !adopted? {
        bail!(
            "the store {} already records a controller key of another genesis; the new keys in {} are not in use: remove them, and point --store at this mesh's own store",
            mesh_store::redact_url(url),
            dir.display()
        );
    }

    // The first users file admits the controller alone: no node, module or
    // person exists yet, and a file without its writer is refused. On
    // RabbitMQ the definitions genesis wrote admit it.
    let users = genesis.path(genesis::USERS_FILE);
    if genesis.bus == BusKind::Amqp {
        return Ok((genesis, users));
    }
    let catalogue = Catalogue::build(Vec::new(), Aliases::new());
    let principals =
        authority::derive(&catalogue, &Records::default(), &ControllerSpec::default())?;
    let credentials = BTreeMap::from([(
        CONTROLLER.to_string(),
        UserCredential::NKey(genesis.controller_nkey.clone()),
    )]);
    let file = users_file::compose(&principals, &credentials)?;
    files::write_private(&users, file.text.as_bytes())
        .with_context(|| format!("writing the first users file {}", users.display()))?;

    Ok((genesis, users))
}

#[cfg(test)]
mod tests {
    use super::shared_store;

    #[test]
    fn a_bus_over_machines_needs_a_store_they_all_reach() {
        let three = ["10.0.0.1".to_string(), "10.0.0.2".into(), "10.0.0.3".into()];
        let e = shared_store(3, &three, "sqlite:///var/lib/mesh/mesh.db")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("on 3 machines") && e.contains("postgres://") && e.contains("--store-file"),
            "{e}"
        );
        assert!(shared_store(3, &three, "postgres://mesh@db/mesh").is_ok());
        // One machine: every server reads the same file.
        assert!(shared_store(3, &[], "sqlite:///var/lib/mesh/mesh.db").is_ok());
        assert!(shared_store(1, &three[..1], "sqlite:///var/lib/mesh/mesh.db").is_ok());
    }
}
