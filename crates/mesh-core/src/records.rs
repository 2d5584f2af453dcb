//! The records of a mesh as mesh-core reads them: a snapshot the I/O crates
//! fill from the store and hand to the derivations (authority, JetStream
//! objects, and later declarations). Kept apart from every derivation so none
//! of them imports another to reach the inputs they share.

use std::fmt;

use serde::Serialize;

use crate::catalogue::BUILD_MACHINE_ROLE;
use crate::manifest::{EventRef, Target, ToolRef};
use crate::names::Name;
use crate::subjects::EventSelector;

/// Module `module` runs on node `node`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Assignment {
    pub node: Name,
    pub module: Name,
}

impl Assignment {
    pub fn new(node: Name, module: Name) -> Self {
        Assignment { node, module }
    }
}

impl fmt::Display for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.module, self.node)
    }
}

/// Whether a person may call every tool or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolAccess {
    All,
    Only(Vec<ToolRef>),
}

/// A person's tool list that does not read as a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolListError {
    #[error("\"*\" stands alone: write tools = [\"*\"] for every tool, or list the tools")]
    StarInList,
    #[error("tool {written:?}: {message}")]
    BadTool { written: String, message: String },
}

impl ToolAccess {
    /// A person's tools as written: `["*"]` for every tool, or tool
    /// references. `*` inside a list is refused rather than read as every
    /// tool: a typo beside it must not widen the grant silently.
    pub fn from_written(tools: &[String]) -> Result<ToolAccess, ToolListError> {
        if let [only] = tools
            && only == "*"
        {
            return Ok(ToolAccess::All);
        }
        if tools.iter().any(|t| t == "*") {
            return Err(ToolListError::StarInList);
        }
        tools
            .iter()
            .map(|t| {
                crate::manifest::refs::parse_tool_ref(t).map_err(|e| ToolListError::BadTool {
                    written: t.clone(),
                    message: e.message,
                })
            })
            .collect::<Result<_, _>>()
            .map(ToolAccess::Only)
    }

    /// The tools as a fleet file or the store writes them: `["*"]`, or each
    /// reference in manifest syntax. [`ToolAccess::from_written`] reads it back.
    pub fn written(&self) -> Vec<String> {
        match self {
            ToolAccess::All => vec!["*".to_string()],
            ToolAccess::Only(tools) => tools.iter().map(ToolRef::to_string).collect(),
        }
    }
}

impl fmt::Display for ToolAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written().join(","))
    }
}

/// A person record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonRecord {
    pub name: Name,
    pub tools: ToolAccess,
    /// The operations the person may ask the controller for; none: the
    /// tools alone.
    pub role: Option<crate::operation::Role>,
}

/// The records authority and the JetStream objects are derived from, besides
/// the catalogue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    pub nodes: Vec<Name>,
    pub assignments: Vec<Assignment>,
    /// Nodes holding a live (issued, unspent, unexpired) enrolment token.
    pub live_tokens: Vec<Name>,
    /// Persons holding a live (issued, unspent, unexpired) login.
    pub live_logins: Vec<Name>,
    pub persons: Vec<PersonRecord>,
    /// (node, module) → the version its assignment pinned (`mesh assign
    /// --version`, else the newest recorded when it was assigned).
    pub pins: std::collections::BTreeMap<(Name, Name), String>,
    /// The artifacts recorded under each version of each module.
    pub artifacts: crate::artifact::Versions,
}

impl Records {
    /// Each node's assigned modules, sorted, read in one pass over the
    /// assignments: a scan of them per node was 10,000 × 50,000 name
    /// comparisons at 10,000 nodes, most of a composition's time.
    pub fn modules_by_node(&self) -> std::collections::BTreeMap<&Name, Vec<&Name>> {
        let mut out: std::collections::BTreeMap<&Name, Vec<&Name>> =
            std::collections::BTreeMap::new();
        for a in &self.assignments {
            out.entry(&a.node).or_default().push(&a.module);
        }
        for modules in out.values_mut() {
            modules.sort();
            modules.dedup();
        }
        out
    }

    /// The modules assigned to `node`, sorted (one node's; a pass over every
    /// node reads [`Records::modules_by_node`] once).
    pub fn modules_of(&self, node: &Name) -> Vec<&Name> {
        let mut modules: Vec<&Name> = self
            .assignments
            .iter()
            .filter(|a| a.node == *node)
            .map(|a| &a.module)
            .collect();
        modules.sort();
        modules.dedup();
        modules
    }

    /// These records without the assignments of the modules left out
    /// (module → why): what authority and the bus objects are derived from,
    /// so one module that does not derive cannot stop the rest.
    pub fn deriving(&self, left_out: &std::collections::BTreeMap<Name, String>) -> Records {
        let mut r = self.clone();
        r.assignments.retain(|a| !left_out.contains_key(&a.module));
        r
    }
}

/// The controller's own side of the bus. It files no manifest, so what it
/// follows and where it submits work is stated here rather than derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSpec {
    /// Events the controller records (through its EVENTS consumer).
    pub follows: Vec<EventRef>,
    /// (seat, work kind) the controller submits work to.
    pub submits: Vec<(Name, Name)>,
    /// Copies of every stream a clustered bus keeps (the genesis's
    /// `--replicas`): one server lost loses nothing.
    pub replicas: usize,
}

impl Default for ControllerSpec {
    /// The controller records build outcomes and submits builds.
    fn default() -> Self {
        let role = Name::new(BUILD_MACHINE_ROLE).expect("a valid name");
        ControllerSpec {
            follows: vec![EventRef {
                emitter: Target::Seat(role.clone()),
                event: EventSelector::Named(Name::new("built").expect("a valid name")),
            }],
            submits: vec![(role, Name::new("build").expect("a valid name"))],
            replicas: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_nodes_modules_are_read_once_sorted_and_once_each() {
        let n = |s: &str| Name::new(s).unwrap();
        let records = Records {
            nodes: vec![n("n2"), n("n1"), n("n3")],
            assignments: [
                ("n2", "b"),
                ("n1", "c"),
                ("n2", "a"),
                ("n1", "a"),
                ("n2", "b"),
            ]
            .iter()
            .map(|(node, m)| Assignment::new(n(node), n(m)))
            .collect(),
            ..Records::default()
        };
        let by_node = records.modules_by_node();
        let names = |v: &[&Name]| v.iter().map(|m| m.as_str().to_string()).collect::<Vec<_>>();
        assert_eq!(names(&by_node[&n("n1")]), ["a", "c"]);
        assert_eq!(
            names(&by_node[&n("n2")]),
            ["a", "b"],
            "sorted, a repeat once"
        );
        assert!(
            !by_node.contains_key(&n("n3")),
            "a node with nothing assigned"
        );
        for node in &records.nodes {
            assert_eq!(
                by_node.get(node).cloned().unwrap_or_default(),
                records.modules_of(node),
                "{node}"
            );
        }
    }

    #[test]
    fn tool_access_reads_back_what_it_writes() {
        for l in [
            &["*"][..],
            &["seat:git.clone", "audit-log.search"][..],
            &[][..],
        ] {
            let access = ToolAccess::from_written(&written(l)).unwrap();
            assert_eq!(access.written(), written(l));
            assert_eq!(ToolAccess::from_written(&access.written()), Ok(access));
        }
        assert_eq!(ToolAccess::All.to_string(), "*");
    }

    #[test]
    fn an_assignment_reads_module_on_node() {
        let a = Assignment::new(Name::new("n1").unwrap(), Name::new("git").unwrap());
        assert_eq!(a.to_string(), "git on n1");
    }
}
