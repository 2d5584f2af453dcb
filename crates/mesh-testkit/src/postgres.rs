//! A real PostgreSQL for tests: one cluster per test binary (initdb costs
//! seconds), a fresh database per test. `MESH_TEST_POSTGRES_URL`, when set,
//! names a server to use instead of the cluster.

use std::fmt;
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
    /// PostgreSQL's defaults for fsync and commits (a benchmark's cluster);
    /// a test cluster turns both off.
    durable: bool,
    /// An address it listens on besides 127.0.0.1, and the network it
    /// trusts connections from there (a machine of the machines kit).
    network: Option<(std::net::IpAddr, String)>,
}

impl PgCluster {
    pub fn start() -> Result<Self, TestkitError> {
        PgCluster::start_with(false, None)
    }

    /// A test cluster listening on `addr` too, trusting connections from
    /// `allow` (a CIDR) there: the store of a mesh over several machines.
    /// Started inside a machine ([`crate::Machine::within`]), it is that
    /// machine's: reachable at `addr` from the others, at 127.0.0.1 from
    /// within it only.
    pub fn start_on(addr: std::net::IpAddr, allow: &str) -> Result<Self, TestkitError> {
        PgCluster::start_with(false, Some((addr, allow.to_string())))
    }

    /// A cluster that keeps PostgreSQL's durability defaults (fsync,
    /// synchronous commit, full page writes): what `mesh-bench` measures.
    pub fn start_durable() -> Result<Self, TestkitError> {
        PgCluster::start_with(true, None)
    }

    fn start_with(
        durable: bool,
        network: Option<(std::net::IpAddr, String)>,
    ) -> Result<Self, TestkitError> {
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
        if let Some((_, allow)) = &network {
            use std::io::Write as _;
            let hba = data.join("pg_hba.conf");
            std::fs::OpenOptions::new()
                .append(true)
                .open(&hba)
                .and_then(|mut f| writeln!(f, "host all all {allow} trust"))
                .map_err(io(format!("trust {allow} in {}", hba.display())))?;
        }
        let cluster = PgCluster {
            bin,
            port: free_port()?,
            user,
            child: Mutex::new(None),
            dir,
            durable,
            network,
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

    /// `postgres://postgres@<addr>:<port>/<database>`: how the other
    /// machines reach a cluster started with [`Self::start_on`].
    pub fn url_on(&self, database: &str) -> Option<String> {
        let (addr, _) = self.network.as_ref()?;
        Some(format!(
            "postgres://postgres@{addr}:{}/{database}",
            self.port
        ))
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
            .arg("-c")
            .arg(match &self.network {
                Some((addr, _)) => format!("listen_addresses=127.0.0.1,{addr}"),
                None => "listen_addresses=127.0.0.1".into(),
            })
            .args(["-c", "max_connections=300"]);
        if !self.durable {
            // Durability is not under test; speed is welcome on 2 cores.
            cmd.args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off"]);
        }
        cmd.current_dir(self.dir.path())
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
        psql(&self.bin, &DbUrl(self.url(database)), sql)
    }

    /// A new, empty database in this cluster.
    pub fn create_database(&self) -> Result<TestDatabase, TestkitError> {
        create_database(&self.bin, DbUrl(self.url("postgres")))
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

/// Runs one statement. A password in `url` reaches psql through PGPASSWORD,
/// never its argv, where any process on the machine could read it.
fn psql(bin: &Path, url: &DbUrl, sql: &str) -> Result<String, TestkitError> {
    let (url, password) = url.without_password();
    let mut cmd = Command::new(bin.join("psql"));
    cmd.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(url)
        .args(["-c", sql])
        .stdin(Stdio::null());
    if let Some(password) = password {
        cmd.env("PGPASSWORD", password);
    }
    let out = checked_output(&mut cmd, "psql")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

static NEXT_DB: AtomicU64 = AtomicU64::new(0);

fn create_database(bin: &Path, admin_url: DbUrl) -> Result<TestDatabase, TestkitError> {
    let name = format!(
        "mesh_test_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    psql(bin, &admin_url, &format!("CREATE DATABASE {name}"))?;
    Ok(TestDatabase {
        url: DbUrl(with_database(&admin_url.0, &name)),
        admin_url,
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

/// A connection URL that may carry a password (`MESH_TEST_POSTGRES_URL`'s
/// may): its Debug output masks the password.
struct DbUrl(String);

impl DbUrl {
    /// The URL with its password taken out (from the user info and from a
    /// `password` query parameter), and that password, percent-decoded.
    fn without_password(&self) -> (String, Option<String>) {
        let url = self.0.as_str();
        let Some(start) = url.find("://").map(|i| i + 3) else {
            return (url.to_string(), None);
        };
        let mut password = None;
        let mut out = url[..start].to_string();
        let mut rest = &url[start..];
        // As libpq reads it: user info ends at the first '@' before any '/'.
        if let Some(at) = rest
            .find(['@', '/'])
            .filter(|&i| rest[i..].starts_with('@'))
        {
            let userinfo = &rest[..at];
            match userinfo.split_once(':') {
                Some((user, secret)) => {
                    password = Some(percent_decode(secret));
                    out.push_str(user);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            rest = &rest[at + 1..];
        }
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        out.push_str(path);
        let kept: Vec<&str> = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|param| match param.split_once('=') {
                Some(("password", secret)) => {
                    password = Some(percent_decode(secret));
                    false
                }
                _ => true,
            })
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
        (out, password)
    }
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (url, password) = self.without_password();
        let mut t = f.debug_tuple("DbUrl");
        t.field(&url);
        if password.is_some() {
            t.field(&"password redacted");
        }
        t.finish()
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) if b[i] == b'%' => {
                out.push(byte);
                i += 3;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A fresh database, dropped (best effort) when this is dropped.
pub struct TestDatabase {
    url: DbUrl,
    admin_url: DbUrl,
    bin: PathBuf,
    name: String,
}

/// Written out so that no password reaches a test's output.
impl fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDatabase")
            .field("url", &self.url)
            .field("admin_url", &self.admin_url)
            .field("bin", &self.bin)
            .field("name", &self.name)
            .finish()
    }
}

impl TestDatabase {
    /// The database's URL, password included: for connecting, not printing.
    pub fn url(&self) -> &str {
        &self.url.0
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
        return create_database(&postgres_bin_dir()?, DbUrl(url));
    }
    shared_cluster()?.create_database()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{DbUrl, TestDatabase, with_database};

    #[test]
    fn database_is_swapped_in_the_url() {
        assert_eq!(
            with_database("postgres://u:p@h:5/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:5/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5", "x"), "postgres://h:5/x");
    }

    #[test]
    fn the_password_leaves_the_url_whole() {
        let url = |s: &str| DbUrl(s.into()).without_password();
        assert_eq!(
            url("postgres://u:hunter2@127.0.0.1:5/db"),
            ("postgres://u@127.0.0.1:5/db".into(), Some("hunter2".into()))
        );
        assert_eq!(
            url("postgres://u:p%40ss@h:5,g:6/db?sslmode=disable&password=q&x=1"),
            (
                "postgres://u@h:5,g:6/db?sslmode=disable&x=1".into(),
                Some("q".into())
            )
        );
        assert_eq!(
            url("postgres://u@h/db?password=a%2Fb"),
            ("postgres://u@h/db".into(), Some("a/b".into()))
        );
        assert_eq!(
            url("postgres://postgres@127.0.0.1:5/x"),
            ("postgres://postgres@127.0.0.1:5/x".into(), None)
        );
    }

    #[test]
    fn debug_never_shows_the_password() {
        let admin = "postgres://u:hunter2@127.0.0.1:5/db";
        let db = TestDatabase {
            url: DbUrl(with_database(admin, "mesh_test_x")),
            admin_url: DbUrl(admin.into()),
            bin: PathBuf::from("/nonexistent"),
            name: "mesh_test_x".into(),
        };
        let shown = format!("{db:?} {db:#?}");
        // Not dropped: its Drop would run psql against that address.
        std::mem::forget(db);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgres://u@127.0.0.1:5/mesh_test_x"),
            "{shown}"
        );
        assert!(shown.contains("password redacted"), "{shown}");
    }
}
