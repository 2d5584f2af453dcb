//! The repository side of a build, through the git CLI: one mirror per
//! repository URL in the cache (fetched again before each build, so a new
//! commit is seen), a revision resolved to its commit, and a clean
//! checkout of that commit for the build alone.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest as _, Sha256};
use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("could not run git (is it installed on the build machine?): {0}")]
    Spawn(#[source] std::io::Error),
    #[error("git {what} failed: {stderr}")]
    Failed { what: String, stderr: String },
    #[error("revision {rev} is not a commit of {repository}")]
    NoSuchRev { rev: String, repository: String },
}

/// git with nothing of the build machine's own configuration that could
/// prompt or reach elsewhere: no terminal prompt, no system config.
fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

async fn output(mut c: Command, what: &str) -> Result<String, GitError> {
    let out = c.output().await.map_err(GitError::Spawn)?;
    if !out.status.success() {
        return Err(GitError::Failed {
            what: what.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The mirror of `url` under `repos`, cloned the first time and fetched
/// every time after. The directory is named by the URL's digest: a URL
/// never becomes a path.
pub async fn fetch(repos: &Path, url: &str) -> Result<PathBuf, GitError> {
    let name = hex::encode(&Sha256::digest(url.as_bytes())[..12]);
    let mirror = repos.join(format!("{name}.git"));
    if mirror.join("HEAD").exists() {
        let mut c = git();
        c.arg("-C")
            .arg(&mirror)
            .args(["fetch", "--quiet", "--prune", "origin"]);
        output(c, &format!("fetch of {url}")).await?;
    } else {
        let partial = repos.join(format!("{name}.partial"));
        let _ = std::fs::remove_dir_all(&partial);
        let mut c = git();
        c.args(["clone", "--quiet", "--mirror", "--"])
            .arg(url)
            .arg(&partial);
        output(c, &format!("clone of {url}")).await?;
        // Only a whole clone takes the mirror's name: one cut off is
        // cloned again rather than fetched into.
        std::fs::rename(&partial, &mirror).map_err(GitError::Spawn)?;
    }
    Ok(mirror)
}

/// The commit `rev` names in `mirror` (a branch, a tag, a commit id).
pub async fn resolve(mirror: &Path, rev: &str) -> Result<String, GitError> {
    let mut c = git();
    c.arg("-C")
        .arg(mirror)
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"));
    match output(c, "rev-parse").await {
        Ok(commit) if commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(commit)
        }
        Ok(_) | Err(GitError::Failed { .. }) => Err(GitError::NoSuchRev {
            rev: rev.to_string(),
            repository: mirror.display().to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// A clean working tree of `commit` at `dir` (which must not exist).
pub async fn checkout(mirror: &Path, commit: &str, dir: &Path) -> Result<(), GitError> {
    let mut c = git();
    c.args(["clone", "--quiet", "--shared", "--no-checkout", "--"])
        .arg(mirror)
        .arg(dir);
    output(c, "clone for the build").await?;
    let mut c = git();
    c.arg("-C")
        .arg(dir)
        .args(["checkout", "--quiet", "--detach", commit]);
    output(c, &format!("checkout of {commit}")).await?;
    Ok(())
}
