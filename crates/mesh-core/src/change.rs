//! What a pending change of the records would do, before it is made (`mesh
//! plan`, `mesh assign --dry-run`): the declarations that would change, per
//! node and module, and the authority diff — principals, grants with their
//! causes, `allow_responses`, and the JetStream objects.
//!
//! Both sides are derived with the functions the controller itself runs
//! ([`declaration::compose_modules`], [`declaration::next_declaration`],
//! [`authority::derive`], [`jetstream::derive`]), so a plan cannot promise
//! what the controller would not then do.

use std::collections::{BTreeMap, BTreeSet};

mod pending;
pub use pending::Pending;

use serde::Serialize;

use crate::authority::{self, AuthorityError, Cause, Grant, Principal};
use crate::declaration::{self, FileBody, Inputs, ModuleDecl, NodeModules};
use crate::jetstream::{self, ConsumerSpec, ObjectsError, StreamSpec};
use crate::names::Name;
use crate::records::ControllerSpec;

/// One side of a change: what composing and deriving read.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub inputs: Inputs<'a>,
    pub controller: &'a ControllerSpec,
}

/// Which way a grant points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Publish,
    Subscribe,
}

/// What changed in a module's declaration. Environment values are not shown:
/// an env value may carry a password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "field", rename_all = "kebab-case")]
pub enum Field {
    Version {
        before: String,
        after: String,
    },
    Command {
        before: Vec<String>,
        after: Vec<String>,
    },
    StopGrace {
        before: u64,
        after: u64,
    },
    EnvAdded {
        key: String,
    },
    EnvRemoved {
        key: String,
    },
    EnvChanged {
        key: String,
    },
    FileAdded {
        name: Name,
        path: String,
    },
    FileRemoved {
        name: Name,
        path: String,
    },
    /// Its path or its body.
    FileChanged {
        name: Name,
        path: String,
    },
    /// The artifact it runs moved (a version pinned again): the reference
    /// before and after, `None` where it names none.
    Artifact {
        name: Name,
        before: Option<String>,
        after: Option<String>,
    },
}

/// An object on the bus, as its derivation has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "object", rename_all = "kebab-case")]
pub enum Object {
    Stream(StreamSpec),
    Consumer(ConsumerSpec),
}

/// One thing the change would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum Entry {
    /// The node's declaration gains a module.
    Start {
        node: Name,
        module: Name,
        version: String,
    },
    /// The node's declaration loses a module.
    Stop {
        node: Name,
        module: Name,
    },
    /// A module stays, with one field changed (one entry per field).
    Update {
        node: Name,
        module: Name,
        #[serde(flatten)]
        field: Field,
    },
    PrincipalAdded {
        principal: String,
        source: String,
    },
    PrincipalRemoved {
        principal: String,
        source: String,
    },
    /// A subject granted that was not, with every cause it is granted for.
    GrantAdded {
        principal: String,
        direction: Direction,
        subject: String,
        causes: Vec<Cause>,
    },
    /// A subject no longer granted, with the causes it was granted for.
    GrantRemoved {
        principal: String,
        direction: Direction,
        subject: String,
        causes: Vec<Cause>,
    },
    AllowResponses {
        principal: String,
        before: Option<Cause>,
        after: Option<Cause>,
    },
    /// An assigned module left out of its node's declaration after the
    /// change (a placeholder that cannot be filled, a manifest that no
    /// longer derives): the node's other modules are still declared.
    LeftOut {
        node: Name,
        module: Name,
        reason: String,
    },
    ObjectAdded(Object),
    ObjectRemoved(Object),
    ObjectChanged {
        before: Object,
        after: Object,
    },
}

impl Entry {
    /// The node of a declaration entry.
    pub fn node(&self) -> Option<&Name> {
        match self {
            Entry::Start { node, .. }
            | Entry::Stop { node, .. }
            | Entry::Update { node, .. }
            | Entry::LeftOut { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The principal of an authority entry.
    pub fn principal(&self) -> Option<&str> {
        match self {
            Entry::PrincipalAdded { principal, .. }
            | Entry::PrincipalRemoved { principal, .. }
            | Entry::GrantAdded { principal, .. }
            | Entry::GrantRemoved { principal, .. }
            | Entry::AllowResponses { principal, .. } => Some(principal),
            _ => None,
        }
    }
}

/// Which side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum When {
    Before,
    After,
}

impl std::fmt::Display for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            When::Before => "the records as they are",
            When::After => "the records after the change",
        })
    }
}

/// A side that does not derive authority or bus objects: the controller
/// composes no users file and asserts no objects from such records, so
/// there is nothing to compare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{when} do not derive to principals: {error}")]
    Authority { when: When, error: AuthorityError },
    #[error("{when} do not derive to bus objects: {error}")]
    Objects { when: When, error: ObjectsError },
}

/// Everything `before` → `after` would change: declarations (nodes sorted,
/// modules sorted), then principals (in derivation order), then objects.
pub fn plan(before: &Side<'_>, after: &Side<'_>) -> Result<Vec<Entry>, ChangeError> {
    let mut out = declarations(before, after);
    // As the controller derives: without the modules it leaves out.
    let (b_records, a_records) = (
        before.inputs.records.deriving(before.inputs.left_out),
        after.inputs.records.deriving(after.inputs.left_out),
    );
    let records = |when| match when {
        When::Before => &b_records,
        When::After => &a_records,
    };
    let derive = |s: &Side<'_>, when| {
        authority::derive(s.inputs.catalogue, records(when), s.controller)
            .map_err(|error| ChangeError::Authority { when, error })
    };
    authority_diff(
        &derive(before, When::Before)?,
        &derive(after, When::After)?,
        &mut out,
    );
    let objects = |s: &Side<'_>, when| {
        jetstream::derive(s.inputs.catalogue, records(when), s.controller)
            .map_err(|error| ChangeError::Objects { when, error })
    };
    let (b, a) = (objects(before, When::Before)?, objects(after, When::After)?);
    objects_diff(
        b.streams.into_iter().map(Object::Stream),
        a.streams.into_iter().map(Object::Stream),
        &mut out,
    );
    objects_diff(
        b.consumers.into_iter().map(Object::Consumer),
        a.consumers.into_iter().map(Object::Consumer),
        &mut out,
    );
    Ok(out)
}

/// The modules each node of `side` is declared, and those left out.
pub fn composed(side: &Side<'_>) -> BTreeMap<Name, NodeModules> {
    let by_node = side.inputs.records.modules_by_node();
    side.inputs
        .records
        .nodes
        .iter()
        .map(|node| {
            let modules = by_node.get(node).map(Vec::as_slice).unwrap_or_default();
            (
                node.clone(),
                declaration::compose_assigned(&side.inputs, node, modules),
            )
        })
        .collect()
}

fn declarations(before: &Side<'_>, after: &Side<'_>) -> Vec<Entry> {
    let (b, a) = (composed(before), composed(after));
    let nodes: BTreeSet<&Name> = b.keys().chain(a.keys()).collect();
    let mut out = Vec::new();
    let none = NodeModules::default();
    for node in nodes {
        // A node gone from the records (forgotten) runs nothing after.
        let (was, now) = (b.get(node).unwrap_or(&none), a.get(node).unwrap_or(&none));
        // The controller's own test of whether a node gets a new declaration.
        let was_declared = declaration::Declaration {
            node: node.clone(),
            sequence: 0,
            composed_at: 0,
            modules: was.modules.clone(),
            bus: None,
            sealed_by: None,
        };
        if let Some(next) =
            declaration::next_declaration(node, now.modules.clone(), None, Some(&was_declared), 0)
        {
            modules_diff(node, &was.modules, &next.modules, &mut out);
        }
        for e in &now.left_out {
            out.push(Entry::LeftOut {
                node: node.clone(),
                module: e.module().clone(),
                reason: e.to_string(),
            });
        }
    }
    out
}

fn modules_diff(node: &Name, was: &[ModuleDecl], now: &[ModuleDecl], out: &mut Vec<Entry>) {
    let by_name = |ms: &[ModuleDecl]| -> BTreeMap<Name, ModuleDecl> {
        ms.iter().map(|m| (m.name.clone(), m.clone())).collect()
    };
    let (was, now) = (by_name(was), by_name(now));
    let names: BTreeSet<&Name> = was.keys().chain(now.keys()).collect();
    for name in names {
        match (was.get(name), now.get(name)) {
            (None, Some(m)) => out.push(Entry::Start {
                node: node.clone(),
                module: name.clone(),
                version: m.version.clone(),
            }),
            (Some(_), None) => out.push(Entry::Stop {
                node: node.clone(),
                module: name.clone(),
            }),
            (Some(w), Some(n)) => {
                for field in fields(w, n) {
                    out.push(Entry::Update {
                        node: node.clone(),
                        module: name.clone(),
                        field,
                    });
                }
            }
            (None, None) => {}
        }
    }
}

/// Each field of a module's declaration that differs.
pub fn fields(was: &ModuleDecl, now: &ModuleDecl) -> Vec<Field> {
    let mut out = Vec::new();
    if was.version != now.version {
        out.push(Field::Version {
            before: was.version.clone(),
            after: now.version.clone(),
        });
    }
    if was.run.command != now.run.command {
        out.push(Field::Command {
            before: was.run.command.clone(),
            after: now.run.command.clone(),
        });
    }
    if was.run.stop_grace_s != now.run.stop_grace_s {
        out.push(Field::StopGrace {
            before: was.run.stop_grace_s,
            after: now.run.stop_grace_s,
        });
    }
    let keys: BTreeSet<&String> = was.run.env.keys().chain(now.run.env.keys()).collect();
    for key in keys {
        let key_owned = key.clone();
        match (was.run.env.get(key), now.run.env.get(key)) {
            (None, Some(_)) => out.push(Field::EnvAdded { key: key_owned }),
            (Some(_), None) => out.push(Field::EnvRemoved { key: key_owned }),
            (Some(w), Some(n)) if w != n => out.push(Field::EnvChanged { key: key_owned }),
            _ => {}
        }
    }
    let files = |m: &ModuleDecl| -> BTreeMap<Name, (String, FileBody)> {
        m.files
            .iter()
            .map(|f| (f.name.clone(), (f.path.clone(), f.body.clone())))
            .collect()
    };
    let (wf, nf) = (files(was), files(now));
    let names: BTreeSet<&Name> = wf.keys().chain(nf.keys()).collect();
    for name in names {
        match (wf.get(name), nf.get(name)) {
            (None, Some((path, _))) => out.push(Field::FileAdded {
                name: name.clone(),
                path: path.clone(),
            }),
            (Some((path, _)), None) => out.push(Field::FileRemoved {
                name: name.clone(),
                path: path.clone(),
            }),
            (Some(w), Some(n)) if w != n => out.push(Field::FileChanged {
                name: name.clone(),
                path: n.0.clone(),
            }),
            _ => {}
        }
    }
    let artifacts = |m: &ModuleDecl| -> BTreeMap<Name, String> {
        m.artifacts
            .iter()
            .map(|a| (a.name.clone(), a.reference.clone()))
            .collect()
    };
    let (wa, na) = (artifacts(was), artifacts(now));
    let names: BTreeSet<&Name> = wa.keys().chain(na.keys()).collect();
    for name in names {
        let (before, after) = (wa.get(name), na.get(name));
        if before != after {
            out.push(Field::Artifact {
                name: name.clone(),
                before: before.cloned(),
                after: after.cloned(),
            });
        }
    }
    out
}

/// Subject → its causes, for one direction.
fn by_subject(grants: &[Grant]) -> BTreeMap<&str, Vec<Cause>> {
    let mut out: BTreeMap<&str, Vec<Cause>> = BTreeMap::new();
    for g in grants {
        out.entry(g.subject.as_str())
            .or_default()
            .push(g.cause.clone());
    }
    out
}

fn authority_diff(before: &[Principal], after: &[Principal], out: &mut Vec<Entry>) {
    let empty = authority::Permissions::default();
    let was: BTreeMap<&str, &Principal> = before.iter().map(|p| (p.name.as_str(), p)).collect();
    let now: BTreeMap<&str, &Principal> = after.iter().map(|p| (p.name.as_str(), p)).collect();
    // Derivation order (controller, hosts, modules, ...), then the removed.
    let names = after
        .iter()
        .map(|p| p.name.as_str())
        .chain(before.iter().map(|p| p.name.as_str()))
        .filter({
            let mut seen = BTreeSet::new();
            move |n| seen.insert(*n)
        });
    for name in names {
        let (w, n) = (was.get(name), now.get(name));
        match (w, n) {
            (None, Some(p)) => out.push(Entry::PrincipalAdded {
                principal: name.into(),
                source: p.source.clone(),
            }),
            (Some(p), None) => out.push(Entry::PrincipalRemoved {
                principal: name.into(),
                source: p.source.clone(),
            }),
            _ => {}
        }
        let wp = w.map_or(&empty, |p| &p.permissions);
        let np = n.map_or(&empty, |p| &p.permissions);
        for (direction, wg, ng) in [
            (Direction::Publish, &wp.publish, &np.publish),
            (Direction::Subscribe, &wp.subscribe, &np.subscribe),
        ] {
            let (wg, ng) = (by_subject(wg), by_subject(ng));
            for (from, to, added) in [(&ng, &wg, true), (&wg, &ng, false)] {
                for (subject, causes) in from {
                    if to.contains_key(subject) {
                        continue;
                    }
                    let (principal, subject, causes) =
                        (name.to_string(), subject.to_string(), causes.clone());
                    out.push(if added {
                        Entry::GrantAdded {
                            principal,
                            direction,
                            subject,
                            causes,
                        }
                    } else {
                        Entry::GrantRemoved {
                            principal,
                            direction,
                            subject,
                            causes,
                        }
                    });
                }
            }
        }
        if wp.allow_responses.is_some() != np.allow_responses.is_some() {
            out.push(Entry::AllowResponses {
                principal: name.into(),
                before: wp.allow_responses.clone(),
                after: np.allow_responses.clone(),
            });
        }
    }
}

fn object_name(o: &Object) -> (&'static str, &str) {
    match o {
        Object::Stream(s) => ("stream", &s.name),
        Object::Consumer(c) => ("consumer", &c.name),
    }
}

fn objects_diff(
    before: impl Iterator<Item = Object>,
    after: impl Iterator<Item = Object>,
    out: &mut Vec<Entry>,
) {
    let keyed = |it: &mut dyn Iterator<Item = Object>| -> BTreeMap<(String, String), Object> {
        it.map(|o| {
            let (kind, name) = object_name(&o);
            ((kind.to_string(), name.to_string()), o)
        })
        .collect()
    };
    let (mut b, mut a) = (before, after);
    let (was, now) = (keyed(&mut b), keyed(&mut a));
    for (key, o) in &now {
        match was.get(key) {
            None => out.push(Entry::ObjectAdded(o.clone())),
            Some(w) if w != o => out.push(Entry::ObjectChanged {
                before: w.clone(),
                after: o.clone(),
            }),
            Some(_) => {}
        }
    }
    for (key, o) in &was {
        if !now.contains_key(key) {
            out.push(Entry::ObjectRemoved(o.clone()));
        }
    }
}

#[cfg(test)]
#[path = "change/tests.rs"]
mod tests;
