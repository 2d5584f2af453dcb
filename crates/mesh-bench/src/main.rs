use std::process::ExitCode;

use clap::Parser as _;

/// The mesh's numbers on this machine: a broker, controller and store of
/// its own, N simulated hosts, raw JetStream beside them.
#[derive(Debug, clap::Parser)]
#[command(
    name = "mesh-bench",
    version,
    after_help = "Examples:
  mesh-bench
  mesh-bench --hosts 10000
  mesh-bench --hosts 200 --users-nodes 200 --ingest-for 1s --output json
  mesh-bench --hosts 200 --artifact-hosts 10 --artifact-mib 4 --no-ingest
  mesh-bench --deploy --hosts 10000"
)]
struct Cli {
    #[command(flatten)]
    args: mesh_bench::BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match mesh_bench::run(&cli.args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
