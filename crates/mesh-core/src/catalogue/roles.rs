//! The roles the mesh itself declares: seats no module can declare, held
//! by the machines that run the mesh's own services.

use crate::diagnostic::Pos;
use crate::manifest::{BROKER_ROLE, Located, Scope, SeatDecl};
use crate::names::Name;

/// The role whose holder runs the store.
pub const STORE_ROLE: &str = "mesh-store";
/// The role whose holder builds: takes `build` work, announces `built`.
pub const BUILD_MACHINE_ROLE: &str = "mesh-build-machine";

/// Whether `seat` is a role any number of modules (on any nodes) may hold
/// at once: its holders are a pool sharing one work queue through its
/// deliver group, with no state of their own to keep apart. The build
/// machine is: two take builds in turn, and one dying leaves its work to
/// the other.
pub fn pooled(seat: &Name) -> bool {
    seat.as_str() == BUILD_MACHINE_ROLE
}

/// The seats the mesh itself declares. Same fields as a module's seat; their
/// positions are [`Pos::START`] and their [`Origin`](super::Origin) is
/// [`Origin::Mesh`](super::Origin::Mesh).
pub fn builtin_roles() -> Vec<SeatDecl> {
    let role = |name: &str, protocol: &str, accepts: &[&str], emits: &[&str]| {
        let names = |xs: &[&str]| {
            xs.iter()
                .filter_map(|x| Name::new(*x).ok())
                .map(|n| Located::new(n, Pos::START))
                .collect::<Vec<_>>()
        };
        Name::new(name).ok().map(|n| SeatDecl {
            name: Located::new(n, Pos::START),
            scope: Located::new(Scope::Mesh, Pos::START),
            protocol: Located::new(protocol.to_string(), Pos::START),
            accepts: names(accepts),
            emits: names(emits),
            tools: Vec::new(),
            pos: Pos::START,
        })
    };
    [
        role(BROKER_ROLE, "nats", &[], &[]),
        role(STORE_ROLE, "postgres", &[], &[]),
        role(BUILD_MACHINE_ROLE, "", &["build"], &["built"]),
    ]
    .into_iter()
    .flatten()
    .collect()
}
