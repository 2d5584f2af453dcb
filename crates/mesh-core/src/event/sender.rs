//! Who sent an event, as far as a reader can tell. The subject is the
//! server's word: it refuses a publish on a subject its publisher was not
//! granted, so `mesh.mod.<module>.event.<e>` proves the module and
//! `mesh.seat.<seat>.node.<node>.event.<e>` proves the node. The envelope's
//! `module` and `node` are the emitter's word: a module's own events carry
//! no node in their subject, so a reader checks the node it claims against
//! where the records say the module runs, and shows a claim that
//! contradicts either as a claim, never as the sender.

use crate::event::EventEnvelope;
use crate::names::Name;
use crate::records::Assignment;

/// What an event subject proves about its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proven {
    /// `mesh.mod.<module>.event.<e>`: only that module may publish it.
    Module(Name),
    /// `mesh.seat.<seat>.node.<node>.event.<e>`: only that node's holder.
    SeatNode { seat: Name, node: Name },
    /// `mesh.seat.<seat>.event.<e>`: the seat's holder, wherever it runs.
    Seat(Name),
}

/// What `subject` proves, if it is an event subject at all.
pub fn proven(subject: &str) -> Option<Proven> {
    let t: Vec<&str> = subject.split('.').collect();
    let name = |s: &str| Name::new(s).ok();
    match t.as_slice() {
        ["mesh", "mod", m, "event", _] => Some(Proven::Module(name(m)?)),
        ["mesh", "seat", s, "node", n, "event", _] => Some(Proven::SeatNode {
            seat: name(s)?,
            node: name(n)?,
        }),
        ["mesh", "seat", s, "event", _] => Some(Proven::Seat(name(s)?)),
        _ => None,
    }
}

/// The sender a reader may show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The module: the subject's where it names one, else the envelope's.
    pub module: Name,
    /// The node the envelope names.
    pub node: Name,
    /// Why the envelope's word cannot be taken: it contradicts the subject
    /// or the records. `None`: it agrees with both.
    pub doubt: Option<String>,
}

impl std::fmt::Display for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.doubt {
            None => write!(f, "{}@{}", self.module, self.node),
            Some(why) => write!(f, "{}@? ({why})", self.module),
        }
    }
}

/// The sender of `envelope`, stored on `subject`, checked against what the
/// subject proves and against `assignments` (the records: where each
/// module runs).
pub fn sender(subject: &str, envelope: &EventEnvelope, assignments: &[Assignment]) -> Sender {
    let module = match proven(subject) {
        Some(Proven::Module(m)) => m,
        _ => envelope.module.clone(),
    };
    let node = &envelope.node;
    let doubt = contradicts(subject, envelope).or_else(|| {
        let runs = |a: &&Assignment| a.module == module;
        if assignments.iter().filter(runs).any(|a| a.node == *node) {
            return None;
        }
        let on: Vec<&str> = assignments
            .iter()
            .filter(runs)
            .map(|a| a.node.as_str())
            .collect();
        let runs_on = match on.as_slice() {
            [] => "it is assigned to no node".to_string(),
            nodes => format!("it runs on {}", nodes.join(", ")),
        };
        Some(format!(
            "{}, but {module} is not assigned to {node}: {runs_on}",
            claim(envelope)
        ))
    });
    Sender {
        module,
        node: node.clone(),
        doubt,
    }
}

fn claim(envelope: &EventEnvelope) -> String {
    format!("the envelope claims {}@{}", envelope.module, envelope.node)
}

/// Why `envelope` cannot have been sent on `subject`, from the subject
/// alone (for a reader without the records): a module other than the one
/// the subject proves, or another node than a node-scoped seat's subject
/// proves.
pub fn contradicts(subject: &str, envelope: &EventEnvelope) -> Option<String> {
    let claim = claim(envelope);
    match proven(subject)? {
        Proven::Module(m) if m != envelope.module => {
            Some(format!("{claim}; the subject proves module {m}"))
        }
        Proven::SeatNode { node, .. } if node != envelope.node => {
            Some(format!("{claim}; the subject proves node {node}"))
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "sender_tests.rs"]
mod tests;
