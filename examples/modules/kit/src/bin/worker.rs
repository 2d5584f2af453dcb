//! mesh-worker: a seat worker. `mesh-worker --seat SEAT [--node-scoped]`
//! takes the seat's work (for a node-scoped seat, its own node's only) and
//! for each piece:
//! - `{"hand_back": true}` the first time it comes: hands it back (it comes
//!   round again a second later);
//! - otherwise works `sleep_ms` (default 0) while keeping its claim, appends
//!   `{"id", "kind", "node", "delivered", "from", "payload"}` to `done.jsonl`
//!   in its working directory, emits the seat's `done` event and
//!   acknowledges.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use mesh_example_modules::{BoxError, append_line, check_args, flag_value, run};
use mesh_sdk::Module;
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    run("mesh-worker", worker(args)).await
}

async fn worker(args: Vec<String>) -> Result<(), BoxError> {
    check_args(&args, &["--seat"], &["--node-scoped"])?;
    let seat = flag_value(&args, "--seat")?.ok_or("--seat SEAT is required")?;
    let module = Module::connect().await?;
    let mut queue = if args.iter().any(|a| a == "--node-scoped") {
        module.work_for_node(&seat).await?
    } else {
        module.work(&seat).await?
    };
    eprintln!("mesh-worker: taking {seat} work");
    while let Some(next) = queue.next().await {
        let work = match next {
            Ok(w) => w,
            Err(e) => {
                eprintln!("mesh-worker: {e}");
                continue;
            }
        };
        let payload = &work.envelope.payload;
        let id = work.envelope.id.clone();
        if payload.get("hand_back").and_then(Value::as_bool) == Some(true) && work.delivered == 1 {
            eprintln!("mesh-worker: handing back {id}");
            work.hand_back(Duration::from_secs(1)).await?;
            continue;
        }
        let sleep = payload.get("sleep_ms").and_then(Value::as_u64).unwrap_or(0);
        work.keep_alive(tokio::time::sleep(Duration::from_millis(sleep)))
            .await;
        let line = json!({
            "id": id,
            "kind": work.kind,
            "node": module.node().as_str(),
            "delivered": work.delivered,
            "from": work.envelope.module.as_str(),
            "payload": payload,
        });
        append_line(Path::new("done.jsonl"), &line)?;
        if let Err(e) = module.emit_seat(&seat, "done", json!({ "id": id })).await {
            // The work is done either way; failing to announce it must not
            // make it be done twice.
            eprintln!("mesh-worker: {e}");
        }
        work.ack().await?;
        eprintln!("mesh-worker: done {id}");
    }
    Err("the bus connection closed".into())
}
