//! A build's inputs, read from the build itself: every artifact reference
//! in the checked-out files (DESIGN §6: never a declared list, which
//! drifts from what the code uses).

use std::path::Path;

use mesh_core::artifact::Reference;
use mesh_core::build::references_in;

/// Files larger than this are not read for references: a vendored binary
/// is not where a module names what it is built on.
const MAX_READ: u64 = 4 * 1024 * 1024;

/// Every reference in the files under `root` (not `.git`), each once, with
/// the first file (relative) that names it, in the order of sorted paths.
pub fn read(root: &Path) -> Result<Vec<(Reference, String)>, String> {
    let mut out: Vec<(Reference, String)> = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let mut files = Vec::new();
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| format!("could not read {} for inputs: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("could not read {}: {e}", dir.display()))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("could not read {}: {e}", path.display()))?;
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    stack.push(path);
                }
            } else if kind.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    for path in files {
        let big = std::fs::metadata(&path)
            .map(|m| m.len() > MAX_READ)
            .unwrap_or(true);
        if big {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for r in references_in(&String::from_utf8_lossy(&bytes)) {
            if !out.iter().any(|(seen, _)| *seen == r) {
                out.push((r, relative.clone()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_read_from_the_files_not_from_git_nor_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let hex = "a".repeat(64);
        let r = format!("artifact-store://base/lib@sha256:{hex}");
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("src/deps.txt"), format!("uses {r}\n{r}\n")).unwrap();
        std::fs::write(dir.path().join("b.txt"), &r).unwrap();
        let other = format!("artifact-store://git/x@sha256:{}", "b".repeat(64));
        std::fs::write(dir.path().join(".git/config"), &other).unwrap();
        let mut big = vec![b' '; (MAX_READ + 1) as usize];
        big.extend_from_slice(other.as_bytes());
        std::fs::write(dir.path().join("big.bin"), big).unwrap();
        let found = read(dir.path()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.to_string(), r);
        assert_eq!(
            found[0].1, "b.txt",
            "the first file in sorted order names it"
        );
    }
}
