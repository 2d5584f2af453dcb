//! What `mesh up` writes into the records before its controller opens
//! them (SQLite has one writer): the local node, the catalogue registered,
//! its runnable modules assigned to the local node.

use std::path::Path;

use mesh_core::names::Name;

use super::LOCAL_NODE;
use super::programs::{Container, LocalProgram, container_ready, local_program, names_artifacts};
use crate::progress::Progress;
use crate::{authority, output};

/// What the records say before the local host starts.
pub(super) struct Prepared {
    /// The modules assigned to the local node.
    pub assigned: Vec<Name>,
    /// The modules that run a program built here, put and assigned once
    /// the broker is up.
    pub programs: Vec<LocalProgram>,
    /// The id of its newest report so far: the wait for this run's report
    /// skips the previous run's.
    pub seen: Option<i64>,
}

/// The local node recorded, the catalogue registered and its runnable
/// modules assigned to it.
pub(super) async fn prepare_records(url: &str, catalogue: &Path) -> anyhow::Result<Prepared> {
    let registering = Progress::start(format!(
        "up: registering {} and assigning its runnable modules",
        catalogue.display()
    ));
    let (assigned, programs) = register_and_assign(url, catalogue).await?;
    registering.finish(None);
    let seen = latest_report_id(url).await?;
    Ok(Prepared {
        assigned,
        programs,
        seen,
    })
}

/// Registers the catalogue and assigns to the local node each module whose
/// command is on PATH (the others describe programs this machine lacks);
/// returns those assigned and those that run a program built here (see
/// [`local_program`]), to put into the artifact store first.
async fn register_and_assign(
    url: &str,
    catalogue: &Path,
) -> anyhow::Result<(Vec<Name>, Vec<LocalProgram>)> {
    if !catalogue.exists() {
        output::note(format_args!(
            "up: no catalogue at {}; nothing assigned",
            catalogue.display()
        ));
        return Ok((Vec::new(), Vec::new()));
    }
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_store(url).await?;
    let mut assigned = Vec::new();
    let mut programs = Vec::new();
    let mut left = Vec::new();
    let result = async {
        if store.node(&node).await?.is_none() {
            store.add_node(&node, &[]).await?;
        }
        let registered = crate::registering::register(
            &store,
            &[catalogue.to_path_buf()],
            "nothing was registered",
        )
        .await?;
        for m in registered.report.catalogue.manifests() {
            // The foundation (broker, store) is what `mesh up` runs itself:
            // a module holding it would be a second broker, started without
            // the configuration it needs, failing for good.
            let foundation = m.holds_seat(mesh_core::manifest::BROKER_ROLE)
                || m.holds_seat(mesh_core::catalogue::STORE_ROLE);
            if foundation {
                continue;
            }
            if m.run
                .as_ref()
                .is_some_and(|r| r.driver.value == mesh_core::manifest::Driver::Container)
            {
                match container_ready(&store, m).await? {
                    Container::Ready => {
                        store.assign_version(&node, &m.name.value, None).await?;
                        assigned.push(m.name.value.clone());
                    }
                    Container::Build(program) => programs.push(program),
                    Container::Left(why) => left.push((m.name.value.clone(), why)),
                }
                continue;
            }
            // A module the mesh builds from its repository runs what its
            // build made, never a program of the same name found here.
            if let (Some(repository), Some(_)) = (&m.repository, &m.build)
                && m.run.as_ref().is_some_and(names_artifacts)
            {
                let module = &m.name.value;
                if store.newest_version(module).await?.is_some() {
                    store.assign_version(&node, module, None).await?;
                    assigned.push(module.clone());
                } else {
                    left.push((
                        module.clone(),
                        format!(
                            "it is built from its repository ({}): `mesh build {module}`, then `mesh assign {module} {LOCAL_NODE}`",
                            repository.value
                        ),
                    ));
                }
                continue;
            }
            if let Some(program) = local_program(m) {
                programs.push(program);
                continue;
            }
            let runnable = m.run.as_ref().is_some_and(|r| {
                !names_artifacts(r) && r.command.first().is_some_and(|a| on_path(&a.text))
            });
            if runnable {
                store.assign(&node, &m.name.value).await?;
                assigned.push(m.name.value.clone());
            }
        }
        // One row for what `mesh up` recorded: the catalogue and what it
        // assigned here (programs it puts are assigned as they are put).
        crate::audit::record_local(
            &store,
            "up",
            serde_json::json!({
                "catalogue": catalogue.display().to_string(),
                "registered": registered.registration.modules.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
                "assigned": assigned.iter().map(Name::as_str).collect::<Vec<_>>(),
            }),
        )
        .await?;
        anyhow::Ok(())
    }
    .await;
    store.close().await;
    result?;
    for (module, why) in &left {
        output::note(format_args!("up: {module} left unassigned: {why}"));
    }
    Ok((assigned, programs))
}

/// The id of the local node's newest report, if it has one.
async fn latest_report_id(url: &str) -> anyhow::Result<Option<i64>> {
    let node = Name::new(LOCAL_NODE).expect("a valid name");
    let store = authority::open_existing_store(url).await?;
    let latest = store.latest_report(&node).await;
    store.close().await;
    Ok(latest?.map(|r| r.id))
}

fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}
