//! The `mesh` command line: parses arguments and hands each subcommand to the
//! library that carries it out.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod artifact;
pub mod assign;
pub mod audit;
pub mod authority;
pub mod broker;
pub mod build;
pub mod bus;
pub mod call;
pub mod check;
pub mod completions;
pub mod context;
pub mod controller;
pub mod deploy;
pub mod events;
pub mod files;
pub mod fleet;
pub mod graph;
pub mod host;
pub mod image;
pub mod init;
pub mod listings;
pub mod logging;
pub mod login;
pub mod logs;
pub mod node;
pub mod operate;
pub mod output;
pub mod person;
pub mod plan;
pub mod progress;
pub mod registering;
pub mod remote;
pub mod rollout;
pub mod seats;
pub mod secret;
pub mod shutdown;
pub mod state;
pub mod status;
pub mod up;
pub mod upload;
pub mod wait;

/// mesh: a self-hosted control plane for a fleet of machines, whose every
/// principal's authority on the bus is derived from declarations.
#[derive(Debug, Parser)]
#[command(name = "mesh", version, about, long_about = None, after_help = "Examples:
  mesh init
  mesh controller
  mesh node add n1
  mesh status
  mesh nodes
  mesh check examples/catalogue
  mesh fleet load examples/fleet.toml --catalogue examples/catalogue
  mesh authority explain person_bob --catalogue examples/catalogue
  mesh authority compose --catalogue examples/catalogue --out broker/users.conf
  mesh host --token - --state /var/lib/mesh-host < token.txt")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of this mesh binary.
    #[command(after_help = "Example:\n  mesh version")]
    Version,
    /// Check manifests one by one and as a catalogue (exit 1 on any error).
    #[command(after_help = "Examples:
  mesh check examples/catalogue
  mesh check examples/catalogue/audit-log/mesh.toml --format json")]
    Check(check::CheckArgs),
    /// Derive and explain principals' permissions; compose the users file.
    #[command(after_help = "Examples:
  mesh authority explain person_bob --catalogue examples/catalogue
  mesh authority compose --catalogue examples/catalogue --out broker/users.conf")]
    Authority(authority::AuthorityArgs),
    /// Genesis: the controller's keys, the broker's certificate and
    /// configuration, the store, and the first users file.
    #[command(after_help = "Examples:
  mesh init
  mesh init --dir /var/lib/mesh --address 10.0.0.5 --address ctl.example.net")]
    Init(init::InitArgs),
    /// The whole mesh on this machine: genesis, broker, controller, a local
    /// host, the example catalogue's runnable modules (until Ctrl-C).
    #[command(after_help = "Examples:
  mesh up
  mesh up --dir /tmp/mesh --catalogue examples/catalogue --port 4333")]
    Up(up::UpArgs),
    /// Run the controller: the users file, the bus objects, enrolments and
    /// heartbeats (until SIGTERM or SIGINT).
    #[command(after_help = "Examples:
  mesh controller
  mesh controller --http 127.0.0.1:7420
  mesh controller --dir /var/lib/mesh --store postgres://mesh@db/mesh")]
    Controller(controller::ControllerArgs),
    /// Add a node and print its one-time enrolment token; forget a node.
    #[command(after_help = "Examples:
  mesh node add n1
  mesh node add n2 --ttl 10m > n2.token
  mesh node forget n1")]
    Node(node::NodeArgs),
    /// Secrets a module uses: recorded sealed, never shown again.
    #[command(after_help = "Examples:
  mesh secret set db-password < db-password.txt
  mesh secret list
  mesh secret remove db-password")]
    Secret(secret::SecretArgs),
    /// The code modules run: files kept in the bus under their digest,
    /// recorded under a version of their module.
    #[command(after_help = "Examples:
  mesh artifact put target/release/audit-log --module audit --name audit-log
  mesh artifact list
  mesh artifact get artifact-store://audit/audit-log@sha256:HEX -o audit-log")]
    Artifact(artifact::ArtifactArgs),
    /// Build a module's revision on a build machine and wait for it (the
    /// version is the commit; `mesh assign` then pins it).
    #[command(after_help = "Examples:
  mesh build hello
  mesh build hello@v1.2
  mesh build hello@main --no-wait")]
    Build(build::BuildArgs),
    /// The builds the controller recorded, newest first.
    #[command(after_help = "Examples:\n  mesh builds\n  mesh builds hello --output json")]
    Builds(build::BuildsArgs),
    /// Run a build machine: the module holding mesh-build-machine, started
    /// by its host (`[run] command = [\"${artifact:mesh}\", \"build-machine\"]`).
    #[command(after_help = "Example:\n  mesh build-machine --cache build-cache --time-limit 20m")]
    BuildMachine(build::BuildMachineArgs),
    /// The broker's addresses: move it without enrolling any node again.
    #[command(after_help = "Example:\n  mesh broker set-address --port 4333")]
    Broker(broker::BrokerArgs),
    /// Register a catalogue's manifests (what the mesh can run), or draw it.
    #[command(after_help = "Examples:
  mesh catalogue register examples/catalogue
  mesh catalogue graph --format svg > catalogue.svg
  mesh catalogue graph --versions --format svg > versions.svg")]
    Catalogue(assign::CatalogueArgs),
    /// Run a registered module on a node (the controller declares it there).
    #[command(after_help = "Examples:
  mesh assign echo n1
  mesh assign notifier n1 --dry-run
  mesh assign echo n1 --wait --timeout 2m
  mesh assign postgres n2 --move-from n1")]
    Assign(assign::AssignArgs),
    /// Stop running a module on a node; its key is refused once recomposed.
    #[command(after_help = "Examples:
  mesh unassign echo n1
  mesh unassign echo n1 --dry-run --output json")]
    Unassign(assign::AssignArgs),
    /// What a pending change would do before it is made: declarations per
    /// node and module, grants per principal with their causes, bus objects.
    #[command(after_help = "Examples:
  mesh plan assign notifier n1
  mesh plan unassign echo n1 --output json
  mesh plan register examples/catalogue")]
    Plan(plan::PlanArgs),
    /// What runs where: every assignment and its state in its node's newest
    /// report.
    #[command(after_help = "Examples:
  mesh modules
  mesh modules --output json")]
    Modules(listings::ModulesArgs),
    /// Move a module to a version over its nodes safely: a canary, then
    /// batches, each waiting for its nodes to stay healthy; a node that
    /// fails reverts every node touched (the active controller carries it
    /// out).
    #[command(after_help = "Examples:
  mesh deploy web --version v2
  mesh deploy web --version v3 --canary 1 --batch 25% --healthy-for 10s --deadline 5m
  mesh deploy web --version v3 --nodes n1,n2 --batch 1 --no-auto-revert")]
    Deploy(deploy::DeployArgs),
    /// Deployments, newest first, with where each is.
    #[command(after_help = "Examples:
  mesh deployments
  mesh deployments --module web --output json")]
    Deployments(deploy::DeploymentsArgs),
    /// One deployment node by node; pause, resume or revert it.
    #[command(after_help = "Examples:
  mesh deployment 3
  mesh deployment 3 --pause
  mesh deployment 3 --resume
  mesh deployment 3 --revert")]
    Deployment(deploy::DeploymentArgs),
    /// A node's reports, newest first: each module's state, refusals.
    #[command(after_help = "Examples:
  mesh reports n1
  mesh reports n1 --limit 3 --output json")]
    Reports(listings::ReportsArgs),
    /// The mesh on one screen: controller, broker, nodes and modules by
    /// state, the last composition, and what needs action. The controller is
    /// asked at the address it wrote into the mesh's directory, and must be
    /// this mesh's own.
    #[command(after_help = "Examples:
  mesh status
  mesh status --dir /var/lib/mesh
  mesh status --http 127.0.0.1:7420 --output json")]
    Status(status::StatusArgs),
    /// Move a mesh from RabbitMQ onto NATS: `check` says whether it can,
    /// naming each missing thing and its next step; `--confirm` runs the
    /// check, refuses unless it passes, and prints the move's plan.
    #[command(
        after_help = "Examples:\n  mesh rollout check\n  mesh rollout --confirm\n  mesh rollout status"
    )]
    Rollout(rollout::RolloutArgs),
    /// Every declared seat and role: scope, accepts, emits, holders by node.
    #[command(after_help = "Examples:
  mesh seats
  mesh seats --output json")]
    Seats(seats::SeatsArgs),
    /// List the nodes: enrolled or not, last seen, host key.
    #[command(after_help = "Examples:
  mesh nodes
  mesh nodes --output json")]
    Nodes(node::NodesArgs),
    /// Record a fleet (nodes, assignments, persons, tokens) from a file.
    #[command(after_help = "Example:
  mesh fleet load examples/fleet.toml --catalogue examples/catalogue")]
    Fleet(FleetCommand),
    /// Enrol this machine as a node with a token, then run its host agent;
    /// without a token, run the host already enrolled in --state.
    #[command(after_help = "Examples:
  mesh host --token mesh2.eyJi... --state /var/lib/mesh-host
  mesh host --token - < token.txt
  mesh host --state /var/lib/mesh-host
  mesh host --state /var/lib/mesh-host --broker tls://10.0.0.5:4333")]
    Host(host::HostArgs),
    /// Operators: their keys and the tools each may call.
    #[command(after_help = "Examples:
  mesh person key --out ada.seed
  mesh person add ada --tools '*' --nkey UAB3…
  mesh person remove ada")]
    Person(person::PersonArgs),
    /// The audit trail: every change to the records, who made it, what it
    /// produced; oldest first.
    #[command(after_help = "Examples:
  mesh audit
  mesh audit --since 2h --person ada
  mesh audit --output json")]
    Audit(audit::AuditArgs),
    /// On a person's own machine: spend the login token `mesh person add
    /// --role` printed (the key is made here), or prove a key made before;
    /// then write a context that commands without a mesh directory use.
    #[command(after_help = "Examples:
  mesh login < ada.token
  mesh login --person ada --key ada.seed --bus tls://10.0.0.1:4222 --pin 3f5a…")]
    Login(login::LoginArgs),
    /// The contexts `mesh login` wrote: list them, or use another.
    #[command(after_help = "Examples:
  mesh context list
  mesh context use prod")]
    Context(remote::ContextArgs),
    /// Call a tool as a person and print its answer.
    #[command(after_help = "Examples:
  mesh call greeter.greet '{\"name\": \"ada\"}' --as ada.seed
  mesh call greeter.count --as ada.seed --timeout 3s")]
    Call(call::CallArgs),
    /// A module's log on any node, from that node's host over the bus.
    #[command(after_help = "Examples:
  mesh logs echo
  mesh logs echo --node n2 --lines 5
  mesh logs echo --node n2 --follow")]
    Logs(logs::LogsArgs),
    /// Watch the events the mesh stores.
    #[command(after_help = "Example:\n  mesh events tail ticker.tick --all")]
    Events(events::EventsArgs),
    /// Print a shell completion script.
    #[command(after_help = "Examples:
  mesh completions bash > /etc/bash_completion.d/mesh
  mesh completions zsh > \"${fpath[1]}/_mesh\"
  mesh completions fish > ~/.config/fish/completions/mesh.fish")]
    Completions(completions::CompletionsArgs),
}

#[derive(Debug, clap::Args)]
pub struct FleetCommand {
    #[command(subcommand)]
    pub command: FleetSubcommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetSubcommand {
    /// Record the fleet a file describes and mint missing credentials.
    #[command(after_help = "Examples:
  mesh fleet load examples/fleet.toml --catalogue examples/catalogue
  mesh fleet load fleet.toml --catalogue catalogue --secrets-dir /root/mesh-secrets --store postgres://mesh@db/mesh")]
    Load(fleet::FleetArgs),
}

/// Parses `args` and runs the chosen subcommand; the exit code is the command's.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(dir_first(args)) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // A usage error: stderr, exit 2. A failed write has nowhere to go.
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
        // Help and version go to stdout like any other output.
        Err(e) => return help(&e).map_or_else(edge_error, |()| ExitCode::SUCCESS),
    };
    let result = match cli.command {
        Command::Version => output::print(&format!("mesh {}\n", env!("CARGO_PKG_VERSION")))
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::Check(args) => check::run(&args),
        Command::Authority(args) => authority::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Controller(args) => controller::run(&args),
        Command::Up(args) => up::run(&args),
        Command::Node(args) => node::run(&args),
        Command::Broker(args) => broker::run(&args),
        Command::Secret(args) => secret::run(&args),
        Command::Artifact(args) => artifact::run(&args),
        Command::Build(args) => build::run_build(&args),
        Command::Builds(args) => build::run_builds(&args),
        Command::BuildMachine(args) => build::run_build_machine(&args),
        Command::Nodes(args) => node::run_list(&args),
        Command::Status(args) => status::run(&args),
        Command::Rollout(args) => rollout::run(&args),
        Command::Seats(args) => seats::run(&args),
        Command::Modules(args) => listings::run_modules(&args),
        Command::Reports(args) => listings::run_reports(&args),
        Command::Deploy(args) => deploy::run_deploy(&args),
        Command::Deployments(args) => deploy::run_deployments(&args),
        Command::Deployment(args) => deploy::run_deployment(&args),
        Command::Catalogue(args) => assign::run_catalogue(&args),
        Command::Assign(args) => assign::run_assign(&args, true),
        Command::Unassign(args) => assign::run_assign(&args, false),
        Command::Plan(args) => plan::run(&args),
        Command::Fleet(FleetCommand {
            command: FleetSubcommand::Load(args),
        }) => fleet::run(&args),
        Command::Host(args) => host::run(&args),
        Command::Person(args) => person::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::Login(args) => login::login(&args),
        Command::Context(args) => remote::run_context(&args),
        Command::Call(args) => call::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::Events(args) => events::run(&args),
        Command::Completions(args) => completions::run(&args),
    };
    result.unwrap_or_else(edge_error)
}

/// `mesh --dir D nodes` as `mesh nodes --dir D`: the mesh's directory is
/// every command's own option, and where a person types it first (as
/// `git -C`), it is taken there too.
fn dir_first<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    let taken = match first {
        "--dir" if args.len() > 2 => 2,
        f if f.starts_with("--dir=") => 1,
        _ => return args,
    };
    let dir: Vec<OsString> = args.drain(1..1 + taken).collect();
    args.extend(dir);
    args
}

/// Prints clap's help or version text, styled only for a terminal.
fn help(e: &clap::Error) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let text = e.render();
    let text = if std::io::stdout().is_terminal() {
        text.ansi().to_string()
    } else {
        text.to_string()
    };
    Ok(output::print(&text)?)
}

/// Ends a command that failed: exit 2 with the error and its causes on one
/// line. A reader that closed stdout wanted no more: exit 0, silently.
fn edge_error(e: anyhow::Error) -> ExitCode {
    match e
        .chain()
        .find_map(|c| c.downcast_ref::<output::StdoutError>())
    {
        Some(s) if s.is_closed_pipe() => ExitCode::SUCCESS,
        // The context above a failed write adds nothing an operator can use.
        Some(s) => {
            output::note(format_args!("error: {s}"));
            ExitCode::from(2)
        }
        None => {
            output::note(format_args!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

/// Runs one command's future on a single-threaded runtime: a command is one
/// short sequence of store and bus calls.
fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    use anyhow::Context;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    Ok(rt.block_on(f))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Each command's help opens with its own description: a doc comment
    /// written above the wrong variant describes another command.
    #[test]
    fn each_command_is_described_as_itself() {
        let cli = super::Cli::command();
        let about = |name: &str| {
            cli.find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default()
        };
        assert_eq!(
            about("secret"),
            "Secrets a module uses: recorded sealed, never shown again"
        );
        assert_eq!(
            about("catalogue"),
            "Register a catalogue's manifests (what the mesh can run), or draw it"
        );
    }

    /// `--dir` before the command is the command's `--dir`.
    #[test]
    fn the_mesh_directory_may_come_before_the_command() {
        use clap::Parser as _;
        for args in [
            vec!["mesh", "--dir", "/m", "nodes"],
            vec!["mesh", "--dir=/m", "nodes"],
            vec!["mesh", "nodes", "--dir", "/m"],
        ] {
            let cli = super::Cli::try_parse_from(super::dir_first(args.clone()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            match cli.command {
                super::Command::Nodes(a) => {
                    assert_eq!(a.mesh.dir, Some("/m".into()), "{args:?}")
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        // A command that takes no mesh still says so.
        let e = super::Cli::try_parse_from(super::dir_first(["mesh", "--dir", "/m", "version"]));
        assert!(e.is_err());
    }

    /// A taken default HTTP address is not skipped: the controller serves
    /// on a free port instead, and the help says so.
    #[test]
    fn the_http_help_says_what_a_taken_default_address_does() {
        let mut cli = super::Cli::command();
        for name in ["controller", "up"] {
            let help = cli
                .find_subcommand_mut(name)
                .map(|c| c.render_long_help().to_string())
                .unwrap_or_default();
            assert!(
                help.contains("a free port") && !help.contains("skipped"),
                "{name}: {help}"
            );
        }
    }

    /// Every command's help ends with examples of that very command.
    #[test]
    fn every_command_has_an_example_of_itself() {
        fn visit(cmd: &clap::Command, path: &str, seen: &mut usize) {
            let help = cmd
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.starts_with("Example"),
                "`{path} --help` has no example"
            );
            let examples: Vec<&str> = help.lines().skip(1).collect();
            assert!(!examples.is_empty(), "`{path} --help`");
            for e in examples {
                assert!(e.trim_start().starts_with(path), "`{path} --help`: {e}");
            }
            *seen += 1;
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                visit(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut seen = 0;
        visit(&super::Cli::command(), "mesh", &mut seen);
        assert_eq!(
            seen, 65,
            "mesh, version, check, init, authority (2), up, controller, node (2), status, rollout (1), seats, nodes, modules, deploy, deployments, deployment, reports, catalogue (2), assign, unassign, plan (4), fleet (1), host, person (3), secret (4), audit, login, context (2), call, logs, events (1), artifact (3), build, builds, build-machine, completions"
        );
    }
}
