use std::process::ExitCode;

fn main() -> ExitCode {
    mesh_cli::run(std::env::args_os())
}
