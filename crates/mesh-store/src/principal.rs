//! Principal names: who connects to the bus.
//!
//! The names are derived in one place, `mesh_core::authority::PrincipalKind`,
//! so the credential the store keys by a name and the user the composed users
//! file names can never disagree. These are shorthands for the store's callers.

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;

/// The controller's principal.
pub const CONTROLLER: &str = mesh_core::authority::CONTROLLER;

/// The host agent on `node`: `host_<node>`.
pub fn host(node: &Name) -> String {
    PrincipalKind::Host { node: node.clone() }.principal_name()
}

/// Module `module` running on `node`: `module_<node>_<module>`.
pub fn module(node: &Name, module: &Name) -> String {
    PrincipalKind::Module {
        node: node.clone(),
        module: module.clone(),
    }
    .principal_name()
}

/// An operator: `person_<name>`.
pub fn person(name: &Name) -> String {
    PrincipalKind::Person {
        person: name.clone(),
    }
    .principal_name()
}

/// The enrolment user of `node`'s live token: `enrol_<node>`.
pub fn enrolment(node: &Name) -> String {
    PrincipalKind::Enrolment { node: node.clone() }.principal_name()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_separated_by_underscore() {
        let n = Name::new("n1").unwrap();
        let m = Name::new("audit-log").unwrap();
        assert_eq!(host(&n), "host_n1");
        assert_eq!(module(&n, &m), "module_n1_audit-log");
        assert_eq!(person(&m), "person_audit-log");
        assert_eq!(enrolment(&n), "enrol_n1");
        assert_eq!(CONTROLLER, "controller");
    }
}
