//! Bad operator input against the real `mesh` binary, as table rows.
//!
//! A [`Case`] is a command line, the fixture files it needs (written into a
//! temp dir of its own) and what it must answer. [`run`] runs it and judges
//! the run on the rules every case shares, whatever it tests:
//!
//! - no panic: no exit 101, no death by signal, no "panicked" on stderr;
//! - nothing lost: every file, directory, link, FIFO and device that was in
//!   the case's dir before is there after with the same type, mode and
//!   content (or link target, or device number); so are the paths outside
//!   it a case names;
//! - nothing leaked: no secret of the fixture (the minted secrets, any
//!   password a case declares), no NKey seed (`SU…`) nor a bcrypt hash
//!   (`$2a$`) on stdout or stderr, unless the case is *meant* to print the
//!   users file; no new file holding one, other than those the case is
//!   meant to create; no `.tmp` file left behind;
//! - the terminal is safe: no control character but newline and tab in
//!   either stream.
//!
//! Rows for other commands are added to a table as more [`Case`] values;
//! [`Tally`] counts panics, losses and leaks across them.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn mesh_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mesh")
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .canonicalize()
        .unwrap()
}

/// A fixture entry, at a path relative to the case's working dir.
#[derive(Debug, Clone)]
pub enum Setup {
    File(&'static str, Vec<u8>),
    Dir(&'static str),
    Fifo(&'static str),
    /// A link at the first path pointing at the second (which may not exist).
    Symlink(&'static str, &'static str),
    /// A character device like /dev/null (needs CAP_MKNOD; without it the
    /// case is skipped, and counted as such).
    NullDevice(&'static str),
}

/// The records a case runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// No store: the case must not need one.
    None,
    /// `examples/fleet.toml` loaded over `examples/catalogue`.
    Example,
    /// This many nodes, one host each, over `examples/catalogue`.
    Nodes(usize),
}

/// One row. In `args`, `{work}` is the case's working dir, `{state}` the dir
/// holding its store and minted secrets, `{catalogue}` the example catalogue.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    pub args: Vec<&'static str>,
    pub setup: Vec<Setup>,
    pub records: Records,
    pub exit: i32,
    /// Each must appear on stderr: the reason and the fix.
    pub stderr: Vec<&'static str>,
    /// Each must appear on stdout.
    pub stdout: Vec<&'static str>,
    /// Bytes of stdout and stderr together, at most.
    pub max_output: usize,
    /// Paths outside the case's dir that must stay what they are.
    pub outside: Vec<&'static str>,
    /// Files (relative to `{work}`) the case is meant to create; they may
    /// hold hashes, and must be owner-only.
    pub creates: Vec<&'static str>,
    /// The case prints the users file to stdout on purpose: hashes allowed
    /// there (secrets never).
    pub prints_hashes: bool,
    /// Passwords the fixture holds (a store URL's, say) that must not leak.
    pub secrets: Vec<&'static str>,
    /// `MESH_STORE` names the case's store (else it is unset, and the
    /// command must find its mesh itself).
    pub store_env: bool,
    /// Nothing at all may appear in the case's dir, store files included.
    pub nothing_new: bool,
}

impl Case {
    pub fn new(name: &'static str, args: &[&'static str]) -> Case {
        Case {
            name,
            args: args.to_vec(),
            setup: Vec::new(),
            records: Records::None,
            exit: 0,
            stderr: Vec::new(),
            stdout: Vec::new(),
            max_output: 64 * 1024,
            outside: Vec::new(),
            creates: Vec::new(),
            prints_hashes: false,
            secrets: Vec::new(),
            store_env: true,
            nothing_new: false,
        }
    }
}

/// What one path is: enough to tell that it was replaced or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File { mode: u32, bytes: Vec<u8> },
    Dir { mode: u32 },
    Symlink { target: PathBuf },
    Fifo { mode: u32 },
    Device { mode: u32, rdev: u64, char: bool },
    Socket,
}

impl Entry {
    pub fn of(path: &Path) -> Option<Entry> {
        let meta = fs::symlink_metadata(path).ok()?;
        let ty = meta.file_type();
        let mode = meta.permissions().mode() & 0o7777;
        Some(if ty.is_symlink() {
            Entry::Symlink {
                target: fs::read_link(path).unwrap(),
            }
        } else if ty.is_dir() {
            Entry::Dir { mode }
        } else if ty.is_file() {
            Entry::File {
                mode,
                bytes: fs::read(path).unwrap(),
            }
        } else if ty.is_fifo() {
            Entry::Fifo { mode }
        } else if ty.is_char_device() || ty.is_block_device() {
            Entry::Device {
                mode,
                rdev: meta.rdev(),
                char: ty.is_char_device(),
            }
        } else {
            Entry::Socket
        })
    }
}

/// Every path under a dir (links not followed), relative to it.
pub type Snapshot = BTreeMap<PathBuf, Entry>;

/// The store's own files change when it is opened; they are the store's,
/// and not compared.
fn is_store_file(rel: &Path) -> bool {
    rel.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("mesh.db"))
}

pub fn snapshot(root: &Path) -> Snapshot {
    fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
        for e in fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if is_store_file(&rel) {
                continue;
            }
            let entry = Entry::of(&path).unwrap();
            let is_dir = matches!(entry, Entry::Dir { .. });
            out.insert(rel, entry);
            if is_dir {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Snapshot::new();
    walk(root, root, &mut out);
    out
}

/// Every path under `root`, the store's files too.
pub fn every_path(root: &Path) -> std::collections::BTreeSet<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            }
            out.insert(e.path().strip_prefix(root).unwrap().to_path_buf());
        }
    }
    out
}

/// What was in `before` and is not the same in `after`.
pub fn losses(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    before
        .iter()
        .filter(|(path, entry)| after.get(*path) != Some(entry))
        .map(|(path, entry)| match after.get(path) {
            None => format!("{} ({}) is gone", path.display(), kind(entry)),
            Some(now) => format!(
                "{} was a {}, is now a {}{}",
                path.display(),
                kind(entry),
                kind(now),
                if kind(entry) == kind(now) {
                    " with other content or mode"
                } else {
                    ""
                }
            ),
        })
        .collect()
}

fn kind(e: &Entry) -> &'static str {
    match e {
        Entry::File { .. } => "file",
        Entry::Dir { .. } => "directory",
        Entry::Symlink { .. } => "symlink",
        Entry::Fifo { .. } => "FIFO",
        Entry::Device { .. } => "device",
        Entry::Socket => "socket",
    }
}

/// Markers of a bcrypt hash.
pub const HASH_MARKERS: [&str; 3] = ["$2a$", "$2b$", "$2y$"];

/// Whether `text` holds something shaped like an NKey seed: `SU` and 56 more
/// base32 characters (58 in all; a public key is 56, so never matches).
pub fn seed_in(text: &str) -> bool {
    let b = text.as_bytes();
    let base32 = |c: &u8| c.is_ascii_uppercase() || (b'2'..=b'7').contains(c);
    (0..b.len().saturating_sub(57))
        .any(|i| b[i..].starts_with(b"SU") && b[i..i + 58].iter().all(base32))
}

/// Where any of `secrets`, an NKey seed, or (unless `hashes_allowed`) a hash
/// shows in `text`.
pub fn leaks_in(what: &str, text: &[u8], secrets: &[String], hashes_allowed: bool) -> Vec<String> {
    let text = String::from_utf8_lossy(text);
    let mut out: Vec<String> = secrets
        .iter()
        .filter(|s| !s.is_empty() && text.contains(s.as_str()))
        .map(|_| format!("a secret of the fixture is on {what}"))
        .collect();
    if seed_in(&text) {
        out.push(format!("an nkey seed is on {what}"));
    }
    if !hashes_allowed && HASH_MARKERS.iter().any(|m| text.contains(m)) {
        out.push(format!("a bcrypt hash is on {what}"));
    }
    out
}

/// Control characters but newline and tab: an escape sequence reached the
/// terminal.
pub fn controls_in(text: &[u8]) -> Option<char> {
    String::from_utf8_lossy(text)
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
}

/// The example fleet loaded once per test binary into a template dir that
/// each case copies: minting is the slow part.
fn template(records: Records) -> &'static Path {
    static EXAMPLE: OnceLock<tempfile::TempDir> = OnceLock::new();
    static NODES: OnceLock<(usize, tempfile::TempDir)> = OnceLock::new();
    match records {
        Records::None => unreachable!("no template without records"),
        Records::Example => EXAMPLE
            .get_or_init(|| load_template(&examples().join("fleet.toml")))
            .path(),
        Records::Nodes(n) => {
            let (made, dir) = NODES.get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let fleet: String = (0..n)
                    .map(|i| format!("[[node]]\nname = \"node{i}\"\n"))
                    .collect();
                let file = dir.path().join("fleet.toml");
                fs::write(&file, fleet).unwrap();
                (n, load_template(&file))
            });
            assert_eq!(*made, n, "one node count per test binary");
            dir.path()
        }
    }
}

fn load_template(fleet: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(mesh_bin())
        .args(["fleet", "load"])
        .arg(fleet)
        .arg("--catalogue")
        .arg(examples().join("catalogue"))
        .env("MESH_STORE", store_url(dir.path()))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

pub fn store_url(state: &Path) -> String {
    format!("sqlite://{}", state.join("mesh.db").display())
}

/// Copies a tree, keeping modes; links are copied as links.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&e.path(), &target);
            fs::set_permissions(&target, fs::metadata(e.path()).unwrap().permissions()).unwrap();
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(e.path()).unwrap(), &target).unwrap();
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Every minted secret under `state`'s secrets dir.
fn minted_secrets(state: &Path) -> Vec<String> {
    let dir = state.join(".mesh/secrets");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect()
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// Makes one fixture entry; `false` when the system does not allow it.
fn make(work: &Path, s: &Setup) -> bool {
    match s {
        Setup::File(p, bytes) => {
            let p = work.join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, bytes).unwrap();
        }
        Setup::Dir(p) => fs::create_dir_all(work.join(p)).unwrap(),
        Setup::Fifo(p) => {
            // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
            let rc = unsafe { libc::mkfifo(c_path(&work.join(p)).as_ptr(), 0o644) };
            assert_eq!(rc, 0, "mkfifo {p}");
        }
        Setup::Symlink(p, target) => std::os::unix::fs::symlink(target, work.join(p)).unwrap(),
        Setup::NullDevice(p) => {
            let dev = libc::makedev(1, 3);
            // SAFETY: as above; mknod creates a device node, nothing else.
            let rc =
                unsafe { libc::mknod(c_path(&work.join(p)).as_ptr(), libc::S_IFCHR | 0o666, dev) };
            if rc != 0 {
                return false;
            }
        }
    }
    true
}

/// How one case went.
#[derive(Debug, Default)]
pub struct Verdict {
    pub skipped: bool,
    pub panicked: bool,
    pub losses: Vec<String>,
    pub leaks: Vec<String>,
    /// Everything else that was not as the row says.
    pub wrong: Vec<String>,
    pub output: Option<Output>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        !self.panicked && self.losses.is_empty() && self.leaks.is_empty() && self.wrong.is_empty()
    }
}

/// Runs one case in a fresh temp dir and judges it.
pub fn run(case: &Case) -> Verdict {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    let state = root.path().join("state");
    fs::create_dir_all(&work).unwrap();
    fs::create_dir_all(&state).unwrap();
    let mut verdict = Verdict::default();
    if case.records != Records::None {
        copy_tree(template(case.records), &state);
    }
    for s in &case.setup {
        if !make(&work, s) {
            verdict.skipped = true;
            return verdict;
        }
    }
    let mut secrets = minted_secrets(&state);
    secrets.extend(case.secrets.iter().map(|s| s.to_string()));

    let before = snapshot(root.path());
    let paths_before = every_path(root.path());
    let outside_before: Vec<Option<Entry>> = case
        .outside
        .iter()
        .map(|p| Entry::of(Path::new(p)))
        .collect();
    let catalogue = examples().join("catalogue");
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| {
            a.replace("{work}", &work.display().to_string())
                .replace("{state}", &state.display().to_string())
                .replace("{catalogue}", &catalogue.display().to_string())
        })
        .collect();
    let mut cmd = Command::new(mesh_bin());
    cmd.args(&args).env_remove("MESH_DIR").current_dir(&work);
    if case.store_env {
        cmd.env("MESH_STORE", store_url(&state));
    } else {
        cmd.env_remove("MESH_STORE");
    }
    let out = cmd.output().unwrap();
    let after = snapshot(root.path());
    if case.nothing_new {
        for p in every_path(root.path()).difference(&paths_before) {
            verdict.wrong.push(format!("{} was created", p.display()));
        }
    }

    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    verdict.panicked = matches!(out.status.code(), Some(101) | None) || stderr.contains("panicked");

    verdict.losses = losses(&before, &after);
    for (p, was) in case.outside.iter().zip(&outside_before) {
        if Entry::of(Path::new(p)) != *was {
            verdict.losses.push(format!("{p} changed"));
        }
    }

    verdict.leaks.extend(leaks_in(
        "stdout",
        &out.stdout,
        &secrets,
        case.prints_hashes,
    ));
    verdict
        .leaks
        .extend(leaks_in("stderr", &out.stderr, &secrets, false));
    for (path, entry) in after.iter().filter(|(p, _)| !before.contains_key(*p)) {
        let created = case
            .creates
            .iter()
            .any(|c| Path::new("work").join(c) == *path);
        if path.extension().is_some_and(|e| e == "tmp") {
            verdict
                .leaks
                .push(format!("temp file {} left behind", path.display()));
        } else if let Entry::File { bytes, mode } = entry {
            let held = leaks_in(&path.display().to_string(), bytes, &secrets, false);
            if created && mode & 0o077 != 0 {
                verdict
                    .leaks
                    .push(format!("{} is mode {mode:o}", path.display()));
            } else if !created && !held.is_empty() {
                verdict.leaks.extend(held);
            }
        }
    }
    for c in &case.creates {
        if !after.contains_key(&Path::new("work").join(c)) {
            verdict.wrong.push(format!("{c} was not created"));
        }
    }

    if out.status.code() != Some(case.exit) {
        verdict
            .wrong
            .push(format!("exit {:?}, want {}", out.status.code(), case.exit));
    }
    for want in &case.stderr {
        if !stderr.contains(want) {
            verdict.wrong.push(format!("stderr lacks {want:?}"));
        }
    }
    for want in &case.stdout {
        if !stdout.contains(want) {
            verdict.wrong.push(format!("stdout lacks {want:?}"));
        }
    }
    let printed = out.stdout.len() + out.stderr.len();
    if printed > case.max_output {
        verdict.wrong.push(format!(
            "printed {printed} bytes, at most {} allowed",
            case.max_output
        ));
    }
    for (what, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        if let Some(c) = controls_in(text) {
            verdict
                .wrong
                .push(format!("{what} holds the control character {c:?}"));
        }
    }
    verdict.output = Some(out);
    verdict
}

/// Counts across a table of cases.
#[derive(Debug, Default)]
pub struct Tally {
    pub cases: usize,
    pub skipped: Vec<&'static str>,
    pub panics: usize,
    pub losses: usize,
    pub leaks: usize,
    pub failures: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, case: &Case, v: &Verdict) {
        if v.skipped {
            self.skipped.push(case.name);
            return;
        }
        self.cases += 1;
        self.panics += usize::from(v.panicked);
        self.losses += v.losses.len();
        self.leaks += v.leaks.len();
        if !v.passed() {
            let out = v.output.as_ref();
            let excerpt = |b: Option<&Vec<u8>>| {
                let s = String::from_utf8_lossy(b.map_or(&[][..], |b| b)).into_owned();
                s.chars()
                    .take(600)
                    .collect::<String>()
                    .escape_debug()
                    .to_string()
            };
            self.failures.push(format!(
                "{}: {}\n  stdout: {}\n  stderr: {}",
                case.name,
                v.losses
                    .iter()
                    .chain(&v.leaks)
                    .chain(&v.wrong)
                    .cloned()
                    .chain(v.panicked.then(|| "panicked".to_string()))
                    .collect::<Vec<_>>()
                    .join("; "),
                excerpt(out.map(|o| &o.stdout)),
                excerpt(out.map(|o| &o.stderr)),
            ));
        }
    }

    /// `operator input: N cases, 0 panics, 0 losses, 0 leaks`
    pub fn summary(&self) -> String {
        format!(
            "operator input: {} cases, {} panics, {} losses, {} leaks{}",
            self.cases,
            self.panics,
            self.losses,
            self.leaks,
            if self.skipped.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} skipped: {})",
                    self.skipped.len(),
                    self.skipped.join(", ")
                )
            }
        )
    }
}
