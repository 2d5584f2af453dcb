//! The container driver's engine side (DESIGN §6 "Container driver"): a
//! container module runs as a foreground `podman run` process that the
//! process driver supervises like any other (log, restart backoff, `failed`
//! reports), and this module builds that argv and does the engine work
//! around it — loading an image archive, stopping a container by name,
//! removing what a previous host left.
//!
//! Measured on these machines (Debian 12, podman 4.3.1, conmon 2.1.6, runc
//! 1.1.5, cgroups v1 hybrid, root without `CAP_SYS_RESOURCE`, no systemd as
//! PID 1, no journald):
//! - crun refuses to run at all ("cgroups in hybrid mode not supported"), so
//!   runc it is;
//! - no container starts without explicit `--ulimit nofile` and `nproc` no
//!   higher than the host's own limits: podman's defaults (1048576) exceed
//!   the hard limits, which root cannot raise here (see [`Ulimits`]);
//! - podman falls back by itself to the `cgroupfs` manager (no systemd) and
//!   the `file` events backend (no journald), and `--cgroups` may stay
//!   enabled: no global flag is needed, so none is forced on a host where
//!   systemd would be the right manager;
//! - `--network host` works; overlay storage works natively on ext4.
//! - `conmon` runs in its own session: a signal to the client's process
//!   group never reaches it, and a SIGKILLed client leaves the container
//!   running (its `--rm` still happens when it ends).
//! - the container's processes run (and print) before the client records
//!   it as running. Once recorded, a SIGTERM to the client is forwarded
//!   (`--sig-proxy`) and the grace applies; before, the proxy's kill fails,
//!   it gives up and the client exits with status 0 while the container
//!   runs on, and a client SIGKILLed then leaves it `initialized` with its
//!   processes running. [`stop`] removes both (the second without a grace:
//!   the engine believes it never started).
//!
//! So a container is always stopped by name ([`stop`]), never by signalling
//! its client alone, and a client's exit does not mean its container ended.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::container::is_env_name;
use mesh_core::declaration::ImageDecl;
use mesh_core::names::Name;

mod engine;
pub mod shim;

pub use engine::{image_command, kill_node_now, load_archive, remove_others, stop};
pub use shim::{ImageCommand, SecretEnv};

/// Overrides the engine found on `PATH`: a path, or a program name looked up
/// on `PATH`.
pub const ENGINE_ENV: &str = "MESH_CONTAINER_ENGINE";
/// The program looked up on `PATH` when [`ENGINE_ENV`] is unset.
pub const ENGINE_PROGRAM: &str = "podman";

pub const LABEL_NODE: &str = "mesh.node";
pub const LABEL_MODULE: &str = "mesh.module";
/// The host's public key: two meshes on one machine may both have a node
/// `local`, and a host sweeping its node's containers must take only its own.
pub const LABEL_HOST: &str = "mesh.host";
pub const LABEL_SEQUENCE: &str = "mesh.sequence";

/// Podman 4.3 lowers its own `RLIMIT_NPROC` to 32768 (measured on the client
/// and on conmon, whatever the host's limit), and runc cannot give the
/// container more than its parent holds: 32769 is refused with EPERM.
pub const NPROC_CAP: u64 = 32_768;
/// Podman's own default for `nofile`; the kernel's default `nr_open`.
pub const NOFILE_CAP: u64 = 1_048_576;

/// What a container module runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// An OCI archive on this host (the checked artifact), loaded first.
    Archive(PathBuf),
    /// `name@sha256:<64 hex>`: pinned, so what runs is what was declared;
    /// the engine pulls it when missing.
    Reference(String),
}

/// Soft and hard limits, as `--ulimit <kind>=<soft>:<hard>` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub soft: u64,
    pub hard: u64,
}

/// The two limits every container is given explicitly (see the module docs
/// for why podman's defaults cannot start one here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ulimits {
    pub nofile: Limit,
    pub nproc: Limit,
}

impl Ulimits {
    /// What this process holds, capped where podman cannot pass more on: a
    /// container gets what a process module would, and never a limit the
    /// runtime would have to raise (EPERM without `CAP_SYS_RESOURCE`).
    pub fn of_host() -> Ulimits {
        Ulimits {
            nofile: capped(getrlimit(libc::RLIMIT_NOFILE), NOFILE_CAP),
            nproc: capped(getrlimit(libc::RLIMIT_NPROC), NPROC_CAP),
        }
    }
}

/// `(soft, hard)` of this process; an unreadable limit reads as 0 and is
/// then capped like any other.
fn getrlimit(resource: libc::__rlimit_resource_t) -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one rlimit into the struct we pass.
    let rc = unsafe { libc::getrlimit(resource, &mut r) };
    if rc != 0 {
        return (0, 0);
    }
    (r.rlim_cur, r.rlim_max)
}

/// Caps both values (`RLIM_INFINITY` included) and keeps soft within hard;
/// a limit of 0 (unreadable) becomes the cap's soft default of 1024 so the
/// container can still open its files.
pub fn capped((soft, hard): (u64, u64), cap: u64) -> Limit {
    let hard = if hard == 0 { cap } else { hard.min(cap) };
    let soft = if soft == 0 {
        1024.min(hard)
    } else {
        soft.min(hard)
    };
    Limit { soft, hard }
}

/// One container module. Env values are never held here: `podman run`
/// takes each named variable from its own environment (the module's env,
/// as the process driver sets it), because argv is world-readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub node: Name,
    pub module: Name,
    /// The host's public key ([`LABEL_HOST`]).
    pub host: String,
    /// The declaration that started it, as a label for people and tools.
    pub sequence: u64,
    pub image: Image,
    /// Appended after the image: the image's entrypoint gets them.
    pub args: Vec<String>,
    pub env_names: Vec<String>,
    /// `(host file, path in the container)`, each bind-mounted read-only.
    pub mounts: Vec<(PathBuf, String)>,
    /// `(host directory, path in the container)`: the module's working
    /// directory, bind-mounted read-write (what it writes is kept beside
    /// its log, as for a process module) and mounted before the read-only
    /// files, so declared files under it land on top of it. Without it the
    /// container's working directory is the image's.
    pub workdir: Option<(PathBuf, String)>,
    pub stop_grace: Duration,
    pub ulimits: Ulimits,
    /// Secret variables, given through a file and the env shim, never to
    /// the engine ([`shim`]).
    pub secret_env: Option<SecretEnv>,
}

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("no container engine: install podman{hint}")]
    NoEngine { hint: String },
    #[error("could not run {engine} {action}")]
    Spawn {
        engine: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{engine} {action} failed ({status}): {stderr}")]
    Failed {
        engine: PathBuf,
        action: &'static str,
        status: String,
        stderr: String,
    },
    #[error("{engine} {action} did not finish within {} s", limit.as_secs())]
    TimedOut {
        engine: PathBuf,
        action: &'static str,
        limit: Duration,
    },
    #[error("loading {path} named no image; it printed {output:?}")]
    NoImageLoaded { path: PathBuf, output: String },
    #[error("{path} holds {count} images ({names}); a module's archive holds one")]
    ManyImages {
        path: PathBuf,
        count: usize,
        names: String,
    },
    #[error(
        "this host was built without the container env shim (its toolchain could not link it statically), so a secret cannot reach a container's environment; pass it in a [[file]] instead"
    )]
    NoShim,
    #[error("could not install the container env shim at {}", path.display())]
    Shim {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the engine answered {what} that could not be read: {detail}")]
    Unreadable { what: &'static str, detail: String },
    #[error(
        "the declared image is artifact {name}, which is not among the module's fetched artifacts"
    )]
    NoArchive { name: Name },
    #[error("image archive {path} is not an absolute path")]
    RelativeArchive { path: PathBuf },
    #[error(
        "module {module}: env name {name:?} is not a variable name; use letters, digits and '_', not starting with a digit"
    )]
    BadEnvName { module: Name, name: String },
    #[error(
        "module {module}: working directory {workdir:?} is not an absolute path on both sides (or holds ':' or ',')"
    )]
    RelativeWorkdir { module: Name, workdir: String },
    #[error("module {module}: cannot mount {host:?} at {container:?}: {why}")]
    BadMount {
        module: Name,
        host: PathBuf,
        container: String,
        why: &'static str,
    },
}

/// `mesh-<node>-<module>-<host>`, `<host>` the first 8 characters of the
/// host's key after its `U`, lowercase. For people and for `--replace`;
/// what a container belongs to is read from its labels, since `-` may sit
/// in either name. The host's part keeps two meshes on one machine apart:
/// both may have a node `local` (every `mesh up` does), and with one name
/// each one's `--replace` stopped the other's container (exit 0), whose
/// supervisor then removed the name's new holder at once (exit 137), and
/// so on, each restarting.
pub fn container_name(node: &Name, module: &Name, host: &str) -> String {
    let tag: String = host
        .chars()
        .skip(1)
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    format!("mesh-{node}-{module}-{}", tag.to_ascii_lowercase())
}

/// The engine to use: [`ENGINE_ENV`] when set, else `podman` on `PATH`.
pub fn engine() -> Option<PathBuf> {
    require_engine().ok()
}

/// [`engine`], or why there is none.
pub fn require_engine() -> Result<PathBuf, ContainerError> {
    find_engine(std::env::var_os(ENGINE_ENV), std::env::var_os("PATH"))
}

/// [`require_engine`] on given values of [`ENGINE_ENV`] and `PATH`.
pub fn find_engine(
    configured: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, ContainerError> {
    let lookup = |program: &Path| -> Option<PathBuf> {
        if program.components().count() > 1 {
            return is_executable(program).then(|| program.to_path_buf());
        }
        std::env::split_paths(path.as_deref()?)
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
    };
    match configured.filter(|v| !v.is_empty()) {
        Some(value) => lookup(Path::new(&value)).ok_or_else(|| ContainerError::NoEngine {
            hint: format!(
                " ({ENGINE_ENV}={} is not an executable file)",
                Path::new(&value).display()
            ),
        }),
        None => lookup(Path::new(ENGINE_PROGRAM)).ok_or_else(|| ContainerError::NoEngine {
            hint: format!(" ({ENGINE_PROGRAM} is not on PATH)"),
        }),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The image the declaration decided: an artifact is its cached archive
/// (`archives`: the module's fetched artifacts by name), a reference is
/// pulled as declared. Nothing is judged here: `mesh check` refused what
/// the engine cannot take (`mesh_core::container`), and the declaration
/// carries what it decided.
pub fn image(
    declared: &ImageDecl,
    archives: &BTreeMap<Name, PathBuf>,
) -> Result<Image, ContainerError> {
    match declared {
        ImageDecl::Artifact(name) => archives
            .get(name)
            .map(|path| Image::Archive(path.clone()))
            .ok_or_else(|| ContainerError::NoArchive { name: name.clone() }),
        ImageDecl::Reference(reference) => Ok(Image::Reference(reference.clone())),
    }
}

impl ContainerSpec {
    /// What [`run_argv`] relies on to say it unambiguously: an absolute
    /// archive, variable names (the rule `mesh check` applied, never a
    /// value on argv), and mounts `-v` can say. Which image and which
    /// names may reach the engine was decided before the declaration was
    /// made. The driver checks before it runs.
    pub fn check(&self) -> Result<(), ContainerError> {
        if let Image::Archive(path) = &self.image
            && !path.is_absolute()
        {
            return Err(ContainerError::RelativeArchive { path: path.clone() });
        }
        if let Some(name) = self.env_names.iter().find(|n| !is_env_name(n)) {
            return Err(ContainerError::BadEnvName {
                module: self.module.clone(),
                name: name.clone(),
            });
        }
        if let Some((host, w)) = &self.workdir
            && (!host.is_absolute()
                || !w.starts_with('/')
                || w.contains([':', ','])
                || host.to_str().is_none_or(|h| h.contains([':', ','])))
        {
            return Err(ContainerError::RelativeWorkdir {
                module: self.module.clone(),
                workdir: format!("{}:{w}", host.display()),
            });
        }
        let mut targets = BTreeSet::new();
        for (host, container) in &self.mounts {
            let why = if !host.is_absolute() {
                Some("the host path is not absolute")
            } else if !container.starts_with('/') {
                Some("the path in the container is not absolute")
            } else if container == "/" {
                Some("it would cover the container's root")
            } else if host.to_string_lossy().contains([':', ',']) || container.contains([':', ','])
            {
                // `-v` splits on ':' and options on ','.
                Some("a path holds ':' or ','")
            } else if !targets.insert(container.as_str()) {
                Some("another mount has the same path in the container")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ContainerError::BadMount {
                    module: self.module.clone(),
                    host: host.clone(),
                    container: container.clone(),
                    why,
                });
            }
        }
        Ok(())
    }
}

/// Whole seconds for podman's `-t`/`--stop-timeout`, rounded up: a grace is
/// never shortened.
pub fn grace_secs(grace: Duration) -> u64 {
    grace.as_secs() + u64::from(grace.subsec_nanos() > 0)
}

/// The argv (engine first) that runs `spec` in the foreground, to be
/// supervised like a process module. `image` is what to start: the id
/// [`load_archive`] returned for an archive, the reference itself for a
/// pinned reference. An env name that is not a plain variable name is left
/// out rather than risk a value on argv ([`ContainerSpec::check`] names it).
pub fn run_argv(engine: &Path, spec: &ContainerSpec, image: &str) -> Vec<String> {
    let label = |key: &str, value: &dyn std::fmt::Display| format!("--label={key}={value}");
    let limit = |kind: &str, l: Limit| format!("--ulimit={kind}={}:{}", l.soft, l.hard);
    let mut argv = vec![
        engine.display().to_string(),
        "run".into(),
        // The client lives as long as the container: its exit status is the
        // module's, and the supervisor's restart starts a fresh one.
        "--rm".into(),
        // A container of an earlier run (its client SIGKILLed) is stopped
        // with its own --stop-timeout and removed, not a reason to fail
        // (podman prints its name, so the module's log says so).
        "--replace".into(),
        format!(
            "--name={}",
            container_name(&spec.node, &spec.module, &spec.host)
        ),
        label(LABEL_NODE, &spec.node),
        label(LABEL_MODULE, &spec.module),
        label(LABEL_HOST, &spec.host),
        label(LABEL_SEQUENCE, &spec.sequence),
        "--network=host".into(),
        // crun refuses cgroups v1 hybrid here (see the module docs).
        "--runtime=runc".into(),
        // A PID 1 without a SIGTERM handler ignores SIGTERM (the kernel
        // drops default-action signals to a namespace's init), so every stop
        // would wait out the grace; catatonit as PID 1 forwards the signal
        // and the module dies of it as a process module would.
        "--init".into(),
        limit("nofile", spec.ulimits.nofile),
        limit("nproc", spec.ulimits.nproc),
        // Used by `rm -f` and `--replace`, which otherwise wait 10 s.
        format!("--stop-timeout={}", grace_secs(spec.stop_grace)),
        // The container writes into the client's stdout and stderr (the
        // supervisor's pipes) directly: one copy of the output, in the
        // module's rotated log, and none growing in the engine's storage.
        "--log-driver=passthrough".into(),
        // The default, said out loud: a SIGTERM to the client's group (a
        // restarted host ending what an earlier one left) reaches the
        // container once it is recorded running; stops go by name anyway.
        "--sig-proxy=true".into(),
        // An archive was loaded and is named by id: never ask a registry.
        match spec.image {
            Image::Archive(_) => "--pull=never".into(),
            Image::Reference(_) => "--pull=missing".into(),
        },
    ];
    for name in spec.env_names.iter().filter(|n| is_env_name(n)) {
        argv.push("--env".into());
        argv.push(name.clone());
    }
    if let Some((host, container)) = &spec.workdir {
        argv.push("--volume".into());
        argv.push(format!("{}:{container}:rw", host.display()));
    }
    for (host, container) in &spec.mounts {
        argv.push("--volume".into());
        argv.push(format!("{}:{container}:ro", host.display()));
    }
    if let Some(secret) = &spec.secret_env {
        for (host, container) in [
            (&secret.shim, shim::CONTAINER_SHIM),
            (&secret.file, shim::CONTAINER_SECRET_ENV),
        ] {
            argv.push("--volume".into());
            argv.push(format!("{}:{container}:ro", host.display()));
        }
        argv.push(format!("--entrypoint={}", shim::CONTAINER_SHIM));
    }
    if let Some((_, w)) = &spec.workdir {
        argv.push(format!("--workdir={w}"));
    }
    argv.push(image.to_string());
    match &spec.secret_env {
        Some(secret) => argv.extend(secret.argv_after_image(&spec.args)),
        None => argv.extend(spec.args.iter().cloned()),
    }
    argv
}

#[cfg(test)]
mod tests;
