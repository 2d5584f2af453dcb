//! `mesh host --token TOKEN [--state DIR]`: enrols this machine as the
//! token's node, then runs it; `mesh host [--state DIR]` runs an enrolled
//! host again. A daemon: it runs until SIGTERM or SIGINT.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use mesh_core::secret::Secret;
use mesh_core::token::Token;
use mesh_host::{EnrolOptions, HostOptions, HostState};

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
}

fn secret(s: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(s))
}

pub fn run(args: &HostArgs) -> anyhow::Result<ExitCode> {
    logging::init();
    // A daemon serving several streams at once: heartbeats must not wait
    // behind a slow delivery.
    logging::daemon_runtime()?.block_on(host(args))
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
    let shutdown = logging::stop_signal();
    tokio::pin!(shutdown);
    let state = match &args.token {
        Some(given) => {
            let token = read_token(given)?;
            let opts = EnrolOptions::default();
            let enrolled = tokio::select! {
                r = mesh_host::enrol(&token, &args.state, &opts) => r?,
                () = &mut shutdown => return Ok(ExitCode::SUCCESS),
            };
            let mut out = output::Stdout::lock();
            out.line(format_args!("enrolled as node {}", enrolled.node))?;
            out.flush()?;
            enrolled
        }
        None => HostState::open(&args.state)?,
    };
    mesh_host::run(&state, &HostOptions::default(), shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_the_arguments_hides_the_token() {
        let args = HostArgs {
            token: Some(Secret::new("mesh1.very-secret-token")),
            state: ".mesh-host".into(),
        };
        assert!(!format!("{args:?}").contains("very-secret"));
    }
}
