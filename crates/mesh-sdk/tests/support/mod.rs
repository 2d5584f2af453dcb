//! What the SDK's live tests share: a small catalogue (a seat's holder, a
//! module serving a tool and submitting work, one consuming its events) and
//! a module's seed file.

use std::path::Path;

use mesh_core::catalogue::{Aliases, Catalogue};
use mesh_core::manifest;
use mesh_core::names::Name;

pub const WORKER: &str = r#"
[module]
name = "worker"
[[seat]]
name = "jobs"
scope = "mesh"
protocol = "json"
accepts = ["job"]
emits = ["done"]
[holds]
seats = ["jobs"]
[tools]
uses = ["greeter.greet"]
"#;

pub const GREETER: &str = r#"
[module]
name = "greeter"
[tools]
serves = ["greet"]
[uses]
seats = ["jobs"]
[events]
emits = ["greeted"]
"#;

pub const LISTENER: &str = r#"
[module]
name = "listener"
[events]
consumes = ["greeter.greeted"]
"#;

/// The modules above, in the order their manifests are listed.
pub const MODULES: [&str; 3] = ["worker", "greeter", "listener"];

pub fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

pub fn catalogue() -> Catalogue {
    let manifests = [
        ("worker/mesh.toml", WORKER),
        ("greeter/mesh.toml", GREETER),
        ("listener/mesh.toml", LISTENER),
    ]
    .iter()
    .map(|(p, t)| manifest::parse(p, t).unwrap())
    .collect();
    Catalogue::build(manifests, Aliases::new())
}

/// A seed file as a host writes it: readable by its owner alone.
pub fn write_seed(path: &Path, seed: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, seed).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
