//! Replacing a file the broker reads, so that it only ever sees a whole one
//! (shared with the host, which writes its keys the same way).

pub use mesh_files::{WriteError, write_private};
