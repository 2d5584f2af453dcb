//! Carrying out a publication plan: each step exactly as `mesh-core` planned
//! it, deciding nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_bus::{BusConfig, ClientCredential, ConnectError, Secret};
use mesh_core::users_file::{self, CANARY_INBOX, PublishStep};
use tokio::time::Instant;

use crate::safe_write::{WriteError, write_private};

/// How the broker is asked to reload its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloader {
    /// SIGHUP to the broker's pid.
    Pid(u32),
    /// SIGHUP to the pid the broker wrote to this file (its `pid_file`),
    /// read at every signal: a restarted broker has a new pid.
    PidFile(PathBuf),
    /// SIGHUP to each server of a cluster that runs on this machine, by
    /// the pid file it wrote; a server whose file is absent runs elsewhere
    /// (its own machine's controller keeps its users file). At least one
    /// must be signalled.
    PidFiles(Vec<PathBuf>),
    /// A command that signals it, e.g. `nats-server --signal reload=<pid>`;
    /// it must exit 0.
    Command {
        program: PathBuf,
        args: Vec<OsString>,
    },
    /// Nothing is sent: a broker that watches its file reloads by itself.
    None,
}

/// Why a composition did not go live. A step that failed leaves the broker
/// on its previous file, which is why none of these is ever "done".
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("could not write the users file")]
    Write(#[from] WriteError),
    #[error("could not signal the broker (pid {pid}) to reload")]
    Signal {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "could not read the broker's pid from {path} (is the broker running with this configuration?)"
    )]
    PidFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not run the reload command {program}")]
    Command {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the reload command {program} failed ({status})")]
    CommandFailed {
        program: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error(
        "the broker did not admit this composition's canary within {waited:?}: the reload did not take, and the broker still serves an older users file (its log says why)"
    )]
    NotConfirmed {
        waited: Duration,
        /// The last refusal; none when every attempt ran out of time.
        #[source]
        last: Option<ConnectError>,
    },
    #[error(
        "server {server} did not admit this composition's canary within {waited:?}: it still serves an older users file (did its reload fail? its log says why)"
    )]
    NotAdmittedBy {
        server: String,
        waited: Duration,
        #[source]
        last: Option<ConnectError>,
    },
    #[error(
        "no server of the bus answered the canary ({servers}): none can be shown to serve the file"
    )]
    NoServerUp { servers: String },
    #[error("the canary could not connect to the bus")]
    Canary(#[source] ConnectError),
    #[error(
        "could not share the users file with the other machines' controllers through the store"
    )]
    Share(#[source] crate::composer::SourceError),
    #[error("the plan has no confirmation step, so nothing shows the broker serves the file")]
    Unconfirmed,
    #[error("the plan names canary {planned}, not the one this composition made")]
    ForeignCanary { planned: String },
}

/// What the executor needs besides the plan.
pub(crate) struct Target<'a> {
    pub users_file: &'a Path,
    pub reloader: &'a Reloader,
    /// Where the canary connects and which CA or pin it trusts.
    pub bus: &'a BusConfig,
    /// Every server of a cluster, each of which must admit the canary
    /// (one that does not answer at all is down, and reads the file when
    /// it starts); empty or one: `bus` alone.
    pub servers: &'a [String],
    pub confirm_within: Duration,
    pub canary: &'a nkeys::KeyPair,
    /// A clustered bus's store, where the other machines' controllers read
    /// the file their servers include ([`super::mirror`]).
    pub share: Option<&'a Share>,
}

/// Shares a composed users file through the store (fenced: a deposed
/// controller shares nothing), answering the revision it was given.
pub type Share = std::sync::Arc<
    dyn Fn(
            String,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = Result<i64, crate::composer::SourceError>> + Send>,
        > + Send
        + Sync,
>;

/// What was carried out, for the counters: set even when a later step fails.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub written: bool,
    pub signalled: bool,
    pub confirmed: bool,
}

pub(crate) async fn execute(
    steps: &[PublishStep],
    target: &Target<'_>,
    done: &mut Done,
) -> Result<(), PublishError> {
    for step in steps {
        match step {
            PublishStep::Write { text } => {
                let path = target.users_file.to_path_buf();
                let text = match target.share {
                    // Shared before it is written here: the other machines'
                    // servers must serve it too for the canary to pass.
                    Some(share) => {
                        let revision = share(text.clone()).await.map_err(PublishError::Share)?;
                        users_file::with_shared_revision(revision, text)
                    }
                    None => text.clone(),
                };
                // fsync blocks: off the runtime's worker.
                tokio::task::spawn_blocking(move || {
                    // Not between a mirror's look at this file and its write.
                    let _held = super::mirror::lock(&path)?;
                    write_private(&path, text.as_bytes())
                })
                .await
                .expect("the writer does not panic")?;
                done.written = true;
            }
            PublishStep::Signal => {
                done.signalled = signal(target.reloader).await?;
            }
            PublishStep::Confirm { canary } => {
                if *canary != target.canary.public_key() {
                    return Err(PublishError::ForeignCanary {
                        planned: canary.clone(),
                    });
                }
                confirm(target).await?;
                done.confirmed = true;
            }
        }
    }
    Ok(())
}

/// Whether anything was sent: the counters tell a signal from a broker left
/// to notice the file by itself.
pub(crate) async fn signal(reloader: &Reloader) -> Result<bool, PublishError> {
    match reloader {
        Reloader::PidFiles(paths) => {
            let here: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
            if here.is_empty() {
                // None on this machine: the first one's absence says why.
                return match paths.first() {
                    Some(p) => Box::pin(signal(&Reloader::PidFile(p.clone()))).await,
                    None => Ok(false),
                };
            }
            // A server killed outright leaves its pid file behind: its pid
            // names no process. It is down (it reads the file when started
            // again), not a reason to hold the composition back from the
            // others — unless no server here could be signalled at all.
            let mut first_gone = None;
            let mut signalled = false;
            for p in here {
                match Box::pin(signal(&Reloader::PidFile(p.clone()))).await {
                    Ok(_) => signalled = true,
                    Err(PublishError::Signal { pid, source })
                        if source.raw_os_error() == Some(libc::ESRCH) =>
                    {
                        tracing::warn!(pid_file = %p.display(), pid, "a broker server of this machine is not running (its pid file names no process); signalling the others");
                        first_gone.get_or_insert(PublishError::Signal { pid, source });
                    }
                    Err(e) => return Err(e),
                }
            }
            match (signalled, first_gone) {
                (false, Some(e)) => Err(e),
                _ => Ok(true),
            }
        }
        Reloader::PidFile(path) => {
            let bad = |source| PublishError::PidFile {
                path: path.clone(),
                source,
            };
            let text = tokio::fs::read_to_string(path).await.map_err(bad)?;
            let pid = text.trim().parse::<u32>().map_err(|_| {
                bad(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a process id",
                ))
            })?;
            Box::pin(signal(&Reloader::Pid(pid))).await
        }
        Reloader::Pid(pid) => {
            // Only a positive pid names one process: 0 would signal our own
            // process group, and one past i32::MAX would wrap to -1, everyone.
            let Some(raw) = libc::pid_t::try_from(*pid).ok().filter(|p| *p > 0) else {
                return Err(PublishError::Signal {
                    pid: *pid,
                    source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
                });
            };
            // SAFETY: kill(2) takes plain integers and touches no memory.
            if unsafe { libc::kill(raw, libc::SIGHUP) } != 0 {
                return Err(PublishError::Signal {
                    pid: *pid,
                    source: std::io::Error::last_os_error(),
                });
            }
            Ok(true)
        }
        Reloader::Command { program, args } => {
            let status = tokio::process::Command::new(program)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await
                .map_err(|source| PublishError::Command {
                    program: program.clone(),
                    source,
                })?;
            if !status.success() {
                return Err(PublishError::CommandFailed {
                    program: program.clone(),
                    status,
                });
            }
            Ok(true)
        }
        Reloader::None => Ok(false),
    }
}

/// First wait between canary attempts, doubled up to [`BACKOFF_MAX`]: the
/// broker reloads within milliseconds of the signal, so the first tries are
/// close together.
const BACKOFF_START: Duration = Duration::from_millis(25);
const BACKOFF_MAX: Duration = Duration::from_millis(400);

/// Connects as the canary to every server of a cluster at once (or to the
/// broker alone): live when each server that answers admits it, and at
/// least one does. A server that does not answer at all is down: named,
/// and no reason to call the composition not live (it reads the file when
/// it starts).
async fn confirm(target: &Target<'_>) -> Result<(), PublishError> {
    if target.servers.len() <= 1 {
        return match confirm_at(target, &target.bus.url).await? {
            Admission::Admitted => Ok(()),
            Admission::Down(e) => Err(PublishError::NotConfirmed {
                waited: target.confirm_within,
                last: Some(e),
            }),
        };
    }
    let verdicts =
        futures::future::join_all(target.servers.iter().map(|s| confirm_at(target, s))).await;
    let mut admitted = 0;
    for (server, v) in target.servers.iter().zip(verdicts) {
        match v {
            Ok(Admission::Admitted) => admitted += 1,
            Ok(Admission::Down(e)) => {
                tracing::warn!(%server, error = %crate::chain::error_chain(&e), "a server of the bus does not answer; it reads the users file when it starts")
            }
            Err(PublishError::NotConfirmed { waited, last }) => {
                return Err(PublishError::NotAdmittedBy {
                    server: server.clone(),
                    waited,
                    last,
                });
            }
            Err(e) => return Err(e),
        }
    }
    if admitted == 0 {
        return Err(PublishError::NoServerUp {
            servers: target.servers.join(", "),
        });
    }
    Ok(())
}

/// How a server answered the canary.
enum Admission {
    Admitted,
    /// Nothing answered at its address: not a refusal.
    Down(ConnectError),
}

/// Attempts in a row that find nothing listening before a server is
/// taken for down rather than restarting.
const DOWN_AFTER: u32 = 3;

/// Connects as the canary to `url` until the server admits it or the
/// deadline passes. A refusal is expected for a moment (the reload is
/// asynchronous), so only the last one is reported.
async fn confirm_at(target: &Target<'_>, url: &str) -> Result<Admission, PublishError> {
    let seed = target
        .canary
        .seed()
        .map_err(|_| PublishError::ForeignCanary {
            planned: target.canary.public_key(),
        })?;
    let cfg = BusConfig {
        url: url.to_string(),
        principal: "canary".into(),
        credential: ClientCredential::NKey(Secret::new(seed)),
        inbox_prefix: Some(CANARY_INBOX.trim_end_matches(".>").to_string()),
        ..target.bus.clone()
    };
    let start = Instant::now();
    let deadline = start + target.confirm_within;
    let mut wait = BACKOFF_START;
    let mut unanswered = 0;
    loop {
        let attempt = tokio::time::timeout_at(deadline, mesh_bus::connect(&cfg)).await;
        let last = match attempt {
            Ok(Ok(client)) => {
                // The server answered the connect; a flush proves the
                // session is usable, not just the handshake.
                let flushed = client.flush().await;
                let _ = client.drain().await;
                if flushed.is_ok() {
                    return Ok(Admission::Admitted);
                }
                None
            }
            // Only a refused or failed connection may change with time; a
            // malformed configuration never will.
            Ok(Err(e @ ConnectError::Connect { .. })) => {
                if nothing_listens(&e) {
                    unanswered += 1;
                    if unanswered >= DOWN_AFTER {
                        return Ok(Admission::Down(e));
                    }
                } else {
                    unanswered = 0;
                }
                Some(e)
            }
            Ok(Err(e)) => return Err(PublishError::Canary(e)),
            Err(_elapsed) => None,
        };
        let now = Instant::now();
        if now + wait >= deadline {
            return Err(PublishError::NotConfirmed {
                waited: now - start,
                last,
            });
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF_MAX);
    }
}

/// Whether a failed connect found no server at all (refused, unreachable),
/// as opposed to a server that answered and said no.
fn nothing_listens(e: &ConnectError) -> bool {
    use async_nats::ConnectErrorKind as K;
    matches!(e, ConnectError::Connect { source, .. } if matches!(source.kind(), K::Io | K::TimedOut | K::Dns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(program: &str) -> Reloader {
        Reloader::Command {
            program: program.into(),
            args: vec![],
        }
    }

    #[tokio::test]
    async fn a_signal_that_could_not_be_sent_is_an_error() {
        // Beyond the kernel's pid_max: no such process.
        let e = signal(&Reloader::Pid(i32::MAX as u32)).await.unwrap_err();
        assert!(matches!(e, PublishError::Signal { .. }), "{e}");
        // Never our own group nor every process: refused before kill(2).
        for pid in [0, u32::MAX] {
            let e = signal(&Reloader::Pid(pid)).await.unwrap_err();
            let PublishError::Signal { source, .. } = &e else {
                panic!("{e}")
            };
            assert_eq!(source.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        }
        let e = signal(&command("false")).await.unwrap_err();
        assert!(matches!(e, PublishError::CommandFailed { .. }), "{e}");
        let e = signal(&command("/nonexistent/nats-server"))
            .await
            .unwrap_err();
        assert!(matches!(e, PublishError::Command { .. }), "{e}");
        assert!(signal(&command("true")).await.unwrap());
        assert!(!signal(&Reloader::None).await.unwrap());
        let dir = tempfile::tempdir().unwrap();
        let e = signal(&Reloader::PidFile(dir.path().join("nats.pid")))
            .await
            .unwrap_err();
        assert!(matches!(e, PublishError::PidFile { .. }), "{e}");
        std::fs::write(dir.path().join("bad.pid"), "12ab\n").unwrap();
        let e = signal(&Reloader::PidFile(dir.path().join("bad.pid")))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, PublishError::PidFile { source, .. } if source.kind() == std::io::ErrorKind::InvalidData),
            "{e}"
        );
        // A pid file naming pid 0 is refused like the pid itself.
        std::fs::write(dir.path().join("zero.pid"), "0\n").unwrap();
        let e = signal(&Reloader::PidFile(dir.path().join("zero.pid")))
            .await
            .unwrap_err();
        assert!(matches!(e, PublishError::Signal { pid: 0, .. }), "{e}");
    }
}

#[cfg(test)]
mod cluster_tests {
    use super::*;

    /// Each server of this machine is signalled; one whose pid file is
    /// absent runs elsewhere; none here at all is an error naming the
    /// first file.
    #[tokio::test]
    async fn the_servers_of_this_machine_are_signalled_and_the_others_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let heard = dir.path().join("heard");
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap 'echo hup > {}' HUP; echo ready > {}.ready; while :; do sleep 0.05; done",
                heard.display(),
                heard.display()
            ))
            .spawn()
            .unwrap();
        let ready = dir.path().join("heard.ready");
        for _ in 0..200 {
            if ready.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::write(dir.path().join("nats-2.pid"), format!("{}\n", child.id())).unwrap();
        let files =
            |names: &[&str]| Reloader::PidFiles(names.iter().map(|n| dir.path().join(n)).collect());
        assert!(
            signal(&files(&["nats-1.pid", "nats-2.pid", "nats-3.pid"]))
                .await
                .unwrap()
        );
        let heard_it = async || {
            for _ in 0..200 {
                if heard.exists() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        };
        assert!(
            heard_it().await,
            "the server of this machine was not signalled"
        );
        // A server killed outright left its pid file: the others are
        // signalled all the same.
        std::fs::remove_file(&heard).unwrap();
        std::fs::write(dir.path().join("nats-1.pid"), format!("{}\n", i32::MAX)).unwrap();
        assert!(signal(&files(&["nats-1.pid", "nats-2.pid"])).await.unwrap());
        assert!(heard_it().await, "the live server was not signalled");
        let _ = child.kill();
        let _ = child.wait();
        // None signalled: why.
        let e = signal(&files(&["nats-1.pid", "nats-3.pid"]))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, PublishError::Signal { pid, .. } if *pid == i32::MAX as u32),
            "{e}"
        );
        std::fs::remove_file(dir.path().join("nats-1.pid")).unwrap();
        let e = signal(&files(&["nats-1.pid", "nats-3.pid"]))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, PublishError::PidFile { path, .. } if path.ends_with("nats-1.pid")),
            "{e}"
        );
        assert!(!signal(&files(&[])).await.unwrap());
    }
}

#[cfg(test)]
mod canary_tests {
    use super::*;

    #[tokio::test]
    async fn a_plan_naming_another_canary_is_not_confirmed_and_nothing_connects() {
        let ours = nkeys::KeyPair::new_user();
        let theirs = nkeys::KeyPair::new_user().public_key();
        let bus = BusConfig {
            // Nothing listens on port 1: a connect tried would be a
            // connect error, so the variant proves none was.
            url: "tls://127.0.0.1:1".into(),
            principal: "controller".into(),
            credential: ClientCredential::NKey(Secret::new(ours.seed().unwrap())),
            ca_file: None,
            inbox_prefix: None,
            pin: None,
        };
        let target = Target {
            users_file: Path::new("/nonexistent/users.conf"),
            reloader: &Reloader::None,
            bus: &bus,
            servers: &[],
            confirm_within: Duration::from_secs(1),
            canary: &ours,
            share: None,
        };
        let mut done = Done::default();
        let steps = [PublishStep::Confirm {
            canary: theirs.clone(),
        }];
        let e = execute(&steps, &target, &mut done).await.unwrap_err();
        assert!(
            matches!(&e, PublishError::ForeignCanary { planned } if *planned == theirs),
            "{e}"
        );
        assert!(!done.confirmed);
    }
}
