//! A fleet file (`mesh fleet load FILE`): nodes and the modules on them,
//! persons and their tools, nodes to enrol. [`read`] parses it with the
//! manifest reader's spanned TOML and checks it against the catalogue,
//! returning every problem at once, each located, with the fix.
//!
//! ```toml
//! [[node]]
//! name = "n1"
//! modules = ["git-server", "audit-log"]
//!
//! [[person]]
//! name = "alice"
//! tools = ["*"]                 # or ["seat:git.clone", "audit-log.search"]
//!
//! [[token]]
//! node = "n4"                   # a node to be enrolled; its token is issued here
//! ```

use std::collections::HashMap;

use toml::de::DeTable;

use crate::catalogue::{Catalogue, check_tool_use};
use crate::diagnostic::{self, Diagnostic, Kind, Location, Pos, suggest};
use crate::manifest::toml_access::{Reader, Val, get};
use crate::manifest::{Located, ToolRef, refs};
use crate::names::Name;
use crate::records::ToolAccess;

/// A fleet file, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub nodes: Vec<FleetNode>,
    pub persons: Vec<FleetPerson>,
    pub tokens: Vec<Located<Name>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetNode {
    pub name: Located<Name>,
    pub modules: Vec<Located<Name>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetPerson {
    pub name: Located<Name>,
    pub tools: ToolAccess,
    /// Each tool as written, for the catalogue check.
    uses: Vec<Located<ToolRef>>,
}

const SECTIONS: &[&str] = &["node", "person", "token"];

/// Reads the fleet file `src` (named `path` in diagnostics) and checks it
/// against `cat`. Any error refuses the whole file; the diagnostics are
/// sorted by line.
pub fn read(path: &str, src: &str, cat: &Catalogue) -> Result<Fleet, Vec<Diagnostic>> {
    let mut p = Parser {
        toml: Reader::new(path, src),
    };
    let fleet = p.fleet();
    let mut diags = p.toml.into_diagnostics();
    if let Some(f) = &fleet {
        check(path, f, cat, &mut diags);
    }
    diagnostic::sort(&mut diags);
    match fleet {
        Some(f) if !diags.iter().any(Diagnostic::is_error) => Ok(f),
        _ => Err(diags),
    }
}

struct Parser<'a> {
    toml: Reader<'a>,
}

impl Parser<'_> {
    fn fleet(&mut self) -> Option<Fleet> {
        let root = self.toml.root()?;
        let root = root.get_ref();
        self.toml.check_keys(
            root,
            SECTIONS,
            |k| format!("unknown section `{k}` in a fleet file"),
            |_| Some("a fleet file has the sections [[node]], [[person]] and [[token]]".into()),
        );
        let mut fleet = Fleet {
            nodes: Vec::new(),
            persons: Vec::new(),
            tokens: Vec::new(),
        };
        for (t, header) in self.toml.tables(root, "node") {
            self.fields(t, "[[node]]", &["name", "modules"]);
            let name = self
                .toml
                .required_name(t, &header, "[[node]]", "name", "node");
            let modules = match get(t, "modules") {
                Some((_, v)) => self.toml.names(v, "modules", "module"),
                None => Vec::new(),
            };
            if let Some(name) = name {
                fleet.nodes.push(FleetNode { name, modules });
            }
        }
        for (t, header) in self.toml.tables(root, "person") {
            self.fields(t, "[[person]]", &["name", "tools"]);
            let name = self
                .toml
                .required_name(t, &header, "[[person]]", "name", "person");
            let help = Some("write `tools = [\"*\"]` for every tool, or list them".into());
            let tools = self
                .toml
                .required(t, &header, "[[person]]", "tools", help)
                .and_then(|v| self.tools(v));
            if let (Some(name), Some((tools, uses))) = (name, tools) {
                fleet.persons.push(FleetPerson { name, tools, uses });
            }
        }
        for (t, header) in self.toml.tables(root, "token") {
            self.fields(t, "[[token]]", &["node"]);
            if let Some(node) = self
                .toml
                .required_name(t, &header, "[[token]]", "node", "node")
            {
                fleet.tokens.push(node);
            }
        }
        self.no_twice(fleet.nodes.iter().map(|n| &n.name), "[[node]]", "node");
        self.no_twice(
            fleet.persons.iter().map(|p| &p.name),
            "[[person]]",
            "person",
        );
        self.no_twice(fleet.tokens.iter(), "[[token]]", "token for node");
        Some(fleet)
    }

    fn fields(&mut self, t: &DeTable<'_>, section: &str, known: &[&str]) {
        let listed = known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        self.toml.check_keys(
            t,
            known,
            |k| format!("unknown field `{k}` in {section}"),
            |_| Some(format!("{section} has the fields {listed}")),
        );
    }

    /// `tools`: `["*"]` alone, or tool references as a manifest's `[tools]
    /// uses` writes them.
    fn tools(&mut self, v: &Val<'_>) -> Option<(ToolAccess, Vec<Located<ToolRef>>)> {
        let written = self.toml.strings(v, "tools");
        if let [(only, _)] = written.as_slice()
            && only == "*"
        {
            return Some((ToolAccess::All, Vec::new()));
        }
        let mut uses = Vec::new();
        for (s, span) in &written {
            if s == "*" {
                // A typo beside it must not widen the grant silently.
                self.toml.push(
                    Kind::BadValue,
                    span.clone(),
                    "`*` stands alone: it grants every tool".into(),
                    Some("write `tools = [\"*\"]` for every tool, or list the tools only".into()),
                );
                continue;
            }
            match refs::parse_tool_ref(s) {
                Ok(r) => uses.push(Located::new(r, self.toml.pos(span))),
                Err(e) => {
                    let at = self.toml.inner(span, s, e.range.clone());
                    self.toml.push(e.kind, at, e.message, e.help);
                }
            }
        }
        // Kept even when an entry was refused (the file is refused anyway),
        // so the catalogue check reports the other entries too.
        let grant = ToolAccess::Only(uses.iter().map(|u| u.value.clone()).collect());
        Some((grant, uses))
    }

    /// A second entry of one name would silently replace the first (the
    /// last `[[person]]` winning): refused, naming both lines.
    fn no_twice<'n>(
        &mut self,
        names: impl Iterator<Item = &'n Located<Name>>,
        section: &str,
        what: &str,
    ) {
        let mut first: HashMap<&Name, Pos> = HashMap::new();
        for n in names {
            match first.get(&n.value) {
                None => {
                    first.insert(&n.value, n.pos);
                }
                Some(at) => self.toml.push_at(
                    Kind::DuplicateEntry,
                    n.pos,
                    format!(
                        "{what} `{}` is listed twice, on lines {} and {}",
                        n.value, at.line, n.pos.line
                    ),
                    Some(format!(
                        "keep one {section} for `{}`: merge this one into line {}",
                        n.value, at.line
                    )),
                ),
            }
        }
    }
}

/// Every module a node runs must be in the catalogue, and every tool a person
/// calls must be served by something in it.
fn check(path: &str, fleet: &Fleet, cat: &Catalogue, out: &mut Vec<Diagnostic>) {
    let modules: Vec<&str> = cat
        .manifests()
        .iter()
        .map(|m| m.name.value.as_str())
        .collect();
    for node in &fleet.nodes {
        for m in &node.modules {
            if cat.module(&m.value).is_some() {
                continue;
            }
            let mut d = Diagnostic::new(
                Kind::BadValue,
                Location::new(path, m.pos),
                format!(
                    "node `{}` runs `{}`, which is not in the catalogue",
                    node.name.value, m.value
                ),
            );
            d = d.with_help(match suggest(m.value.as_str(), modules.iter().copied()) {
                Some(close) => format!("did you mean `{close}`?"),
                None => format!(
                    "add its manifest to the catalogue, or write one of: {}",
                    modules.join(", ")
                ),
            });
            out.push(d);
        }
    }
    for p in &fleet.persons {
        for u in &p.uses {
            let used = cat.tool_use(&u.value, Location::new(path, u.pos));
            for mut d in check_tool_use(cat, &used) {
                if d.kind == Kind::UnregisteredProvider {
                    // A manifest may be installed before its provider; a
                    // person's grant is recorded with the whole catalogue in
                    // view, so a provider missing from it serves nothing.
                    d = unserved(path, u, &modules);
                }
                out.push(d);
            }
        }
    }
}

fn unserved(path: &str, u: &Located<ToolRef>, modules: &[&str]) -> Diagnostic {
    let provider = u.value.provider.name();
    let d = Diagnostic::new(
        Kind::UnservedTool,
        Location::new(path, u.pos),
        format!(
            "`{}`: nothing in the catalogue is `{}`, so nothing serves it",
            u.value, u.value.provider
        ),
    );
    match suggest(provider.as_str(), modules.iter().copied()) {
        Some(close) => d.with_help(format!("did you mean `{close}.{}`?", u.value.tool)),
        None => d.with_help("name a tool a module of the catalogue serves"),
    }
}

#[cfg(test)]
mod tests;
