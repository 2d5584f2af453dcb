//! Where a command finds the mesh: the controller's state directory and its
//! store. One definition, so every command agrees on the lookup: `--dir`,
//! then `MESH_DIR`, then the nearest `.mesh` directory in the working
//! directory or above it (as git finds `.git`). Only `mesh init`, `mesh up`
//! and `mesh fleet load` make a mesh where none is found.

use std::path::{Path, PathBuf};

use clap::Args;

/// The environment variable naming the mesh's directory.
pub const MESH_DIR: &str = "MESH_DIR";

/// The directory name looked for above the working directory, and the one
/// `mesh init` and `mesh up` make in it.
pub const DIR_NAME: &str = ".mesh";

#[derive(Debug, Clone, Args)]
pub struct MeshArgs {
    /// The mesh's directory (made by `mesh init` or `mesh up`) [default:
    /// `MESH_DIR`, else the nearest `.mesh` directory in the working
    /// directory or above it].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The store (`sqlite://PATH` or `postgres://...`); default: the one
    /// the mesh's `store.url` names, else `mesh.db` in its directory.
    // The URL may carry the database password: `--help` must not print it.
    #[arg(long, env = "MESH_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// A file holding the store's URL (read, trimmed): a password in it is
    /// on no command line and in no child's environment.
    #[arg(
        long,
        env = "MESH_STORE_FILE",
        value_name = "FILE",
        conflicts_with = "store"
    )]
    pub store_file: Option<PathBuf>,
}

/// The store URL in `path`: its first line, trimmed. The error names the
/// file, never its content.
pub fn read_store_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading the store URL from {}: {e}", path.display()))?;
    let url = text.lines().next().unwrap_or("").trim().to_string();
    if url.is_empty() {
        anyhow::bail!(
            "{} holds no store URL; write one line: sqlite://PATH or postgres://USER:PASSWORD@HOST/DATABASE",
            path.display()
        );
    }
    Ok(url)
}

/// No mesh could be found, and this command does not make one.
#[derive(Debug)]
pub enum NoMesh {
    /// Nothing given, and no `.mesh` at or above the working directory.
    NotFound { cwd: PathBuf },
    /// The directory given holds no mesh, but its `.mesh` does (a
    /// checkout's root given for the mesh `mesh up` made in it).
    Below { given: PathBuf, below: PathBuf },
}

impl std::fmt::Display for NoMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoMesh::NotFound { cwd } => write!(
                f,
                "no mesh found: no --dir given, {MESH_DIR} is not set, and no {DIR_NAME} directory in {} or above it; run `mesh up` or `mesh init` here, point at a mesh with --dir DIR or {MESH_DIR}=DIR, or, from your own machine, `mesh login` as a person",
                cwd.display()
            ),
            NoMesh::Below { given, below } => write!(
                f,
                "{} holds no mesh, but {} does: give --dir {}",
                given.display(),
                below.display(),
                below.display()
            ),
        }
    }
}

impl std::error::Error for NoMesh {}

impl MeshArgs {
    /// The mesh's directory: `--dir`, `MESH_DIR`, or the nearest `.mesh`
    /// above the working directory. Nothing is created.
    pub fn find(&self) -> Result<PathBuf, NoMesh> {
        let env = std::env::var_os(MESH_DIR).filter(|v| !v.is_empty());
        let given = self.dir.clone().or(env.map(PathBuf::from));
        if let Some(dir) = &given {
            return given_dir(dir);
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        find_dir(None, &cwd)
    }

    /// The context to ask over the bus: the current one (`mesh login`),
    /// when nothing names a mesh here — no `--dir`, `MESH_DIR`, store, or
    /// `.mesh` at or above the working directory.
    pub fn remote(&self) -> anyhow::Result<Option<crate::context::Context>> {
        if self.store.is_some() || self.store_file.is_some() {
            return Ok(None);
        }
        match self.find() {
            Err(NoMesh::NotFound { .. }) => crate::context::current(),
            Ok(_) | Err(NoMesh::Below { .. }) => Ok(None),
        }
    }

    /// As [`MeshArgs::find`], as the error a command ends with.
    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        self.found()
    }

    /// The mesh found; none, with a context current, is a command the
    /// controller does not serve over the bus, said as such.
    fn found(&self) -> anyhow::Result<PathBuf> {
        match self.find() {
            Ok(dir) => Ok(dir),
            Err(e @ NoMesh::NotFound { .. }) => match crate::context::current() {
                Ok(Some(ctx)) => Err(anyhow::anyhow!(
                    "this command reads the mesh's directory, which is on the controller's machine: it is not served over the bus (yet) to context {} (person {}); run it there (the README's \"Operating from your own machine\" lists what a context serves)",
                    ctx.name,
                    ctx.person
                )),
                _ => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// The mesh found, or `./.mesh` to be made: for the commands that make
    /// a mesh where there is none.
    pub fn dir_or_new(&self) -> PathBuf {
        self.find().unwrap_or_else(|_| PathBuf::from(DIR_NAME))
    }

    /// `--store` (or `MESH_STORE`), else `mesh.db` in the mesh found; no
    /// mesh is an error when no store is named.
    pub fn store_url(&self) -> anyhow::Result<String> {
        match (&self.store, &self.store_file) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(file)) => read_store_file(file),
            (None, None) => default_store(&self.found()?),
        }
    }

    /// As [`MeshArgs::store_url`], with `./.mesh` when no mesh is found.
    pub fn store_url_or_new(&self) -> anyhow::Result<String> {
        match (&self.store, &self.store_file) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(file)) => read_store_file(file),
            (None, None) => default_store(&self.dir_or_new()),
        }
    }
}

/// The store of the mesh in `dir` when none is named: the one its
/// `store.url` names (`mesh up --ha` writes it), else its `mesh.db`.
pub fn default_store(dir: &Path) -> anyhow::Result<String> {
    let named = dir.join(STORE_URL_FILE);
    match named.is_file() {
        true => read_store_file(&named),
        false => Ok(sqlite_in(dir)),
    }
}

/// The file in a mesh's directory naming its store, when that is not its
/// `mesh.db`.
pub const STORE_URL_FILE: &str = "store.url";

/// The default store of the mesh in `dir`.
pub fn sqlite_in(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("mesh.db").display())
}

/// Whether `dir` holds a mesh's genesis.
fn is_mesh(dir: &Path) -> bool {
    dir.join(mesh_controller::genesis::SIGNING_SEED).is_file()
}

/// The directory given (`--dir`, `MESH_DIR`), unless it holds no mesh while
/// its `.mesh` does: then the one meant is named. A directory holding
/// neither is left to the command (`mesh init` makes one there).
fn given_dir(dir: &Path) -> Result<PathBuf, NoMesh> {
    let below = dir.join(DIR_NAME);
    if !is_mesh(dir) && is_mesh(&below) {
        return Err(NoMesh::Below {
            given: dir.to_path_buf(),
            below,
        });
    }
    Ok(dir.to_path_buf())
}

/// `env` when set, else the nearest `.mesh` directory at or above `cwd`.
fn find_dir(env: Option<PathBuf>, cwd: &Path) -> Result<PathBuf, NoMesh> {
    if let Some(dir) = env {
        return Ok(dir);
    }
    cwd.ancestors()
        .map(|d| d.join(DIR_NAME))
        .find(|d| d.is_dir())
        .ok_or_else(|| NoMesh::NotFound {
            cwd: cwd.to_path_buf(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_mesh_above_is_found_and_the_environment_comes_first() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join(DIR_NAME);
        let deep = tmp.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(&top).unwrap();
        assert_eq!(find_dir(None, &deep).unwrap(), top);
        // The nearer one wins.
        let near = tmp.path().join("a").join(DIR_NAME);
        std::fs::create_dir(&near).unwrap();
        assert_eq!(find_dir(None, &deep).unwrap(), near);
        let env = PathBuf::from("/elsewhere");
        assert_eq!(find_dir(Some(env.clone()), &deep).unwrap(), env);
    }

    #[test]
    fn a_directory_given_for_the_mesh_below_it_names_that_mesh() {
        let tmp = tempfile::tempdir().unwrap();
        let below = tmp.path().join(DIR_NAME);
        std::fs::create_dir_all(below.join("controller")).unwrap();
        std::fs::write(below.join(mesh_controller::genesis::SIGNING_SEED), "").unwrap();
        let e = given_dir(tmp.path()).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{} holds no mesh, but {} does: give --dir {}",
                tmp.path().display(),
                below.display(),
                below.display()
            )
        );
        assert_eq!(given_dir(&below).unwrap(), below);
        // Neither a mesh nor above one: left to the command.
        let empty = tmp.path().join("empty");
        assert_eq!(given_dir(&empty).unwrap(), empty);
    }

    #[test]
    fn a_file_named_mesh_is_not_a_mesh() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(DIR_NAME), "").unwrap();
        let found = find_dir(None, tmp.path());
        // Unless something above the temp dir is a mesh, nothing is found.
        if tmp
            .path()
            .ancestors()
            .skip(1)
            .all(|d| !d.join(DIR_NAME).is_dir())
        {
            let e = found.unwrap_err().to_string();
            assert!(e.starts_with("no mesh found"), "{e}");
            assert!(e.contains(&tmp.path().display().to_string()), "{e}");
        } else {
            assert_ne!(found.ok(), Some(tmp.path().join(DIR_NAME)));
        }
    }
}
