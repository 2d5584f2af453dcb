//! The README walked as a newcomer walks it: every `$ ` line of its
//! `console` blocks run in order, in one shell, in a fresh directory holding
//! only the examples, and what each prints compared with what the README
//! shows under it. A README that shows a count, a module list or an answer
//! the commands no longer print fails here.
//!
//! `scripts/main` is run as what it ends in, `mesh up` (its setup and build
//! are this test's own); it and every command ending in `&` run in the
//! background in a process group of their own, and their shown lines are
//! waited for in what they have printed so far. Each is stopped at the end
//! with SIGINT to its whole group, as a terminal's Ctrl-C does.

#[path = "join_live/harness.rs"]
mod harness;
mod readme_live {
    pub mod walk;
}

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use readme_live::walk::{self, Step};

const MARK: &str = "__walk__";

struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    dir: PathBuf,
    count: usize,
}

impl Shell {
    fn start(cwd: &Path, home: &Path, path: &std::ffi::OsStr) -> Shell {
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(cwd)
            .env_clear()
            .env("PATH", path)
            .env("HOME", home)
            .env("MESH_LOG", "info,async_nats=off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell {
            child,
            stdin,
            lines,
            dir: home.join("walk-out"),
            count: 0,
        };
        std::fs::create_dir_all(&shell.dir).unwrap();
        // Job control: each background command in a process group of its own.
        shell.send("set -m");
        shell
    }

    fn send(&mut self, script: &str) -> String {
        writeln!(self.stdin, "{script}\necho \"{MARK} $?\"").unwrap();
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(MARK) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => panic!("the shell did not finish `{script}` within 180 s"),
            }
        }
    }

    /// Runs a command to its end: its exit status and what it printed.
    fn run(&mut self, command: &str) -> (i32, Vec<String>) {
        self.count += 1;
        let out = self.dir.join(format!("{}.out", self.count));
        let status = self.send(&format!(
            "{{ {command}\n}} > '{}' 2>&1 < /dev/null",
            out.display()
        ));
        (status.parse().unwrap(), read_lines(&out))
    }

    /// Starts a command in the background: its pid (its group's id) and
    /// the file its output goes to.
    fn spawn(&mut self, command: &str) -> (i32, PathBuf) {
        self.count += 1;
        let out = self.dir.join(format!("{}.out", self.count));
        let pid_file = self.dir.join(format!("{}.pid", self.count));
        let status = self.send(&format!(
            "{{ {command}\n}} > '{}' 2>&1 < /dev/null &\nprintf '%s' \"$!\" > '{}'",
            out.display(),
            pid_file.display()
        ));
        assert_eq!(status, "0", "starting `{command}` in the background");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        (pid, out)
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie has ended; its parent (the shell) reaps it.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn mismatch(step: &Step, printed: &[String], why: &str) -> String {
    format!(
        "README.md:{}: `{}` {why}\n--- the README shows:\n{}\n--- it printed:\n{}\n",
        step.line,
        step.command,
        step.shown.join("\n"),
        printed.join("\n")
    )
}

fn fail(step: &Step, printed: &[String], why: &str) -> ! {
    panic!("{}", mismatch(step, printed, why))
}

#[test]
fn the_readme_walked_in_order_prints_what_it_shows() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let steps = walk::steps(&readme);
    assert!(
        steps.len() >= 10,
        "the README's console blocks hold {} commands; the walk expects the newcomer's path",
        steps.len()
    );

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mesh");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(harness_examples(), root.join("examples")).unwrap();
    // The checkout's .tools, where scripts/setup put nats-server: the
    // README's own `export PATH` is what finds it, as for a person.
    let tools = harness_examples().join("../.tools");
    if tools.is_dir() {
        std::os::unix::fs::symlink(tools, root.join(".tools")).unwrap();
    } else if let Some(nats) = std::env::var_os("MESH_NATS_SERVER") {
        let bin = root.join(".tools/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(nats, bin.join("nats-server")).unwrap();
    }
    let dirs: Vec<PathBuf> = std::env::split_paths(&harness::path_with_bins()).collect();
    let path = std::env::join_paths(dirs).unwrap();
    let mut shell = Shell::start(&root, tmp.path(), &path);

    let mut background: Vec<i32> = Vec::new();
    // What each background command printed, shown when the walk fails: a
    // daemon that died explains the command after it that failed.
    let mut logs: Vec<(String, PathBuf)> = Vec::new();
    // A command printing something else is noted and the walk goes on, so
    // one run names every line of the README that is out of date.
    let mut wrong: Vec<String> = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for step in &steps {
            let command = step.command.trim();
            let daemon = command == "scripts/main" || command.ends_with('&');
            if daemon {
                let command = match command {
                    "scripts/main" => "mesh up",
                    c => c.trim_end_matches('&').trim_end(),
                };
                let (pid, out) = shell.spawn(command);
                background.push(pid);
                logs.push((command.to_string(), out.clone()));
                let deadline = Instant::now() + Duration::from_secs(240);
                loop {
                    let printed = read_lines(&out);
                    if walk::prefix_matches(&step.shown, &printed) {
                        break;
                    }
                    if !alive(pid) {
                        fail(
                            step,
                            &printed,
                            "ended before printing what the README shows",
                        );
                    }
                    if Instant::now() > deadline {
                        fail(
                            step,
                            &printed,
                            "did not print what the README shows within 240 s",
                        );
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                continue;
            }
            let (status, printed) = shell.run(command);
            let meant_to_fail = step.shown.iter().any(|l| l.starts_with("error"));
            if (status == 0) == meant_to_fail {
                wrong.push(mismatch(step, &printed, &format!("exited {status}")));
            } else if !walk::matches(&step.shown, &printed) {
                wrong.push(mismatch(step, &printed, "printed something else"));
            }
        }
    }));

    // Ctrl-C to each background command's whole group, as a terminal does.
    for &pid in &background {
        // SAFETY: signalling a process group this test started.
        unsafe { libc::kill(-pid, libc::SIGINT) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut hung = Vec::new();
    for &pid in &background {
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if alive(pid) {
            hung.push(pid);
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
    if result.is_err() || !wrong.is_empty() {
        for (command, out) in &logs {
            let text = read_lines(out);
            let tail = &text[text.len().saturating_sub(15)..];
            eprintln!(
                "--- `{command}` (background) printed last:\n{}",
                tail.join("\n")
            );
        }
    }
    drop(shell.stdin);
    let _ = shell.child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(hung.is_empty(), "still running 30 s after Ctrl-C: {hung:?}");
    // Followed in a checkout, the README leaves nothing `git status` would
    // show (a person's seed written into the repository's root was).
    let checkout = harness_examples().join("..");
    let shown: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "examples" && name != ".tools")
        .filter(|name| {
            !std::process::Command::new("git")
                .arg("-C")
                .arg(&checkout)
                .args(["check-ignore", "-q", "--no-index", name])
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    assert!(
        shown.is_empty(),
        "the README leaves files git would show in a checkout: {shown:?}"
    );
    println!(
        "readme: {} commands walked, each printing what the README shows",
        steps.len()
    );
}

fn harness_examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .canonicalize()
        .unwrap()
}
