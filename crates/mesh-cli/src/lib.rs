//! The `mesh` command line: parses arguments and hands each subcommand to the
//! library that carries it out.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod authority;
pub mod check;
pub mod files;
pub mod fleet;

/// mesh: a self-hosted control plane for a fleet of machines, whose every
/// principal's authority on the bus is derived from declarations.
#[derive(Debug, Parser)]
#[command(name = "mesh", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of this mesh binary.
    Version,
    /// Check manifests one by one and as a catalogue (exit 1 on any error).
    Check(check::CheckArgs),
    /// Derive and explain principals' permissions; compose the users file.
    Authority(authority::AuthorityArgs),
    /// Record a fleet (nodes, assignments, persons, tokens) from a file.
    Fleet(FleetCommand),
}

#[derive(Debug, clap::Args)]
pub struct FleetCommand {
    #[command(subcommand)]
    pub command: FleetSubcommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetSubcommand {
    /// Record the fleet a file describes and mint missing credentials.
    Load(fleet::FleetArgs),
}

/// Parses `args` and runs the chosen subcommand; the exit code is the command's.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    match cli.command {
        Command::Version => {
            println!("mesh {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Check(args) => check::run(&args).unwrap_or_else(edge_error),
        Command::Authority(args) => authority::run(&args).unwrap_or_else(edge_error),
        Command::Fleet(FleetCommand {
            command: FleetSubcommand::Load(args),
        }) => fleet::run(&args).unwrap_or_else(edge_error),
    }
}

/// Prints an error that ended a command (with its causes) and exits 2.
fn edge_error(e: anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(2)
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
