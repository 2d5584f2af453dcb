//! The host's plan for a verified declaration against what runs: stop what
//! is no longer declared, write each module's files, start what is new,
//! restart what changed, and leave alone what already runs as declared.

use serde::Serialize;

use super::{Declaration, FileBody, ModuleDecl};
use crate::names::Name;

/// A module the host's driver runs, with the declaration of it it was
/// started from and the broker addresses it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub module: Name,
    pub decl: ModuleDecl,
    pub bus: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum ApplyStep {
    Stop {
        module: Name,
    },
    WriteFile {
        module: Name,
        path: String,
        body: FileBody,
    },
    Start {
        module: ModuleDecl,
    },
    /// Stop, then start as newly declared (command, env, files or version
    /// changed, or the broker addresses it is given).
    Restart {
        module: ModuleDecl,
    },
}

/// Stops first (a port a removed module held is free for a new one), then
/// per declared module in order: its files, then start or restart. `bus` is
/// the broker addresses a module started now is given: one started with
/// others is restarted, or it could not follow a broker that moved.
pub fn plan_apply(decl: &Declaration, running: &[Running], bus: &[String]) -> Vec<ApplyStep> {
    let mut steps = Vec::new();
    let mut stopping: Vec<&Name> = running
        .iter()
        .map(|r| &r.module)
        .filter(|m| !decl.modules.iter().any(|d| d.name == **m))
        .collect();
    stopping.sort();
    for m in stopping {
        steps.push(ApplyStep::Stop { module: m.clone() });
    }
    for d in &decl.modules {
        let now = running.iter().find(|r| r.module == d.name);
        if now.is_some_and(|r| r.decl.same_as(d) && r.bus == bus) {
            continue;
        }
        for f in &d.files {
            steps.push(ApplyStep::WriteFile {
                module: d.name.clone(),
                path: f.path.clone(),
                body: f.body.clone(),
            });
        }
        steps.push(match now {
            None => ApplyStep::Start { module: d.clone() },
            Some(_) => ApplyStep::Restart { module: d.clone() },
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::declaration::{FileDecl, RunDecl};

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn m(name: &str, version: &str) -> ModuleDecl {
        ModuleDecl {
            name: n(name),
            version: version.into(),
            run: RunDecl {
                driver: crate::manifest::Driver::Process,
                image: None,
                command: vec![name.into()],
                env: BTreeMap::new(),
                stop_grace_s: 10,
                sealed_env: BTreeMap::new(),
            },
            files: vec![FileDecl {
                name: n("conf"),
                path: "conf".into(),
                body: FileBody::Content("c".into()),
            }],
            secrets: None,
            key: None,
            artifacts: Vec::new(),
            pinned: None,
            health: None,
        }
    }

    fn decl(modules: Vec<ModuleDecl>) -> Declaration {
        Declaration {
            node: n("n1"),
            sequence: 2,
            composed_at: 0,
            modules,
            bus: None,
            sealed_by: None,
        }
    }

    const BUS: &[String] = &[];

    fn running(ms: &[ModuleDecl]) -> Vec<Running> {
        ms.iter()
            .map(|d| Running {
                module: d.name.clone(),
                decl: d.clone(),
                bus: BUS.to_vec(),
            })
            .collect()
    }

    #[test]
    fn nothing_changes_what_already_runs_as_declared() {
        let d = decl(vec![m("a", "1"), m("b", "1")]);
        assert!(plan_apply(&d, &running(&d.modules), BUS).is_empty());
    }

    #[test]
    fn removed_stop_first_new_start_changed_restart_each_after_its_files() {
        let d = decl(vec![m("a", "2"), m("c", "1")]);
        let steps = plan_apply(&d, &running(&[m("a", "1"), m("b", "1")]), BUS);
        let kinds: Vec<String> = steps
            .iter()
            .map(|s| match s {
                ApplyStep::Stop { module } => format!("stop {module}"),
                ApplyStep::WriteFile { module, path, .. } => format!("write {module}/{path}"),
                ApplyStep::Start { module } => format!("start {}", module.name),
                ApplyStep::Restart { module } => format!("restart {}", module.name),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "stop b",
                "write a/conf",
                "restart a",
                "write c/conf",
                "start c"
            ]
        );
    }

    #[test]
    fn an_empty_declaration_stops_everything() {
        let steps = plan_apply(&decl(vec![]), &running(&[m("b", "1"), m("a", "1")]), BUS);
        assert_eq!(
            steps,
            [
                ApplyStep::Stop { module: n("a") },
                ApplyStep::Stop { module: n("b") }
            ]
        );
    }

    #[test]
    fn a_module_given_other_broker_addresses_is_restarted() {
        let d = decl(vec![m("a", "1"), m("b", "1")]);
        let moved = vec!["tls://127.0.0.1:4333".to_string()];
        let steps = plan_apply(&d, &running(&d.modules), &moved);
        let restarted: Vec<&str> = steps
            .iter()
            .filter_map(|s| match s {
                ApplyStep::Restart { module } => Some(module.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(restarted, ["a", "b"]);
    }
}
