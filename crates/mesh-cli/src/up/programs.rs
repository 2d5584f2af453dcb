//! What `mesh up` runs of the catalogue beyond commands the machine has:
//! programs built here, put into the artifact store so the local node runs
//! them from its cache, and container modules, run only where an engine
//! is and their image is to be had.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use mesh_controller::Genesis;
use mesh_controller::genesis::BusKind;
use mesh_core::names::Name;

use super::LOCAL_NODE;
use crate::authority;
use crate::progress::Progress;

/// What `mesh up` can do with a container module.
pub(super) enum Container {
    /// Assign it: its image is pinned by digest or already put.
    Ready,
    /// Build its image here, put it, then assign it.
    Build(LocalProgram),
    /// Leave it unassigned, for this reason (naming what mends it).
    Left(String),
}

/// The artifact name for an image of program P that `mesh up` builds here
/// (`FROM scratch`: P and the libraries it loads): `P-image`.
const IMAGE_SUFFIX: &str = "-image";

/// What the container module `m` needs here: an engine on this machine,
/// and its image either built here (`image = "${artifact:P-image}"` with P
/// a program beside `mesh`), pinned by digest (the node pulls it), or an
/// artifact already put for it.
pub(super) async fn container_ready(
    store: &mesh_store::Store,
    m: &mesh_core::manifest::Manifest,
) -> anyhow::Result<Container> {
    use mesh_core::placeholders::Placeholder;
    if let Err(e) = mesh_host::driver::container::require_engine() {
        return Ok(Container::Left(format!("a container module, and {e}")));
    }
    let module = &m.name.value;
    let artifacts = |values: &mut dyn Iterator<Item = &mesh_core::manifest::RunValue>| {
        values
            .flat_map(|v| v.placeholders.iter())
            .filter_map(|p| match &p.value {
                Placeholder::Artifact { name } => Some(name.clone()),
                _ => None,
            })
            .collect::<Vec<Name>>()
    };
    let Some(run) = &m.run else {
        return Ok(Container::Left("it has no [run]".into()));
    };
    let in_image = artifacts(&mut run.image.iter());
    let in_command = artifacts(&mut run.command.iter());
    if let ([image], []) = (in_image.as_slice(), in_command.as_slice())
        && let Some(program) = image.as_str().strip_suffix(IMAGE_SUFFIX)
        && let Some(path) = find_program(program)
    {
        return Ok(Container::Build(LocalProgram {
            module: module.clone(),
            artifact: image.clone(),
            path,
            image: true,
        }));
    }
    let put = store.artifacts(Some(module)).await?;
    Ok(
        match in_image
            .iter()
            .chain(&in_command)
            .find(|w| !put.iter().any(|r| &r.name == *w))
        {
            None => Container::Ready,
            Some(missing) => Container::Left(format!(
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
    /// An image of the program is put (see [`Container::Build`]), not the
    /// program itself.
    pub image: bool,
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
        image: false,
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

/// Waits until JetStream answers: a cluster's servers listen seconds
/// before they have elected the leader that answers its requests, and a
/// put meanwhile times out.
async fn jetstream_ready(client: &async_nats::Client) -> anyhow::Result<()> {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(60);
    let js = async_nats::jetstream::new(client.clone());
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let asked = tokio::time::timeout(std::time::Duration::from_secs(2), js.query_account());
        let why = match asked.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer".to_string(),
        };
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "JetStream did not answer within {WITHIN:?} ({why}); the broker servers' logs (in broker/) say why"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
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
    // On RabbitMQ the controller keeps them itself (no object store).
    let client = match genesis.bus {
        BusKind::Nats => {
            let c = crate::bus::controller_client(genesis, url).await?;
            jetstream_ready(&c).await?;
            Some(c)
        }
        BusKind::Amqp => None,
    };
    let store = authority::open_store_to_write(url).await?;
    let mut assigned = Vec::new();
    let result = async {
        for p in programs {
            let shipped = work.join(p.artifact.as_str());
            let file = if p.image {
                build_image(p, &work.join("image-build"), &shipped).await?;
                shipped.as_path()
            } else if strip_debug(&p.path, &shipped) {
                shipped.as_path()
            } else {
                p.path.as_path()
            };
            let put = match &client {
                Some(client) => {
                    let js = async_nats::jetstream::new(client.clone());
                    crate::artifact::put_file(
                        &store,
                        async { anyhow::Ok(js) },
                        &p.module,
                        &p.artifact,
                        file,
                        None,
                        usize::from(genesis.replicas),
                    )
                    .await
                }
                None => {
                    mesh_controller::artifacts::keep_file(
                        &store,
                        dir,
                        &p.module,
                        &p.artifact,
                        file,
                        None,
                    )
                    .await
                }
            }
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

/// An OCI archive at `out` of an image holding `p`'s program alone,
/// built with the container engine in `build` (removed after).
async fn build_image(p: &LocalProgram, build: &Path, out: &Path) -> anyhow::Result<()> {
    let engine = mesh_host::driver::container::require_engine()?;
    let (program, tag) = (p.path.clone(), format!("localhost/{}:latest", p.artifact));
    let (build, out) = (build.to_path_buf(), out.to_path_buf());
    let made = tokio::task::spawn_blocking(move || {
        let made = crate::image::build_archive(&engine, &program, &tag, &build, &out);
        let _ = std::fs::remove_dir_all(&build);
        made
    })
    .await?;
    made.with_context(|| {
        format!(
            "building an image of {} for module {}",
            p.path.display(),
            p.module
        )
    })
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
