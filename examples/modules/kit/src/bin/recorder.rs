//! mesh-recorder: a consumer. Takes every event its manifest consumes from
//! its own consumer and appends each to `heard.jsonl` in its working
//! directory (`{"subject", "name", "envelope"}`), acknowledging an event only
//! once its line is on disk.

use std::path::Path;
use std::process::ExitCode;

use mesh_example_modules::{BoxError, append_line, check_args, run};
use mesh_sdk::Module;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    run("mesh-recorder", recorder(args)).await
}

async fn recorder(args: Vec<String>) -> Result<(), BoxError> {
    check_args(&args, &[], &[])?;
    let module = Module::connect().await?;
    let mut events = module.events().await?;
    eprintln!("mesh-recorder: bound its consumer");
    while let Some(next) = events.next().await {
        let event = match next {
            Ok(e) => e,
            // Terminated by the SDK; the next one is still worth hearing.
            Err(e) => {
                eprintln!("mesh-recorder: {e}");
                continue;
            }
        };
        let line = serde_json::json!({
            "subject": event.subject,
            "name": event.name,
            "envelope": event.envelope,
        });
        append_line(Path::new("heard.jsonl"), &line)?;
        event.ack().await?;
        eprintln!(
            "mesh-recorder: heard {} from {}",
            event.subject, event.envelope.module
        );
    }
    Err("the bus connection closed".into())
}
