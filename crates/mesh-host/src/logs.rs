//! The host's logs tool (`mesh logs`): answers requests on
//! `mesh.host.<node>.tool.logs` with lines of a module's log, read from the
//! files the process driver writes. Which module is checked against the
//! newest applied declaration, and its name is a [`Name`], so the only files
//! ever read are `modules/<module>/log` and its rotations `log.<n>`, opened
//! without following a symlink. Where to read and how bytes become lines is
//! decided in `mesh_core::logs`.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use mesh_bus::seam::Bus;
use mesh_core::logs::{
    self, DEFAULT_LINES, LogFileInfo, LogsAnswer, LogsRequest, MAX_READ_BYTES, follow_start,
    split_lines, tail_lines,
};
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_core::tool::{self, ToolReply};

use crate::apply::Applier;
use crate::dial;
use crate::driver::{LOG_FILE, MODULES_DIR, rotated_name};

/// Rotated files looked for past `log`: more than any host keeps.
const MAX_ROTATED: usize = 64;
/// Requests answered at once; more wait their turn.
const CONCURRENT: usize = 4;

/// Serves the node's logs tool until the connection closes.
pub async fn serve(client: &Bus, node: &Name, state_dir: &Path, applier: &Applier) {
    let subject = subjects::host_logs(node);
    let requests = match client.subscribe(&subject).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%subject, reason = %dial::chain(&e), "cannot serve the logs tool");
            return;
        }
    };
    tracing::info!(%subject, "serving the modules' logs");
    let modules_dir = state_dir.join(MODULES_DIR);
    futures::stream::unfold(requests, |mut r| async { r.next().await.map(|m| (m, r)) })
        .for_each_concurrent(CONCURRENT, |request| {
            let modules_dir = modules_dir.clone();
            async move {
                let Ok(request) = request else { return };
                // A request without a reply address cannot be answered.
                if request.reply.is_none() {
                    return;
                }
                let answer = answer(node, &modules_dir, applier, &request.payload).await;
                if let Err(e) = client.respond(&request, &answer.to_json()).await {
                    tracing::warn!(reason = %dial::chain(&e), "answering a logs request");
                }
            }
        })
        .await;
}

async fn answer(node: &Name, modules_dir: &Path, applier: &Applier, payload: &[u8]) -> ToolReply {
    let request = match tool::parse_request(payload)
        .map_err(|e| e.to_string())
        .and_then(|v| logs::parse_request(v).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => return ToolReply::Error(e),
    };
    let here = applier.declared();
    if !here.contains(&request.module) {
        return ToolReply::Error(logs::not_here(&request.module, node, &here));
    }
    let dir = modules_dir.join(request.module.as_str());
    let module = request.module.clone();
    let read = tokio::task::spawn_blocking(move || read(&dir, &request)).await;
    match read {
        Ok(Ok(a)) => match serde_json::to_value(&a) {
            Ok(v) => ToolReply::Ok(v),
            Err(e) => ToolReply::Error(format!("writing the answer: {e}")),
        },
        Ok(Err(e)) => ToolReply::Error(format!(
            "reading the log of module {module} on node {node}: {e}"
        )),
        Err(e) => ToolReply::Error(format!("reading the log of module {module}: {e}")),
    }
}

/// The module's log files, newest first: `log`, `log.1`, ... up to the
/// first missing one (none at all: it has written nothing yet).
fn open_files(dir: &Path) -> io::Result<Vec<(File, LogFileInfo)>> {
    let mut files = Vec::new();
    for n in 0..=MAX_ROTATED {
        let name = if n == 0 {
            LOG_FILE.to_string()
        } else {
            rotated_name(n)
        };
        let file = match open_plain(&dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            break;
        }
        let info = LogFileInfo {
            id: file_id(&meta),
            size: meta.len(),
        };
        files.push((file, info));
    }
    Ok(files)
}

/// What a rotation (a rename) keeps: the inode, and the birth time where
/// the filesystem records one, since a dropped file's inode is soon reused.
fn file_id(meta: &std::fs::Metadata) -> String {
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    match born {
        Some(b) => format!("{}-{}", meta.ino(), b.as_nanos()),
        None => meta.ino().to_string(),
    }
}

/// Read-only, never through a symlink: the log is the driver's own file.
fn open_plain(path: &PathBuf) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn read(dir: &Path, request: &LogsRequest) -> io::Result<LogsAnswer> {
    let files = open_files(dir)?;
    if files.is_empty() {
        // Nothing written yet (or `log` caught between a rotation's rename
        // and its new file): the cursor stays where it was.
        return Ok(LogsAnswer {
            file: request.file.clone().unwrap_or_default(),
            next: request.from.unwrap_or(0),
            ..LogsAnswer::default()
        });
    }
    match request.from {
        None => tail(&files, request.lines.unwrap_or(DEFAULT_LINES)),
        Some(from) => follow(&files, request.file.as_deref(), from),
    }
}

/// The last `n` lines, across rotated files if the live one holds fewer.
fn tail(files: &[(File, LogFileInfo)], n: usize) -> io::Result<LogsAnswer> {
    let (_, live) = &files[0];
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let (mut budget, mut newlines, mut whole) = (MAX_READ_BYTES as u64, 0, true);
    for (file, info) in files.iter().take_while(|_| n > 0) {
        if newlines > n || budget == 0 {
            whole = false;
            break;
        }
        let take = info.size.min(budget);
        let mut chunk = vec![0; take as usize];
        let got = read_at_most(file, &mut chunk, info.size - take)?;
        chunk.truncate(got);
        newlines += chunk.iter().filter(|b| **b == b'\n').count();
        budget -= take;
        if take < info.size {
            whole = false;
        }
        chunks.push(chunk);
    }
    let bytes: Vec<u8> = chunks.into_iter().rev().flatten().collect();
    let (lines, cut) = tail_lines(&bytes, n, whole);
    Ok(LogsAnswer {
        lines,
        file: live.id.clone(),
        next: live.size,
        cut,
        ..LogsAnswer::default()
    })
}

/// What follows the cursor: the rest of its file, then the newer ones, read
/// as one stream (a rotation cuts by size, often inside a line).
fn follow(files: &[(File, LogFileInfo)], file: Option<&str>, from: u64) -> io::Result<LogsAnswer> {
    let infos: Vec<LogFileInfo> = files.iter().map(|(_, i)| i.clone()).collect();
    let start = follow_start(&infos, file, from);
    let mut buf = Vec::new();
    // Where each file's bytes begin in `buf`: (file index, its offset, at).
    let mut segments = Vec::new();
    let mut offset = start.offset;
    for i in (0..=start.file).rev() {
        let at = buf.len();
        if at == MAX_READ_BYTES {
            break;
        }
        buf.resize(MAX_READ_BYTES, 0);
        let got = read_at_most(&files[i].0, &mut buf[at..], offset)?;
        buf.truncate(at + got);
        segments.push((i, offset, at));
        offset = 0;
    }
    // The live log may be mid-line: its last line waits for its newline.
    let (lines, used) = split_lines(&buf, false);
    let &(i, offset, at) = segments
        .iter()
        .rev()
        .find(|(_, _, at)| *at <= used)
        .expect("the first segment begins at 0");
    Ok(LogsAnswer {
        lines,
        file: files[i].1.id.clone(),
        next: offset + (used - at) as u64,
        more: i > 0 || buf.len() == MAX_READ_BYTES,
        rotated: start.rotated,
        dropped: start.dropped,
        cut: false,
    })
}

/// Reads from `offset` until `buf` is full or the file ends.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(v: serde_json::Value) -> LogsRequest {
        logs::parse_request(v).unwrap()
    }

    #[test]
    fn tails_across_a_rotation_and_follows_the_rotated_file_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = crate::driver::LogFile::open(dir.path(), 20, 2).unwrap();
        log.write(b"one\ntwo\nthree\n").unwrap();
        let ask = |v: serde_json::Value| read(dir.path(), &request(v)).unwrap();
        let first = ask(serde_json::json!({"module": "m", "lines": 2}));
        assert_eq!(first.lines, ["two", "three"]);
        assert_eq!(first.next, 14);
        // Past 20 bytes `log` becomes `log.1` inside "five", and a new
        // `log` starts: the follower reads both, the line whole.
        log.write(b"four\nfive\nsi").unwrap();
        let a = ask(serde_json::json!({"module": "m", "file": first.file, "from": first.next}));
        assert_eq!(a.lines, ["four", "five"]);
        assert!(a.rotated && !a.dropped && !a.more, "{a:?}");
        assert_ne!(a.file, first.file, "the cursor moved into the new log");
        assert_eq!(a.next, 4, "\"si\" waits for its newline");
        log.write(b"x\n").unwrap();
        let b = ask(serde_json::json!({"module": "m", "file": a.file, "from": a.next}));
        assert_eq!(b.lines, ["six"]);
        assert!(!b.rotated);
        let all = ask(serde_json::json!({"module": "m", "lines": 9}));
        assert_eq!(all.lines, ["one", "two", "three", "four", "five", "six"]);
        // Rotated three times more: the cursor's file is gone, and that is said.
        log.write(&[b'z'; 80]).unwrap();
        let c = ask(serde_json::json!({"module": "m", "file": b.file, "from": b.next}));
        assert!(c.rotated && c.dropped, "{c:?}");
    }

    #[test]
    fn a_symlinked_log_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "s\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join(LOG_FILE)).unwrap();
        let e = read(dir.path(), &request(serde_json::json!({"module": "m"}))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    }

    #[test]
    fn no_log_yet_is_an_empty_answer_keeping_the_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let a = read(
            dir.path(),
            &request(serde_json::json!({"module": "m", "file": "7", "from": 3})),
        )
        .unwrap();
        assert_eq!((a.lines.len(), a.file.as_str(), a.next), (0, "7", 3));
    }
}
