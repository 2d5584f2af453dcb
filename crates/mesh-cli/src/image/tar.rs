//! A directory as a tar archive that is the same bytes whenever the files
//! are: entries in name order, each stamped with time 0, owner 0 and a
//! fixed mode, no user or group names. `podman save --format oci-archive`
//! stamps every entry with the time of the save, so the same image made a
//! new archive (a new digest, a new stored version) every time.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, bail};

const BLOCK: usize = 512;

/// What one entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File { size: u64 },
}

/// Writes the tree under `dir` (regular files and directories only) to
/// `out` as a ustar archive, names relative to `dir`.
pub fn write_tree(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    add_dir(&mut w, dir, "")?;
    w.write_all(&[0; 2 * BLOCK])?;
    w.flush()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

fn add_dir(w: &mut impl std::io::Write, dir: &Path, prefix: &str) -> anyhow::Result<()> {
    let mut entries: Vec<(String, std::fs::DirEntry)> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| {
            let e = e?;
            let name = e.file_name().into_string().map_err(|n| {
                std::io::Error::other(format!("{} is not UTF-8", n.to_string_lossy()))
            })?;
            Ok((name, e))
        })
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, e) in entries {
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_dir() {
            let inner = format!("{prefix}{name}/");
            w.write_all(&header(&inner, Kind::Dir)?)?;
            add_dir(w, &path, &inner)?;
        } else if kind.is_file() {
            let mut f = std::fs::File::open(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let size = f.metadata()?.len();
            w.write_all(&header(&format!("{prefix}{name}"), Kind::File { size })?)?;
            let copied = std::io::copy(&mut std::io::Read::take(&mut f, size), w)?;
            if copied != size {
                bail!("{} changed while it was archived", path.display());
            }
            let pad = (BLOCK - (size as usize % BLOCK)) % BLOCK;
            w.write_all(&vec![0; pad])?;
        } else {
            bail!("{} is neither a file nor a directory", path.display());
        }
    }
    Ok(())
}

/// The ustar header of one entry: mode 0755 (a directory) or 0644, owner
/// 0:0, time 0.
pub fn header(name: &str, kind: Kind) -> anyhow::Result<[u8; BLOCK]> {
    if name.len() > 100 {
        bail!("{name}: a name longer than 100 bytes");
    }
    let mut h = [0u8; BLOCK];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, name.as_bytes());
    let (mode, size, flag) = match kind {
        Kind::Dir => (0o755, 0, b'5'),
        Kind::File { size } => (0o644, size, b'0'),
    };
    if size >= 1 << 33 {
        bail!("{name}: {size} bytes, more than a ustar entry holds");
    }
    put(100, format!("{mode:07o}\0").as_bytes());
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, b"00000000000\0");
    put(156, &[flag]);
    put(257, b"ustar\0");
    put(263, b"00");
    // The checksum counts its own field as spaces.
    put(148, b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_ustar_with_nothing_of_when_or_who() {
        let h = header("blobs/sha256/ab", Kind::File { size: 1000 }).unwrap();
        assert_eq!(&h[..15], b"blobs/sha256/ab");
        assert_eq!(&h[100..108], b"0000644\0");
        assert_eq!(&h[108..116], b"0000000\0");
        assert_eq!(&h[116..124], b"0000000\0");
        assert_eq!(&h[124..136], b"00000001750\0");
        assert_eq!(&h[136..148], b"00000000000\0");
        assert_eq!(h[156], b'0');
        assert_eq!(&h[257..265], b"ustar\x0000");
        assert!(h[265..].iter().all(|b| *b == 0), "no names, no devices");
        // The checksum: the sum of the header with its own field as spaces.
        let mut blank = h;
        blank[148..156].copy_from_slice(b"        ");
        let sum: u32 = blank.iter().map(|b| u32::from(*b)).sum();
        assert_eq!(&h[148..156], format!("{sum:06o}\0 ").as_bytes());
        let d = header("blobs/", Kind::Dir).unwrap();
        assert_eq!((&d[100..108], d[156]), (&b"0000755\0"[..], b'5'));
        assert_eq!(&d[124..136], b"00000000000\0");
        let long = "x".repeat(101);
        let e = header(&long, Kind::Dir).unwrap_err().to_string();
        assert!(e.contains("longer than 100 bytes"), "{e}");
    }

    #[test]
    fn the_same_files_make_the_same_bytes_and_tar_reads_them_back() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("blobs/sha256")).unwrap();
        std::fs::write(tree.join("oci-layout"), "{}").unwrap();
        std::fs::write(tree.join("blobs/sha256/b"), vec![7u8; 1500]).unwrap();
        std::fs::write(tree.join("blobs/sha256/a"), "").unwrap();
        let (one, two) = (tmp.path().join("1.tar"), tmp.path().join("2.tar"));
        write_tree(&tree, &one).unwrap();
        // Other times, other modes: the same archive.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        std::fs::write(tree.join("oci-layout"), "{}").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            tree.join("blobs/sha256/b"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        write_tree(&tree, &two).unwrap();
        let bytes = std::fs::read(&one).unwrap();
        assert_eq!(bytes, std::fs::read(&two).unwrap());
        assert_eq!(bytes.len() % BLOCK, 0);
        let listed = std::process::Command::new("tar")
            .arg("-tvf")
            .arg(&one)
            .output()
            .unwrap();
        assert!(listed.status.success(), "{listed:?}");
        let names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(|l| l.split_whitespace().last().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "blobs/",
                "blobs/sha256/",
                "blobs/sha256/a",
                "blobs/sha256/b",
                "oci-layout"
            ]
        );
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let extracted = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&one)
            .arg("-C")
            .arg(&out)
            .status()
            .unwrap();
        assert!(extracted.success());
        assert_eq!(
            std::fs::read(out.join("blobs/sha256/b")).unwrap(),
            vec![7u8; 1500]
        );
    }
}
