//! mesh-greeter: a tool server. Serves
//! - `greet` (`{"name": "ada"}` → `{"greeting": "hello, ada", "node": …}`),
//! - `count` (→ `{"greeted": <how many greet calls this instance answered>}`),
//! - `submit` (`{"seat": "jobs", "node"?: "n1", "kind"?: "job", "payload": …}`
//!   → `{"id": …}`): puts work on a seat it uses, for a node's holder when
//!   `node` is given (a node-scoped seat).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mesh_example_modules::{BoxError, check_args, run};
use mesh_sdk::{Module, SeatAddress};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    run("mesh-greeter", greeter(args)).await
}

async fn greeter(args: Vec<String>) -> Result<(), BoxError> {
    check_args(&args, &[], &[])?;
    let module = Arc::new(Module::connect().await?);
    let greeted = Arc::new(AtomicU64::new(0));

    let node = module.node().to_string();
    let counter = greeted.clone();
    let _greet = module
        .serve("greet", move |req: Value| {
            let node = node.clone();
            let counter = counter.clone();
            async move {
                let name = req.get("name").and_then(Value::as_str).unwrap_or("world");
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(json!({ "greeting": format!("hello, {name}"), "node": node }))
            }
        })
        .await?;
    let counter = greeted.clone();
    let _count = module
        .serve("count", move |_req: Value| {
            let counter = counter.clone();
            async move { Ok(json!({ "greeted": counter.load(Ordering::Relaxed) })) }
        })
        .await?;
    let submitter = module.clone();
    let _submit = module
        .serve("submit", move |req: Value| {
            let module = submitter.clone();
            async move { submit(&module, req).await.map_err(|e| e.to_string()) }
        })
        .await?;
    // Its tools answer from here on: what its `sdk = true` check waits for.
    module.ready()?;
    eprintln!("mesh-greeter: serving greet, count, submit");
    std::future::pending::<()>().await;
    Ok(())
}

async fn submit(module: &Module, req: Value) -> Result<Value, BoxError> {
    let text = |key: &str| req.get(key).and_then(Value::as_str);
    let seat = text("seat").ok_or("submit needs {\"seat\": <seat>, \"payload\": …}")?;
    let kind = text("kind").unwrap_or("job");
    let address = match text("node") {
        Some(node) => SeatAddress::node(seat, node)?,
        None => SeatAddress::mesh(seat)?,
    };
    let payload = req.get("payload").cloned().unwrap_or(Value::Null);
    let id = module.submit(&address, kind, payload).await?;
    eprintln!("mesh-greeter: submitted {kind} {id} to {seat}");
    Ok(json!({ "id": id }))
}
