//! A plan as text: declarations by node, authority by principal, then the
//! bus objects.

use std::fmt::Write as _;

use mesh_core::authority::Cause;
use mesh_core::change::{Direction, Entry, Field, Object};
use mesh_core::declaration::seat_address::Unaddressed;
use mesh_core::names::Name;

use super::Plan;

/// Each module left without an address, its line starting with `lead`,
/// and what mends it (each remedy once), starting with `help`.
pub fn unaddressed_text(unaddressed: &[Unaddressed], lead: &str, help: &str) -> String {
    let mut out = String::new();
    let mut remedies = Vec::new();
    for u in unaddressed {
        let _ = writeln!(
            out,
            "{lead}{u}: the controller leaves it out of {}'s declaration until a holder is assigned",
            u.node
        );
        let remedy = u.remedy();
        if !remedies.contains(&remedy) {
            let _ = writeln!(out, "{help}{remedy}");
            remedies.push(remedy);
        }
    }
    out
}

fn causes(out: &mut String, causes: &[Cause]) {
    for c in causes {
        let _ = writeln!(out, "          because {c}");
    }
}

fn field(f: &Field) -> String {
    match f {
        Field::Version { before, after } => format!("version {before} -> {after}"),
        Field::Command { before, after } => {
            format!("command {before:?} -> {after:?}")
        }
        Field::StopGrace { before, after } => format!("stop grace {before}s -> {after}s"),
        Field::EnvAdded { key } => format!("env {key} added"),
        Field::EnvRemoved { key } => format!("env {key} removed"),
        Field::EnvChanged { key } => format!("env {key} changed"),
        Field::FileAdded { name, path } => format!("file {name} ({path}) added"),
        Field::FileRemoved { name, path } => format!("file {name} ({path}) removed"),
        Field::FileChanged { name, path } => format!("file {name} ({path}) changed"),
        Field::Artifact {
            name,
            before,
            after,
        } => format!(
            "artifact {name} {} -> {}",
            before.as_deref().unwrap_or("(none)"),
            after.as_deref().unwrap_or("(none)")
        ),
    }
}

fn object(o: &Object) -> String {
    match o {
        Object::Stream(s) => format!("stream {} ({})", s.name, s.subjects.join(", ")),
        Object::Consumer(c) => format!(
            "consumer {} on {}{}",
            c.name,
            c.stream,
            if c.filter_subjects.is_empty() {
                String::new()
            } else {
                format!(" filtering {}", c.filter_subjects.join(", "))
            }
        ),
    }
}

/// The text of a plan: declarations by node, authority by principal, then
/// the bus objects.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plan: {}", plan.pending);
    if plan.entries.is_empty() {
        let _ = writeln!(out, "nothing would change");
        return out;
    }
    let _ = writeln!(out, "declarations:");
    let mut node: Option<&Name> = None;
    let mut any = false;
    for e in &plan.entries {
        let Some(n) = e.node() else { continue };
        any = true;
        if node != Some(n) {
            let _ = writeln!(out, "  node {n}:");
            node = Some(n);
        }
        let _ = match e {
            Entry::Start {
                module, version, ..
            } => match plan.pins.get(n).and_then(|p| p.get(module)) {
                Some(pin) => writeln!(
                    out,
                    "    start  {module} (version {version}, runs version {pin} of {module})"
                ),
                None => writeln!(out, "    start  {module} (version {version})"),
            },
            Entry::Stop { module, .. } => writeln!(out, "    stop   {module}"),
            Entry::LeftOut { module, reason, .. } => {
                writeln!(out, "    left out {module}: {reason}")
            }
            Entry::Update {
                module, field: f, ..
            } => {
                writeln!(out, "    update {module}: {}", field(f))
            }
            _ => Ok(()),
        };
    }
    if !any {
        let _ = writeln!(out, "  (no node's declaration changes)");
    }
    if !plan.unaddressed.is_empty() {
        let _ = writeln!(out, "left without an address:");
        out.push_str(&unaddressed_text(&plan.unaddressed, "  ", "    = help: "));
    }
    let _ = writeln!(out, "authority:");
    let mut principal: Option<&str> = None;
    any = false;
    for e in &plan.entries {
        let Some(p) = e.principal() else { continue };
        any = true;
        if principal != Some(p) {
            let _ = writeln!(out, "  principal {p}:");
            principal = Some(p);
        }
        let dir = |d: &Direction| match d {
            Direction::Publish => "publish",
            Direction::Subscribe => "subscribe",
        };
        match e {
            Entry::PrincipalAdded { source, .. } => {
                let _ = writeln!(out, "    + new principal ({source})");
            }
            Entry::PrincipalRemoved { source, .. } => {
                let _ = writeln!(out, "    - principal gone ({source})");
            }
            Entry::GrantAdded {
                direction,
                subject,
                causes: c,
                ..
            }
            | Entry::GrantRemoved {
                direction,
                subject,
                causes: c,
                ..
            } => {
                let sign = if matches!(e, Entry::GrantAdded { .. }) {
                    '+'
                } else {
                    '-'
                };
                let _ = writeln!(out, "    {sign} {:<9} {subject}", dir(direction));
                causes(&mut out, c);
            }
            Entry::AllowResponses { after, .. } => {
                let _ = match after {
                    Some(c) => writeln!(out, "    + allow_responses, because {c}"),
                    None => writeln!(out, "    - allow_responses"),
                };
            }
            _ => {}
        }
    }
    if !any {
        let _ = writeln!(out, "  (no principal's authority changes)");
    }
    let objects: Vec<String> = plan
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::ObjectAdded(o) => Some(format!("  + {}", object(o))),
            Entry::ObjectRemoved(o) => Some(format!("  - {}", object(o))),
            Entry::ObjectChanged { before, after } => {
                Some(format!("  ~ {} (was {})", object(after), object(before)))
            }
            _ => None,
        })
        .collect();
    let _ = writeln!(out, "bus objects:");
    if objects.is_empty() {
        let _ = writeln!(out, "  (no stream or consumer changes)");
    }
    for o in objects {
        let _ = writeln!(out, "{o}");
    }
    out
}
