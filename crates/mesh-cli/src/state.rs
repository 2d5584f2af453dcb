//! Where a command finds the mesh: the controller's state directory and its
//! store. One definition, so every command agrees on the defaults.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct MeshArgs {
    /// The controller's state directory (made by `mesh init`).
    #[arg(long, default_value = ".mesh")]
    pub dir: PathBuf,
    /// The store (`sqlite://PATH` or `postgres://...`); default: `mesh.db`
    /// in the state directory.
    // The URL may carry the database password: `--help` must not print it.
    #[arg(long, env = "MESH_STORE", hide_env_values = true)]
    pub store: Option<String>,
}

impl MeshArgs {
    pub fn store_url(&self) -> String {
        match &self.store {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.dir.join("mesh.db").display()),
        }
    }
}
