//! The engine commands around a run: load an archive, stop a container by
//! name, remove the containers a previous host left. Each is bounded in
//! time and killed when its future is dropped, so a wedged engine (a storage
//! lock never released) cannot hold the host for ever.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mesh_core::names::Name;
use serde::Deserialize;
use tokio::process::Command;

use super::{ContainerError, LABEL_HOST, LABEL_MODULE, LABEL_NODE, grace_secs};

/// One engine command, beyond any grace it is given: a load copies layers,
/// and a command waits for a storage lock another podman holds.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);
/// Removing leftovers waits out each one's own `--stop-timeout` (its
/// declared grace, unknown here), in parallel.
const REMOVE_LIMIT: Duration = Duration::from_secs(600);
/// How much of an engine's complaint an error quotes.
const STDERR_CHARS: usize = 600;

/// Loads an OCI (or docker) archive and returns the loaded image's id (64
/// hex digits). The id, not a name, is what to run: names in archives may
/// collide, the id is the image's content. Loading the same archive again
/// changes nothing and returns the same id.
pub async fn load_archive(engine: &Path, path: &Path) -> Result<String, ContainerError> {
    let out = engine_run(
        engine,
        "load",
        &[
            "load".as_ref(),
            "-q".as_ref(),
            "-i".as_ref(),
            path.as_os_str(),
        ],
        COMMAND_LIMIT,
    )
    .await?;
    let names = parse_loaded(&out);
    let name = match names.as_slice() {
        [one] => one,
        [] => {
            return Err(ContainerError::NoImageLoaded {
                path: path.to_path_buf(),
                output: out.trim().to_string(),
            });
        }
        many => {
            return Err(ContainerError::ManyImages {
                path: path.to_path_buf(),
                count: many.len(),
                names: many.join(", "),
            });
        }
    };
    // An archive without a name loads as `sha256:<id>`; a named one is
    // asked for its id.
    let id = match name.strip_prefix("sha256:") {
        Some(hex) if is_image_id(hex) => hex.to_string(),
        _ => {
            let args: [&OsStr; 4] = [
                "image".as_ref(),
                "inspect".as_ref(),
                "--format={{.Id}}".as_ref(),
                name.as_ref(),
            ];
            engine_run(engine, "image inspect", &args, COMMAND_LIMIT)
                .await?
                .trim()
                .to_string()
        }
    };
    if is_image_id(&id) {
        Ok(id)
    } else {
        Err(ContainerError::Unreadable {
            what: "an image id",
            detail: format!("{id:?} for {name}"),
        })
    }
}

/// What `image` (an id, or a reference pinned by digest) runs by itself:
/// its `Entrypoint` and `Cmd`. A reference not on this node is pulled first
/// (its run would pull it anyway).
pub async fn image_command(
    engine: &Path,
    image: &str,
) -> Result<super::ImageCommand, ContainerError> {
    #[derive(Deserialize)]
    struct Inspected {
        #[serde(rename = "Config", default)]
        config: Config,
    }
    #[derive(Deserialize, Default)]
    struct Config {
        #[serde(rename = "Entrypoint", default)]
        entrypoint: Option<Vec<String>>,
        #[serde(rename = "Cmd", default)]
        cmd: Option<Vec<String>>,
    }
    let inspect = [
        "image".as_ref(),
        "inspect".as_ref(),
        "--format=json".as_ref(),
        OsStr::new(image),
    ];
    let out = match engine_run(engine, "image inspect", &inspect, COMMAND_LIMIT).await {
        Ok(out) => out,
        Err(_) => {
            let pull = ["pull".as_ref(), "--quiet".as_ref(), OsStr::new(image)];
            engine_run(engine, "pull", &pull, COMMAND_LIMIT).await?;
            engine_run(engine, "image inspect", &inspect, COMMAND_LIMIT).await?
        }
    };
    let unreadable = |detail: String| ContainerError::Unreadable {
        what: "an image's configuration",
        detail,
    };
    let mut found: Vec<Inspected> =
        serde_json::from_str(&out).map_err(|e| unreadable(e.to_string()))?;
    let one = found
        .pop()
        .ok_or_else(|| unreadable(format!("no image {image}")))?;
    Ok(super::ImageCommand {
        entrypoint: one.config.entrypoint.unwrap_or_default(),
        cmd: one.config.cmd.unwrap_or_default(),
    })
}

/// The names `podman load` reports (`Loaded image: X`; some versions print
/// `Loaded image(s): X, Y`), each once, in order.
pub fn parse_loaded(stdout: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in stdout.lines() {
        let line = line.trim();
        let Some(rest) = line
            .strip_prefix("Loaded image(s):")
            .or_else(|| line.strip_prefix("Loaded image:"))
        else {
            continue;
        };
        for name in rest.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

fn is_image_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Stops container `name` with the engine's stop (its stop signal, SIGKILL
/// once `grace` passed), then removes it. A container already gone (its
/// `--rm` done, or never started) is no error. The container is addressed
/// by name, not through its client: a client SIGKILLed earlier left it
/// running, and only the engine can still reach it.
pub async fn stop(engine: &Path, name: &str, grace: Duration) -> Result<(), ContainerError> {
    let secs = grace_secs(grace).to_string();
    let stopped = engine_run(
        engine,
        "stop",
        &[
            "stop".as_ref(),
            "--ignore".as_ref(),
            "-t".as_ref(),
            secs.as_ref(),
            name.as_ref(),
        ],
        grace + COMMAND_LIMIT,
    )
    .await;
    // Removed whatever the stop said: if it failed, `rm -f` kills; the
    // container is already stopped otherwise, so there is no grace to give.
    let removed = engine_run(
        engine,
        "rm",
        &[
            "rm".as_ref(),
            "-f".as_ref(),
            "--ignore".as_ref(),
            "-t".as_ref(),
            "0".as_ref(),
            name.as_ref(),
        ],
        COMMAND_LIMIT,
    )
    .await;
    match (stopped, removed) {
        (_, Err(e)) if !is_gone(&e) => Err(e),
        (Err(e), _) if !is_gone(&e) => {
            tracing::warn!(container = name, error = %e, "stop failed; removed by force");
            Ok(())
        }
        _ => Ok(()),
    }
}

/// An engine's "no such container": what a stop or a removal wanted.
fn is_gone(e: &ContainerError) -> bool {
    matches!(e, ContainerError::Failed { stderr, .. } if stderr.contains("no such container"))
}

/// Removes every container labelled with `node` and the host key `host`
/// whose module is not in `keep` (a container naming no module included),
/// each with its own `--stop-timeout`; returns their names, sorted. Other
/// nodes' and other hosts' containers are never touched. For a host
/// starting again: what its declaration does not name must not run.
pub async fn remove_others(
    engine: &Path,
    node: &Name,
    host: &str,
    keep: &[Name],
) -> Result<Vec<String>, ContainerError> {
    let filter = format!("--filter=label={LABEL_NODE}={node}");
    let listed = engine_run(
        engine,
        "ps",
        &[
            "ps".as_ref(),
            "-a".as_ref(),
            filter.as_ref(),
            "--format=json".as_ref(),
        ],
        COMMAND_LIMIT,
    )
    .await?;
    let names = others(&listed, node, host, keep)?;
    if names.is_empty() {
        return Ok(names);
    }
    let mut args: Vec<&OsStr> = vec!["rm".as_ref(), "-f".as_ref(), "--ignore".as_ref()];
    args.extend(names.iter().map(|n| OsStr::new(n.as_str())));
    engine_run(engine, "rm", &args, REMOVE_LIMIT).await?;
    Ok(names)
}

/// Removes every container of `node` and the host key `host` at once
/// (`rm -f -t 0`), blocking: for a host forced to exit on a second signal,
/// with no runtime left to wait in. Returns their names.
pub fn kill_node_now(
    engine: &Path,
    node: &Name,
    host: &str,
) -> Result<Vec<String>, ContainerError> {
    let run = |action: &'static str, args: &[&str]| -> Result<String, ContainerError> {
        let output = std::process::Command::new(engine)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ContainerError::Spawn {
                engine: engine.to_path_buf(),
                action,
                source,
            })?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        Err(ContainerError::Failed {
            engine: engine.to_path_buf(),
            action,
            status: crate::driver::ExitInfo::from_status(output.status).to_string(),
            stderr: condensed(&String::from_utf8_lossy(&output.stderr)),
        })
    };
    let filter = format!("--filter=label={LABEL_NODE}={node}");
    let listed = run("ps", &["ps", "-a", &filter, "--format=json"])?;
    let names = others(&listed, node, host, &[])?;
    if !names.is_empty() {
        let mut args = vec!["rm", "-f", "--ignore", "-t", "0"];
        args.extend(names.iter().map(String::as_str));
        run("rm", &args)?;
    }
    Ok(names)
}

#[derive(Deserialize)]
struct Listed {
    #[serde(rename = "Id", default)]
    id: String,
    #[serde(rename = "Names", default)]
    names: Vec<String>,
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
}

/// From `podman ps -a --format json`, the names of the containers of `node`
/// and `host` whose module is not kept. The labels are checked here too:
/// the engine's filter is only a first cut.
pub fn others(
    listed: &str,
    node: &Name,
    host: &str,
    keep: &[Name],
) -> Result<Vec<String>, ContainerError> {
    if listed.trim().is_empty() {
        return Ok(Vec::new());
    }
    let listed: Vec<Listed> =
        serde_json::from_str(listed).map_err(|e| ContainerError::Unreadable {
            what: "a container list",
            detail: e.to_string(),
        })?;
    let mut names: Vec<String> = listed
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            if labels.get(LABEL_NODE).map(String::as_str) != Some(node.as_str())
                || labels.get(LABEL_HOST).map(String::as_str) != Some(host)
            {
                return None;
            }
            let kept = labels
                .get(LABEL_MODULE)
                .is_some_and(|m| keep.iter().any(|k| k.as_str() == m));
            if kept {
                return None;
            }
            c.names
                .into_iter()
                .next()
                .or(Some(c.id))
                .filter(|n| !n.is_empty())
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Runs one engine command with no stdin and returns its stdout; a failure
/// quotes the end of stderr.
async fn engine_run(
    engine: &Path,
    action: &'static str,
    args: &[&OsStr],
    limit: Duration,
) -> Result<String, ContainerError> {
    let mut cmd = Command::new(engine);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let engine_path = || PathBuf::from(engine);
    let output = match tokio::time::timeout(limit, cmd.output()).await {
        Err(_) => {
            return Err(ContainerError::TimedOut {
                engine: engine_path(),
                action,
                limit,
            });
        }
        Ok(Err(source)) => {
            return Err(ContainerError::Spawn {
                engine: engine_path(),
                action,
                source,
            });
        }
        Ok(Ok(output)) => output,
    };
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let status = crate::driver::ExitInfo::from_status(output.status).to_string();
    Err(ContainerError::Failed {
        engine: engine_path(),
        action,
        status,
        stderr: condensed(&String::from_utf8_lossy(&output.stderr)),
    })
}

/// Stderr's lines joined on one line, its last [`STDERR_CHARS`] kept.
fn condensed(stderr: &str) -> String {
    let joined = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let count = joined.chars().count();
    if count <= STDERR_CHARS {
        return joined;
    }
    let tail: String = joined.chars().skip(count - STDERR_CHARS).collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn loaded_names_are_read_from_either_spelling() {
        let id = "85010d0eae01df75e58b4877cee3088cf5537226de949f5a68d50eb77c070cd6";
        assert_eq!(
            parse_loaded("Loaded image: localhost/probe:built\n"),
            ["localhost/probe:built"]
        );
        assert_eq!(
            parse_loaded(&format!("Loaded image: sha256:{id}\n")),
            [format!("sha256:{id}")]
        );
        assert_eq!(
            parse_loaded("Loaded image(s): a:1, b:2\nLoaded image: a:1\n"),
            ["a:1", "b:2"]
        );
        assert!(parse_loaded("Getting image source signatures\n").is_empty());
        assert!(is_image_id(id));
        assert!(!is_image_id(&id[1..]));
        assert!(!is_image_id(&id.to_uppercase()));
    }

    #[test]
    fn others_are_the_nodes_containers_not_kept() {
        let listed = r#"[
          {"Id": "1", "Names": ["mesh-n1-keep"], "Labels": {"mesh.node": "n1", "mesh.host": "UA", "mesh.module": "keep"}},
          {"Id": "2", "Names": ["mesh-n1-gone"], "Labels": {"mesh.node": "n1", "mesh.host": "UA", "mesh.module": "gone"}},
          {"Id": "3", "Names": ["stray"], "Labels": {"mesh.node": "n1", "mesh.host": "UA"}},
          {"Id": "4", "Names": ["mesh-n10-gone"], "Labels": {"mesh.node": "n10", "mesh.host": "UA", "mesh.module": "gone"}},
          {"Id": "5", "Names": ["unlabelled"], "Labels": null},
          {"Id": "6", "Names": [], "Labels": {"mesh.node": "n1", "mesh.host": "UA", "mesh.module": "old"}},
          {"Id": "7", "Names": ["other-mesh"], "Labels": {"mesh.node": "n1", "mesh.host": "UB", "mesh.module": "gone"}},
          {"Id": "8", "Names": ["no-host"], "Labels": {"mesh.node": "n1", "mesh.module": "gone"}}
        ]"#;
        let got = others(listed, &name("n1"), "UA", &[name("keep")]).unwrap();
        assert_eq!(got, ["6", "mesh-n1-gone", "stray"]);
        assert!(others("[]", &name("n1"), "UA", &[]).unwrap().is_empty());
        assert!(others("\n", &name("n1"), "UA", &[]).unwrap().is_empty());
        let e = others("{not json", &name("n1"), "UA", &[])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("the engine answered a container list"), "{e}");
    }

    #[test]
    fn an_engine_complaint_is_kept_short_and_on_one_line() {
        assert_eq!(condensed("Error: a\n * b\n\n"), "Error: a; * b");
        let long = "x".repeat(STDERR_CHARS * 2);
        let c = condensed(&long);
        assert_eq!(c.chars().count(), STDERR_CHARS + 1);
        assert!(c.starts_with('…'));
    }

    #[test]
    fn no_such_container_counts_as_gone() {
        let failed = |stderr: &str| ContainerError::Failed {
            engine: "podman".into(),
            action: "rm",
            status: "exited with status 125".into(),
            stderr: stderr.into(),
        };
        assert!(is_gone(&failed(
            "Error: no container with name or ID \"x\" found: no such container"
        )));
        assert!(!is_gone(&failed("Error: container state improper")));
    }
}
