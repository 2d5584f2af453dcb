//! A first `mesh up` in a directory (no genesis there yet) that fails
//! before its mesh came up removes what it made. Left in place, the
//! genesis would keep the options of the failed start: the next `mesh up
//! --port P`, as the refusal of a taken port advises, would find a genesis
//! that says 4222 and fail the same way.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::output;

/// What was in the directory before a first start.
pub struct FirstStart {
    dir: PathBuf,
    /// Its entries, if it existed: only those that appeared are removed.
    before: Option<BTreeSet<OsString>>,
    /// `--ha`'s PostgreSQL data kept outside it (as root), if not there yet.
    store_data: Option<PathBuf>,
}

impl FirstStart {
    /// None when `dir` holds a genesis already: not a first start.
    pub fn note(dir: &Path, ha: bool) -> Option<FirstStart> {
        if dir.join(mesh_controller::genesis::SIGNING_SEED).exists() {
            return None;
        }
        let before = std::fs::read_dir(dir)
            .ok()
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.file_name())).collect());
        let store_data = ha
            .then(|| super::postgres::data_dir_of(dir))
            .flatten()
            .filter(|d| !d.starts_with(dir) && !d.exists());
        Some(FirstStart {
            dir: dir.to_path_buf(),
            before,
            store_data,
        })
    }

    /// The start failed: unless its local host enrolled (the mesh came up
    /// and ran), what it made is removed, and said so.
    pub fn undo(self, host_dir: &Path) {
        if mesh_host::HostState::open(host_dir).is_ok() {
            return;
        }
        let made: Vec<PathBuf> = match &self.before {
            None => vec![self.dir.clone()],
            Some(before) => std::fs::read_dir(&self.dir)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .filter(|e| !before.contains(&e.file_name()))
                .map(|e| e.path())
                .collect(),
        };
        let mut left = Vec::new();
        for path in made.iter().chain(&self.store_data) {
            let removed = match path.is_dir() {
                true => std::fs::remove_dir_all(path),
                false => std::fs::remove_file(path),
            };
            if let Err(e) = removed
                && e.kind() != std::io::ErrorKind::NotFound
            {
                left.push(format!("{} ({})", path.display(), output::describe(&e)));
            }
        }
        match left.is_empty() {
            true => output::note(format_args!(
                "up: this first start failed; what it made in {} is removed",
                self.dir.display()
            )),
            false => output::note(format_args!(
                "up: this first start failed; could not remove what it made: {}",
                left.join(", ")
            )),
        }
    }
}
