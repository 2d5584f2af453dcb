//! A live mesh whose controller serves HTTP on a free port of its own, with
//! one real host enrolled and bound: what the HTTP tests look at.

use std::time::Duration;

use super::harness::{self, Backend, Daemon, Mesh};

/// `127.0.0.1:<a free port>`.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", mesh_testkit::broker::free_port().unwrap())
}

/// The mesh, its host `node`, and the controller's HTTP address.
pub async fn with_host(node: &str) -> (Mesh, Daemon, String) {
    let addr = free_addr();
    let mut mesh = Mesh::new(Backend::Sqlite);
    mesh.start_controller_with(&["--http", &addr]);
    mesh.register(&Mesh::examples());
    let token = mesh.node_add(node, "1h");
    let host = mesh.host(node, Some(&token));
    let js = async_nats::jetstream::new(mesh.observer().await);
    harness::wait_bound(&js, &[node], Duration::from_secs(60)).await;
    (mesh, host, addr)
}
