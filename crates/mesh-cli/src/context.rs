//! Contexts: how a person's own machine reaches a mesh — the bus's
//! addresses and certificate pin, the person's name and key file — kept
//! in `$XDG_CONFIG_HOME/mesh` (else `~/.config/mesh`), one file per
//! context (0600) and `current` naming the one in use. `MESH_CONTEXT`
//! chooses another for one command. A command with no mesh directory
//! found (`--dir`, `MESH_DIR`, `.mesh`) uses the current context.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// The environment variable choosing a context for one command.
pub const MESH_CONTEXT: &str = "MESH_CONTEXT";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    pub name: String,
    pub person: String,
    /// Every server's `tls://` address.
    pub urls: Vec<String>,
    /// The broker certificate's SHA-256 (hex).
    pub pin: String,
    /// The person's seed file (0600, on this machine only).
    pub key_file: PathBuf,
}

/// Where contexts are kept.
pub fn home() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_CONFIG_HOME nor HOME is set: no place for contexts")?,
        )
        .join(".config"),
    };
    Ok(base.join("mesh"))
}

fn file(home: &Path, name: &str) -> PathBuf {
    home.join(format!("{name}.context.json"))
}

/// Writes `ctx` and makes it the current one.
pub fn save(ctx: &Context) -> anyhow::Result<PathBuf> {
    let home = home()?;
    std::fs::create_dir_all(&home).with_context(|| format!("making {}", home.display()))?;
    let path = file(&home, &ctx.name);
    let text = serde_json::to_string_pretty(ctx)?;
    mesh_files::write_private(&path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    use_context(&ctx.name)?;
    Ok(path)
}

/// Makes `name` the current context.
pub fn use_context(name: &str) -> anyhow::Result<()> {
    let home = home()?;
    if !file(&home, name).is_file() {
        bail!(
            "there is no context {name:?}; `mesh context list` lists them, `mesh login` makes one"
        );
    }
    mesh_files::write_private(&home.join("current"), format!("{name}\n").as_bytes())
        .context("writing the current context")?;
    Ok(())
}

/// Every context, by name, and the current one's name.
pub fn list() -> anyhow::Result<(Vec<Context>, Option<String>)> {
    let home = home()?;
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir(&home) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name.strip_suffix(".context.json") {
                out.push(read(&home, n)?);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, current_name(&home)))
}

fn current_name(home: &Path) -> Option<String> {
    if let Some(n) = std::env::var_os(MESH_CONTEXT).filter(|v| !v.is_empty()) {
        return Some(n.to_string_lossy().into_owned());
    }
    let text = std::fs::read_to_string(home.join("current")).ok()?;
    Some(text.trim().to_string()).filter(|n| !n.is_empty())
}

fn read(home: &Path, name: &str) -> anyhow::Result<Context> {
    let path = file(home, name);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} does not read as a context; `mesh login` writes it again",
            path.display()
        )
    })
}

/// The context in use (`MESH_CONTEXT`, else `current`), if any.
pub fn current() -> anyhow::Result<Option<Context>> {
    let Ok(home) = home() else { return Ok(None) };
    match current_name(&home) {
        Some(name) => read(&home, &name).map(Some),
        None => Ok(None),
    }
}
