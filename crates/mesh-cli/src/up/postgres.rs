//! The PostgreSQL `mesh up --ha` runs for its store: a cluster of its own
//! (`initdb` once, the binaries `scripts/setup` installs), listening on
//! loopback only with a password made at `initdb` and kept nowhere but the
//! mesh's `store.url` (mode 0600), started in a process group of its own
//! (a terminal's Ctrl-C reaches it only through `mesh up`) and stopped
//! last, after the controllers.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sqlx::Connection as _;
use sqlx::postgres::PgConnectOptions;
use tokio::process::{Child, Command};

use super::children::{self, Forced, PidCell};

/// How long a start may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a fast shutdown (SIGINT) gets before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub use crate::state::STORE_URL_FILE;

/// Who runs the server: `initdb` and `postgres` refuse root, so root runs
/// them as Debian's `postgres` user.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    user: Option<RunAs>,
    child: Option<Child>,
    /// Kept apart: a reaped child no longer says its pid.
    pid: Option<u32>,
    /// The pids a forced stop ends; its own among them while it runs.
    pids: PidCell,
}

impl Postgres {
    /// The cluster of the mesh in `dir`, made (`initdb`) on the first run:
    /// the server and the store URL (with its password) written to
    /// [`STORE_URL_FILE`].
    pub async fn prepare(dir: &Path, pids: PidCell) -> anyhow::Result<(Postgres, String)> {
        let bin = bin_dir()?;
        let user = run_as()?;
        let data = data_dir(dir, user);
        let url_file = dir.join(STORE_URL_FILE);
        let made = data.join("PG_VERSION").is_file();
        let url = match (made, url_file.is_file()) {
            (true, true) => crate::state::read_store_file(&url_file)?,
            // Its password was only there: never made again over its data.
            (true, false) => bail!(
                "{} holds this mesh's PostgreSQL, but {} (its URL and password) is gone; put it back, or remove {} and {} to start a new mesh",
                data.display(),
                url_file.display(),
                data.display(),
                dir.display()
            ),
            (false, _) => initdb(&bin, &data, user, &url_file).await?,
        };
        let port = options(&url)
            .with_context(|| format!("reading {}", url_file.display()))?
            .get_port();
        Ok((
            Postgres {
                bin,
                data,
                port,
                user,
                child: None,
                pid: None,
                pids,
            },
            url,
        ))
    }

    /// Where its data is.
    pub fn data(&self) -> &Path {
        &self.data
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Starts it; returns once it accepts connections.
    pub async fn start(&mut self, url: &str) -> anyhow::Result<()> {
        let addr = format!("127.0.0.1:{}", self.port);
        if let Err(e) = std::net::TcpListener::bind(&addr)
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            bail!(
                "the store's port {addr} is taken by another process (another mesh's PostgreSQL?); stop it"
            );
        }
        let log_path = self.data.join("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.data)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(u) = self.user {
            cmd.uid(u.uid).gid(u.gid);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.bin.join("postgres").display()))?;
        self.pid = child.id();
        children::remember(&self.pids, self.pid, Forced::Quit);
        self.child = Some(child);
        // The store's database is made through the server's own.
        let admin = options(url)?.database("postgres");
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            if let Ok(mut c) = sqlx::PgConnection::connect_with(&admin).await {
                let exists: Option<(i32,)> =
                    sqlx::query_as("SELECT 1 FROM pg_database WHERE datname = 'mesh'")
                        .fetch_optional(&mut c)
                        .await?;
                if exists.is_none() {
                    sqlx::query("CREATE DATABASE mesh").execute(&mut c).await?;
                }
                let _ = c.close().await;
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.forget();
                bail!(
                    "PostgreSQL {status} before it accepted connections; its log is {}",
                    log_path.display()
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "PostgreSQL did not accept connections within {READY_WITHIN:?}; its log is {}",
                    log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fast shutdown (SIGINT), SIGKILL after [`STOP_GRACE`], reaped.
    pub async fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        children::stop(child, libc::SIGINT, STOP_GRACE).await;
        self.forget();
    }

    /// The child gone (reaped), its pid out of the cell.
    fn forget(&mut self) {
        self.child = None;
        children::forget(&self.pids, self.pid.take());
    }
}

/// The connect options a store URL names; an error never quotes it (it
/// holds the password).
fn options(url: &str) -> anyhow::Result<PgConnectOptions> {
    PgConnectOptions::from_str(url)
        .map_err(|_| anyhow::anyhow!("the store URL is not a PostgreSQL URL"))
}

/// Where the cluster of the mesh in `dir` is (or would be) kept; none when
/// it could not be said (no `postgres` user to run it as root).
pub fn data_dir_of(dir: &Path) -> Option<PathBuf> {
    run_as().ok().map(|user| data_dir(dir, user))
}

/// `<dir>/postgres`; as root, where the `postgres` user can reach it (a
/// home directory is closed to it): `/var/lib/mesh-up/<the dir's path>`.
fn data_dir(dir: &Path, user: Option<RunAs>) -> PathBuf {
    match user {
        None => dir.join("postgres"),
        Some(_) => {
            let flat: String = dir
                .to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            Path::new("/var/lib/mesh-up").join(flat.trim_matches('-'))
        }
    }
}

/// `initdb` with a fresh password; the store URL written to `url_file`.
async fn initdb(
    bin: &Path,
    data: &Path,
    user: Option<RunAs>,
    url_file: &Path,
) -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port for PostgreSQL")?
        .port();
    // Hex: nothing in it needs escaping in a URL.
    let password = hex::encode(rand::random::<[u8; 24]>());
    let parent = data.parent().context("the data directory has a parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    if data.exists() {
        // A cluster half made (no PG_VERSION yet): made again.
        std::fs::remove_dir_all(data).with_context(|| format!("removing {}", data.display()))?;
    }
    std::fs::create_dir(data).with_context(|| format!("creating {}", data.display()))?;
    std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700))?;
    let pwfile = data.with_extension("pw");
    crate::files::write_private(&pwfile, password.as_bytes())?;
    if let Some(u) = user {
        for p in [data, pwfile.as_path()] {
            std::os::unix::fs::chown(p, Some(u.uid), Some(u.gid))
                .with_context(|| format!("chown {} to postgres", p.display()))?;
        }
    }
    let mut cmd = Command::new(bin.join("initdb"));
    cmd.arg("-D")
        .arg(data)
        .args(["-U", "postgres", "--auth=scram-sha-256", "-E", "UTF8"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .current_dir(parent)
        .stdin(Stdio::null());
    if let Some(u) = user {
        cmd.uid(u.uid).gid(u.gid);
    }
    let out = cmd.output().await.context("running initdb");
    let _ = std::fs::remove_file(&pwfile);
    let out = out?;
    if !out.status.success() {
        bail!(
            "initdb failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let url = format!("postgres://postgres:{password}@127.0.0.1:{port}/mesh");
    crate::files::write_private(url_file, format!("{url}\n").as_bytes())?;
    Ok(url)
}

fn run_as() -> anyhow::Result<Option<RunAs>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = std::process::Command::new("id")
            .args([flag, "postgres"])
            .output()
            .context("running `id postgres`")?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
            anyhow::anyhow!(
                "run as root, `mesh up --ha` runs PostgreSQL as the `postgres` user (initdb refuses root), and there is none: run `scripts/setup`, which installs Debian's postgresql package and its user"
            )
        })
    };
    Ok(Some(RunAs {
        uid: id("-u")?,
        gid: id("-g")?,
    }))
}

/// The directory holding `initdb` and `postgres`: `MESH_PG_BIN`, then
/// Debian's `/usr/lib/postgresql/<version>/bin` (newest first), then PATH.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let complete = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(p) = std::env::var_os("MESH_PG_BIN").map(PathBuf::from)
        && complete(&p)
    {
        return Ok(p);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.into_iter().rev().find(|(_, d)| complete(d)) {
        return Ok(d);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .find(|d| complete(d))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no PostgreSQL server found (initdb, postgres) for `mesh up --ha`: run `scripts/setup`, or set MESH_PG_BIN to the directory holding them"
            )
        })
}
