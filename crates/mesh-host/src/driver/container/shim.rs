//! A container module's secret variables, kept out of the engine's state.
//!
//! Measured here (podman 4.3.1): a variable passed with `--env` is written
//! into the engine's database (`libpod/bolt_state.db`, still there after the
//! container is removed) and into the container's `config.json`; one passed
//! as a `--secret …,type=env` still lands in `config.json`, since the
//! runtime reads a process's environment from there. So secret values are
//! never handed to the engine: the host writes them into a file of the
//! module (0600, beside its key, removed when the module is unassigned),
//! bind-mounts it and a static program, `mesh-env-shim`
//! (`shim/env_shim.rs`), read-only, and makes that program the entrypoint:
//! it adds the variables to its environment and execs the image's own
//! entrypoint and command, read from the image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mesh_core::secret::Secret;

use super::ContainerError;

/// The program, built static by `build.rs`; empty when the toolchain could
/// not link it so.
const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mesh-env-shim"));
/// Where the program is in the container.
pub const CONTAINER_SHIM: &str = "/run/mesh/env-shim";
/// Where the module's secret variables are in the container.
pub const CONTAINER_SECRET_ENV: &str = "/run/mesh/secret-env";
/// The file of a module's secret variables, in the module's directory.
pub const SECRET_ENV_FILE: &str = "secret-env";

/// How a container with secret variables starts: the shim and the file on
/// this host, and — read from the image at each launch — what the image
/// itself would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEnv {
    pub shim: PathBuf,
    pub file: PathBuf,
    pub image: ImageCommand,
}

/// An image's own `Entrypoint` and `Cmd`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageCommand {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
}

impl SecretEnv {
    /// What follows the image on the engine's command line: the file, then
    /// the image's entrypoint and either the module's arguments or, when
    /// it declares none, the image's command (as the engine would run it).
    pub fn argv_after_image(&self, args: &[String]) -> Vec<String> {
        let mut argv = vec![CONTAINER_SECRET_ENV.to_string()];
        argv.extend(self.image.entrypoint.iter().cloned());
        if args.is_empty() {
            argv.extend(self.image.cmd.iter().cloned());
        } else {
            argv.extend(args.iter().cloned());
        }
        argv
    }
}

/// Puts the shim into the host's state directory (`bin/mesh-env-shim`,
/// 0755), written again only when it differs; returns its path.
pub fn install(state_dir: &Path) -> Result<PathBuf, ContainerError> {
    use std::os::unix::fs::PermissionsExt as _;
    if SHIM.is_empty() {
        return Err(ContainerError::NoShim);
    }
    let path = state_dir.join("bin").join("mesh-env-shim");
    let io = |source| ContainerError::Shim {
        path: path.clone(),
        source,
    };
    if std::fs::read(&path).is_ok_and(|held| held == SHIM) {
        return Ok(path);
    }
    std::fs::create_dir_all(path.parent().unwrap_or(state_dir)).map_err(io)?;
    // Written beside and renamed: a container starting meanwhile never
    // runs half a program.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, SHIM).map_err(io)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    std::fs::rename(&partial, &path).map_err(io)?;
    Ok(path)
}

/// The file's bytes: `NAME=value` records, each ended by a NUL (a value may
/// hold a newline, never a NUL: an environment cannot carry one).
pub fn file_bytes(vars: &BTreeMap<String, Secret>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in vars {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.expose().as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_each_variable_ended_by_a_nul() {
        let vars = BTreeMap::from([
            ("API_TOKEN".to_string(), Secret::new("s3cr3t\nline two")),
            ("DB_PASSWORD".to_string(), Secret::new("p=w")),
        ]);
        assert_eq!(
            file_bytes(&vars),
            b"API_TOKEN=s3cr3t\nline two\0DB_PASSWORD=p=w\0".to_vec()
        );
    }

    #[test]
    fn the_image_runs_its_own_command_unless_the_module_gives_arguments() {
        let s = SecretEnv {
            shim: "/state/bin/mesh-env-shim".into(),
            file: "/state/modules/web/secret-env".into(),
            image: ImageCommand {
                entrypoint: vec!["/web".into()],
                cmd: vec!["--serve".into()],
            },
        };
        assert_eq!(
            s.argv_after_image(&[]),
            [CONTAINER_SECRET_ENV, "/web", "--serve"]
        );
        assert_eq!(
            s.argv_after_image(&["--port".into(), "80".into()]),
            [CONTAINER_SECRET_ENV, "/web", "--port", "80"]
        );
    }

    #[test]
    fn the_shim_is_installed_once_executable() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = install(dir.path()).expect("this toolchain links the shim statically");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(std::fs::read(&path).unwrap(), SHIM);
        assert_eq!(install(dir.path()).unwrap(), path);
    }
}
