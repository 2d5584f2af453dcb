//! `mesh completions bash|zsh|fish`: the shell completion script, generated
//! from the same clap definition the binary parses with, so it never lists
//! a command that is not there.

use std::process::ExitCode;

use clap::{Args, CommandFactory as _, ValueEnum};
use clap_complete::Shell;

use crate::output;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let shell = match args.shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut cmd = crate::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mesh", &mut script);
    output::print(&String::from_utf8_lossy(&script))?;
    Ok(ExitCode::SUCCESS)
}
