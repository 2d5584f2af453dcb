//! `mesh host --token TOKEN [--state DIR]`: enrols this machine as the
//! token's node, then runs it; `mesh host [--state DIR]` runs an enrolled
//! host again. A daemon: it runs until SIGTERM or SIGINT.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use mesh_core::secret::Secret;
use mesh_core::token::Token;
use mesh_files::lock::{Claim, DirLock};
use mesh_host::{EnrolOptions, HostOptions, HostState};

use crate::shutdown::{self, Signals};
use crate::{logging, output};

#[derive(Debug, Args)]
pub struct HostArgs {
    /// The enrolment token `mesh node add` printed (`-`: read it from
    /// standard input). Without it, the enrolled host in --state runs.
    // A secret: never shown by --help, and Debug of the arguments hides it.
    #[arg(long, env = "MESH_TOKEN", hide_env_values = true, value_parser = secret)]
    pub token: Option<Secret>,
    /// The host's state directory (created 0700): its keys and host.json.
    #[arg(long, default_value = ".mesh-host")]
    pub state: PathBuf,
    /// Where other nodes reach this node (IP address or DNS name): what a
    /// module's `${seat:SEAT:PORT}` is filled with when this node holds the
    /// seat. Reported to the controller, and again whenever it changes.
    #[arg(long, value_parser = address)]
    pub advertise: Option<String>,
    /// The broker's addresses now (`tls://HOST:PORT`, repeatable), for a
    /// host that was down while the broker moved (`mesh broker
    /// set-address`), or left on RabbitMQ by a move onto NATS (`mesh
    /// rollout`): checked against the pinned certificate and this host's
    /// key, then recorded in its host.json.
    #[arg(long = "broker", value_name = "URL", conflicts_with = "token")]
    pub broker: Vec<String>,
}

fn address(s: &str) -> Result<String, String> {
    mesh_core::names::check_address(s).map(|()| s.to_string())
}

fn secret(s: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(s))
}

/// One host per state directory.
pub const CLAIM: Claim = Claim {
    holder: "mesh host",
    what: "the host state",
    option: "--state",
};

/// How long a host may take to stop once asked: its modules get their
/// declared grace (10 s unless a manifest says otherwise) before SIGKILL,
/// then the bus connection 2 s to drain. Past it, what is left is killed.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);

pub fn run(args: &HostArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    // A daemon serving several streams at once: heartbeats must not wait
    // behind a slow delivery.
    shutdown::block_on(host(args))?
}

fn read_token(given: &Secret) -> anyhow::Result<Token> {
    let text = if given.expose() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the token from standard input")?;
        Secret::new(text)
    } else {
        given.clone()
    };
    Ok(Token::decode(text.expose())?)
}

async fn host(args: &HostArgs) -> anyhow::Result<ExitCode> {
    let signals = Signals::install()?;
    // Named as given in messages; the state opened holds it absolute, so
    // the paths handed to modules (their key file, their working
    // directory) name the same place from theirs.
    let dir = &args.state;
    // Before anything is read or killed there: a second host on the
    // directory would kill the first one's modules as leftovers. Only an
    // enrolment makes the directory: without one, its absence is the error.
    let _lock = match args.token.is_some() || dir.is_dir() {
        true => Some(DirLock::acquire(dir, CLAIM)?),
        false => None,
    };
    force_kills_modules(&signals, dir);
    let state = match &args.token {
        Some(given) => {
            let token = read_token(given)?;
            let opts = EnrolOptions::default();
            let enrolled = tokio::select! {
                r = mesh_host::enrol(&token, dir, &opts) => r?,
                () = signals.first() => return Ok(ExitCode::SUCCESS),
            };
            output::daemon_line(output::print(&format!(
                "enrolled as node {}\n",
                enrolled.node
            )));
            enrolled
        }
        None => {
            let state = HostState::open(dir)?;
            match args.broker.is_empty() {
                true => state,
                false => mesh_host::point_at(&state, &args.broker).await?,
            }
        }
    };
    let ran = shutdown::bounded_after(
        signals.first(),
        STOP_LIMIT,
        mesh_host::run(
            &state,
            &HostOptions {
                advertise: args.advertise.clone(),
                ..HostOptions::default()
            },
            signals.first(),
        ),
    )
    .await;
    match ran {
        Some(r) => r?,
        None => {
            tracing::warn!(limit = ?STOP_LIMIT, "the host did not stop in time; killing its modules");
            kill_modules(dir);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// On a second signal the modules of the host in `dir` are killed at once.
pub fn force_kills_modules(signals: &Signals, dir: &Path) {
    let dir = dir.to_path_buf();
    signals.force_on_second(move || kill_modules(&dir));
}

/// SIGKILL to every module group the host in `dir` recorded, each leader
/// (a child of this process) reaped.
pub fn kill_modules(dir: &Path) {
    for pid in mesh_host::driver::kill_recorded(dir) {
        shutdown::reap(pid);
    }
    mesh_host::apply::kill_containers(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_the_arguments_hides_the_token() {
        let args = HostArgs {
            token: Some(Secret::new("mesh1.very-secret-token")),
            state: ".mesh-host".into(),
            advertise: None,
            broker: Vec::new(),
        };
        assert!(!format!("{args:?}").contains("very-secret"));
    }
}
