//! The catalogue: every registered manifest plus the mesh's own roles, seat
//! renames applied, checked together.

mod aliases;
mod checks;
pub mod graph;
pub mod holders;
mod index;
mod left_out;
mod registering;
mod roles;
mod watched;

pub use aliases::{Alias, Aliases};
pub use checks::{check, check_tool_use};
pub use graph::{graph_dot, graph_svg};
pub use index::{Catalogue, Consume, Origin, Publication, SeatEntry, SeatRef, ToolUse};
pub use left_out::left_out;
pub use registering::broken_by;
pub use roles::{BUILD_MACHINE_ROLE, STORE_ROLE, builtin_roles};
pub use watched::Unwatchable;
pub use watched::subject_filter;
