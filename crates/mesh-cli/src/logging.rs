//! Logs of the daemons: one line per event on stderr, filtered by
//! `MESH_LOG` (e.g. `info`, `mesh_controller=debug`), info by default.

pub fn init() {
    use std::io::IsTerminal as _;
    // Off for the clients (NATS's, AMQP's): their connect, close and
    // refusal lines would drown ours (every composition's canary is
    // refused until the reload takes; an enrolment's user is refused once
    // spent), and every failure that matters is logged here with its
    // meaning.
    // PostgreSQL's notices ("relation … already exists, skipping") at
    // every start are no news.
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESH_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,async_nats=off,lapin=off,sqlx::postgres::notice=warn",
        )
    });
    // A second init (tests run commands in one process) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A line that cannot be written is dropped: left on, the
        // subscriber reports it with `eprintln!`, which panics on the same
        // closed stderr (`mesh up 2>&1 | tee` after Ctrl-C killed tee),
        // and the panic ends a daemon half-way through its stop.
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// As [`init`], warnings only by default: `mesh-bench` runs thousands of
/// hosts in its own process, whose every line would bury the table.
pub fn init_quiet() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error,async_nats=off,lapin=off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .with_target(false)
        .try_init();
}

/// Resolves on SIGTERM or SIGINT: a daemon's orderly stop.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // No handler could be installed: the default disposition still
        // ends the process, only without the orderly part.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// A multi-threaded runtime for a daemon.
pub fn daemon_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}
