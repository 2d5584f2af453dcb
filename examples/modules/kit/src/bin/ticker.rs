//! mesh-ticker: an emitter. Emits `tick` events (`{"n": 1}`, `{"n": 2}`, …):
//! `--count N` at once (default 3), then one every `--every SECS` if given.
//! Writes how many it emitted to `ticked` in its working directory.

use std::process::ExitCode;
use std::time::Duration;

use mesh_example_modules::{BoxError, check_args, flag_value, run};
use mesh_sdk::Module;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    run("mesh-ticker", ticker(args)).await
}

async fn ticker(args: Vec<String>) -> Result<(), BoxError> {
    check_args(&args, &["--count", "--every"], &[])?;
    let count: u64 = flag_value(&args, "--count")?.map_or(Ok(3), |v| v.parse())?;
    let every: Option<u64> = flag_value(&args, "--every")?
        .map(|v| v.parse())
        .transpose()?;
    let module = Module::connect().await?;
    let mut n = 0;
    let tick = async |n: u64| -> Result<(), BoxError> {
        module.emit("tick", serde_json::json!({ "n": n })).await?;
        std::fs::write("ticked", n.to_string())?;
        eprintln!("mesh-ticker: tick {n}");
        Ok(())
    };
    while n < count {
        n += 1;
        tick(n).await?;
    }
    let Some(every) = every.filter(|s| *s > 0) else {
        // Done emitting; stays up, as a module does, until stopped.
        std::future::pending::<()>().await;
        return Ok(());
    };
    let mut interval = tokio::time::interval(Duration::from_secs(every));
    interval.tick().await;
    loop {
        interval.tick().await;
        n += 1;
        tick(n).await?;
    }
}
