//! An OCI archive of one program, built here with the container engine:
//! `FROM scratch`, the program (stripped when `strip` is there) and the
//! shared libraries `ldd` says it loads, at the paths they have on this
//! machine. No registry is asked for anything (none may be reachable),
//! `--timestamp 0` makes the same program the same image, and the archive
//! is written by [`tar`] so that the same image is the same bytes (one
//! stored version, however often `mesh up` builds it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

pub mod tar;

/// Where the program sits in the image (its entrypoint).
pub fn entrypoint(program: &Path) -> anyhow::Result<String> {
    let name = program
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} names no file", program.display()))?;
    Ok(format!("/bin/{name}"))
}

/// Builds an image of `program` tagged `tag` and saves it as an OCI
/// archive at `out`, using `work` (emptied first) for the build context.
pub fn build_archive(
    engine: &Path,
    program: &Path,
    tag: &str,
    work: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(work);
    let root = work.join("root");
    let entry = entrypoint(program)?;
    let inside = root.join(entry.trim_start_matches('/'));
    std::fs::create_dir_all(inside.parent().expect("under /bin"))
        .with_context(|| format!("creating {}", root.display()))?;
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&inside)
        .arg(program)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(program, &inside)
            .with_context(|| format!("copying {}", program.display()))?;
    }
    for lib in libraries(program)? {
        let target = root.join(lib.strip_prefix("/").unwrap_or(&lib));
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // The file itself, not a link into a tree the image lacks.
        std::fs::copy(&lib, &target).with_context(|| format!("copying {}", lib.display()))?;
    }
    std::fs::write(
        work.join("Containerfile"),
        format!("FROM scratch\nCOPY root/ /\nENTRYPOINT [\"{entry}\"]\n"),
    )
    .context("writing the Containerfile")?;
    let context = work.to_str().context("the build directory is not UTF-8")?;
    engine_ok(
        engine,
        &[
            "build",
            "-q",
            // One image, no intermediate one per step.
            "--layers=false",
            "--timestamp",
            "0",
            "-t",
            tag,
            context,
        ],
    )?;
    // The layout as a directory, archived here: the engine's own archive
    // stamps each entry with the time of the save.
    let layout = work.join("oci");
    let layout_text = layout
        .to_str()
        .context("the build directory is not UTF-8")?;
    engine_ok(
        engine,
        &["save", "--format", "oci-dir", "-o", layout_text, tag],
    )?;
    let _ = std::fs::remove_file(out);
    tar::write_tree(&layout, out)
}

/// The shared libraries `program` loads, as absolute paths (none for a
/// static program).
pub fn libraries(program: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .stdin(Stdio::null())
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static program: "not a dynamic executable".
        return Ok(Vec::new());
    }
    Ok(parse_ldd(&text))
}

/// `libx.so.1 => /lib/libx.so.1 (0x…)` and `/lib64/ld-linux-x86-64.so.2
/// (0x…)` give a path; `linux-vdso.so.1 (0x…)` is the kernel's, none.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

fn engine_ok(engine: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(engine)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", engine.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed: {}",
            engine.display(),
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_the_paths_of_what_is_loaded() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibmissing.so => not found\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tstatically linked\n").is_empty());
        assert_eq!(
            entrypoint(Path::new("/x/target/debug/mesh-ticker")).unwrap(),
            "/bin/mesh-ticker"
        );
    }
}
