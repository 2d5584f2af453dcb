//! A real PostgreSQL for tests: one cluster per test binary (initdb costs
//! seconds), a fresh database per test. `MESH_TEST_POSTGRES_URL`, when set,
//! names a server to use instead of the cluster.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tempfile::TempDir;

use crate::error::io;
use crate::process::{checked_output, free_port, stop_child, wait_ready};
use crate::{TestkitError, postgres_bin_dir};

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Who runs the server: initdb and postgres refuse to run as root, and tests
/// and CI run as root, so then the Debian `postgres` user runs them.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

fn run_as() -> Result<Option<RunAs>, TestkitError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32, TestkitError> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(io("run `id postgres`"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| TestkitError::BinaryMissing {
                what: "the `postgres` system user (initdb refuses to run as root)",
                looked: "id postgres".into(),
                hint: crate::INSTALL_HINT,
            })
    };
    Ok(Some(RunAs {
        uid: id("-u")?,
        gid: id("-g")?,
    }))
}

/// An owned PostgreSQL cluster: `initdb` in a temp dir, listening on a free
/// loopback port; stopped and removed on drop.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    port: u16,
    user: Option<RunAs>,
    child: Mutex<Option<Child>>,
    dir: TempDir,
}

impl PgCluster {
    pub fn start() -> Result<Self, TestkitError> {
        let bin = postgres_bin_dir()?;
        let user = run_as()?;
        let dir = tempfile::Builder::new()
            .prefix("mesh-pg-")
            .tempdir()
            .map_err(io("create a temp dir for PostgreSQL"))?;
        if let Some(u) = user {
            chown(dir.path(), u)?;
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .current_dir(dir.path());
        checked_output(as_user(&mut initdb, user), "initdb")?;
        let cluster = PgCluster {
            bin,
            port: free_port()?,
            user,
            child: Mutex::new(None),
            dir,
        };
        cluster.start_again()?;
        Ok(cluster)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().ok()?.as_ref().map(Child::id)
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Starts (or restarts after [`Self::stop`]) the server on the same port
    /// with the same data.
    pub fn start_again(&self) -> Result<(), TestkitError> {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io("open the PostgreSQL log"))?;
        if let Some(u) = self.user {
            chown(&self.log_path(), u)?;
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            // Durability is not under test; speed is welcome on 2 cores.
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=300"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io("clone the log handle"))?)
            .stderr(log);
        let child = as_user(&mut cmd, self.user)
            .spawn()
            .map_err(io("start postgres"))?;
        *guard = Some(child);
        drop(guard);
        self.wait_ready()
    }

    fn wait_ready(&self) -> Result<(), TestkitError> {
        wait_ready(
            "postgres",
            READY_TIMEOUT,
            Duration::from_millis(50),
            &self.log_path(),
            || {
                let mut child = self.child.lock().ok()?;
                let status = child.as_mut()?.try_wait().ok()??;
                *child = None;
                Some(status)
            },
            || self.psql("postgres", "SELECT 1").ok().map(|_| ()),
        )
    }

    /// Stops the server (fast shutdown), keeping its data: an outage.
    pub fn stop(&self) -> Result<(), TestkitError> {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = guard.take() {
            stop_child(&mut child, libc::SIGINT, Duration::from_secs(20));
        }
        Ok(())
    }

    fn psql(&self, database: &str, sql: &str) -> Result<String, TestkitError> {
        psql(&self.bin, &self.url(database), sql)
    }

    /// A new, empty database in this cluster.
    pub fn create_database(&self) -> Result<TestDatabase, TestkitError> {
        create_database(&self.bin, &self.url("postgres"))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn chown(path: &Path, u: RunAs) -> Result<(), TestkitError> {
    std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
        .map_err(io(format!("chown {} to postgres", path.display())))
}

/// Runs the command as `user` when there is one.
fn as_user(cmd: &mut Command, user: Option<RunAs>) -> &mut Command {
    if let Some(u) = user {
        cmd.uid(u.uid).gid(u.gid);
    }
    cmd
}

fn psql(bin: &Path, url: &str, sql: &str) -> Result<String, TestkitError> {
    let out = checked_output(
        Command::new(bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                url,
                "-c",
                sql,
            ])
            .stdin(Stdio::null()),
        "psql",
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

static NEXT_DB: AtomicU64 = AtomicU64::new(0);

fn create_database(bin: &Path, admin_url: &str) -> Result<TestDatabase, TestkitError> {
    let name = format!(
        "mesh_test_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    psql(bin, admin_url, &format!("CREATE DATABASE {name}"))?;
    Ok(TestDatabase {
        url: with_database(admin_url, &name),
        admin_url: admin_url.to_string(),
        bin: bin.to_path_buf(),
        name,
    })
}

/// `url` with its database path replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_end = base
        .find("://")
        .map(|i| i + 3)
        .and_then(|start| base[start..].find('/').map(|j| start + j))
        .unwrap_or(base.len());
    let mut out = format!("{}/{database}", &base[..authority_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A fresh database, dropped (best effort) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    admin_url: String,
    bin: PathBuf,
    name: String,
}

impl TestDatabase {
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = psql(
            &self.bin,
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();

extern "C" fn stop_shared_at_exit() {
    if let Some(Ok(cluster)) = SHARED.get() {
        let _ = cluster.stop();
        // The TempDir inside a static is never dropped: remove the data here.
        let _ = std::fs::remove_dir_all(cluster.dir.path());
    }
}

/// The cluster shared by every test of this test binary, started on first
/// use and stopped when the process exits.
pub fn shared_cluster() -> Result<&'static PgCluster, TestkitError> {
    let r = SHARED.get_or_init(|| {
        let c = PgCluster::start().map_err(|e| e.to_string())?;
        // SAFETY: registering a plain extern "C" fn; it only touches the static.
        unsafe {
            libc::atexit(stop_shared_at_exit);
        }
        Ok(c)
    });
    r.as_ref().map_err(|e| TestkitError::CommandFailed {
        command: "start the shared PostgreSQL cluster".into(),
        status: "failed".into(),
        stderr: e.clone(),
    })
}

/// A fresh database: in `MESH_TEST_POSTGRES_URL`'s server when set, else in
/// this test binary's shared cluster.
pub fn fresh_database() -> Result<TestDatabase, TestkitError> {
    if let Ok(url) = std::env::var("MESH_TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        return create_database(&postgres_bin_dir()?, &url);
    }
    shared_cluster()?.create_database()
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_swapped_in_the_url() {
        assert_eq!(
            with_database("postgres://u:p@h:5/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:5/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5", "x"), "postgres://h:5/x");
    }
}
