//! What `mesh up` runs of the catalogue beyond commands the machine has:
//! programs built here, put into the artifact store so the local node runs
//! them from its cache, and container modules, run only where an engine
//! is and their image is to be had.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use mesh_controller::Genesis;
use mesh_core::names::Name;

use super::LOCAL_NODE;
use crate::authority;
use crate::progress::Progress;

/// Whether the container module `m` can run here: an engine on this
/// machine, and its image either pinned by digest (the node pulls it) or
/// an artifact already put for it. Else why not, and what mends it.
pub(super) async fn container_ready(
    store: &mesh_store::Store,
    m: &mesh_core::manifest::Manifest,
) -> anyhow::Result<Result<(), String>> {
    use mesh_core::placeholders::Placeholder;
    if let Err(e) = mesh_host::driver::container::require_engine() {
        return Ok(Err(format!("a container module, and {e}")));
    }
    let module = &m.name.value;
    let wanted: Vec<&Name> = m
        .run
        .iter()
        .flat_map(|r| r.image.iter().chain(r.command.iter()))
        .flat_map(|v| &v.placeholders)
        .filter_map(|p| match &p.value {
            Placeholder::Artifact { name } => Some(name),
            _ => None,
        })
        .collect();
    let put = store.artifacts(Some(module)).await?;
    Ok(
        match wanted.iter().find(|w| !put.iter().any(|r| &&r.name == *w)) {
            None => Ok(()),
            Some(missing) => Err(format!(
                "no {missing} has been put for it; `mesh artifact put IMAGE.oci.tar --module {module} --name {missing}`, then `mesh assign {module} {LOCAL_NODE}`"
            )),
        },
    )
}

/// A module whose `[run]` starts a program built beside `mesh` (or found on
/// PATH) through `${artifact:PROGRAM}`: `mesh up` puts the program into
/// the artifact store, so the node runs it from its cache as any node
/// would, never from PATH.
#[derive(Debug, Clone)]
pub(super) struct LocalProgram {
    pub module: Name,
    pub artifact: Name,
    pub path: PathBuf,
}

/// Whether any part of the run names an artifact.
pub(super) fn names_artifacts(run: &mesh_core::manifest::Run) -> bool {
    use mesh_core::placeholders::Placeholder;
    run.command
        .iter()
        .chain(run.image.iter())
        .chain(run.env.iter().map(|e| &e.value))
        .flat_map(|v| &v.placeholders)
        .any(|p| matches!(p.value, Placeholder::Artifact { .. }))
}

/// `m` as a [`LocalProgram`]: a process whose command starts with
/// `${artifact:NAME}`, names no other artifact, and NAME is a program here.
pub(super) fn local_program(m: &mesh_core::manifest::Manifest) -> Option<LocalProgram> {
    use mesh_core::placeholders::Placeholder;
    let run = m.run.as_ref()?;
    if run.driver.value != mesh_core::manifest::Driver::Process {
        return None;
    }
    let argv0 = run.command.first()?;
    let [p] = argv0.placeholders.as_slice() else {
        return None;
    };
    let Placeholder::Artifact { name } = &p.value else {
        return None;
    };
    if argv0.text != format!("${{artifact:{name}}}") {
        return None;
    }
    let others = mesh_core::manifest::Run {
        command: run.command[1..].to_vec(),
        ..run.clone()
    };
    if names_artifacts(&others) {
        return None;
    }
    Some(LocalProgram {
        module: m.name.value.clone(),
        artifact: name.clone(),
        path: find_program(name.as_str())?,
    })
}

/// `program` beside this `mesh` (cargo builds the examples there), else on
/// PATH.
fn find_program(program: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe().ok()?.with_file_name(program);
    if beside.is_file() {
        return Some(beside);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Puts each program into the artifact store (its debug info stripped, as
/// a program is shipped: a debug build is mostly debug info, over 100 MB)
/// and assigns its module to the local node pinned at that version.
pub(super) async fn put_programs(
    dir: &Path,
    genesis: &Genesis,
    url: &str,
    programs: &[LocalProgram],
) -> anyhow::Result<Vec<Name>> {
    if programs.is_empty() {
        return Ok(Vec::new());
    }
    let putting = Progress::start(format!(
        "up: putting {} programs into the artifact store",
        programs.len()
    ));
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let work = dir.join("programs");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let client = crate::bus::controller_client(genesis).await?;
    let store = authority::open_store_to_write(url).await?;
    let mut assigned = Vec::new();
    let result = async {
        for p in programs {
            let shipped = work.join(p.artifact.as_str());
            let file = if strip_debug(&p.path, &shipped) {
                shipped.as_path()
            } else {
                p.path.as_path()
            };
            let js = async_nats::jetstream::new(client.clone());
            let put = crate::artifact::put_file(
                &store,
                async { anyhow::Ok(js) },
                &p.module,
                &p.artifact,
                file,
                None,
            )
            .await
            .with_context(|| format!("putting {} for module {}", p.path.display(), p.module))?;
            let _ = std::fs::remove_file(&shipped);
            store
                .assign_version(&node, &p.module, Some(&put.version))
                .await?;
            assigned.push(p.module.clone());
        }
        anyhow::Ok(())
    }
    .await;
    store.close().await;
    result?;
    putting.finish(Some(&format!(
        "up: {} put into the artifact store",
        assigned
            .iter()
            .map(Name::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    )));
    Ok(assigned)
}

/// `strip --strip-debug` of `program` into `out`; false (and nothing at
/// `out`) when there is no `strip` or it fails.
fn strip_debug(program: &Path, out: &Path) -> bool {
    let _ = std::fs::remove_file(out);
    let ok = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(out)
        .arg(program)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = std::fs::remove_file(out);
    }
    ok
}
