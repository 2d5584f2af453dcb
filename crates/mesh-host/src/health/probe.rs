//! One run of a check: an HTTP `GET` answered 2xx, a TCP connection
//! accepted, or a program that exits 0 — each within the timeout. A
//! failure is said as an operator reads it in `mesh modules`: what was
//! asked, and what answered.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::ExecIn;

/// A check as the host runs it, placeholders filled.
#[derive(Debug, Clone)]
pub enum Probe {
    /// No `[health]`: passing whenever the module runs.
    Running,
    Http {
        url: String,
    },
    Tcp {
        address: String,
    },
    Exec {
        argv: Vec<String>,
        within: ExecIn,
    },
    /// `sdk = true`: the module wrote this file (`ready` of mesh-sdk, at
    /// `MESH_READY_FILE`); the driver removes it before each start.
    Ready {
        file: std::path::PathBuf,
    },
}

/// Bytes of an answer or of a program's output read, at most.
const READ_AT_MOST: usize = 16 * 1024;

impl Probe {
    /// Ok when the check passes; its output otherwise.
    pub async fn run(&self, timeout: Duration) -> Result<(), String> {
        let run = async {
            match self {
                Probe::Running => Ok(()),
                Probe::Http { url } => http(url).await,
                Probe::Tcp { address } => tokio::net::TcpStream::connect(address.as_str())
                    .await
                    .map(drop)
                    .map_err(|e| format!("tcp {address}: {e}")),
                Probe::Exec { argv, within } => exec(argv, within).await,
                Probe::Ready { file } => match tokio::fs::try_exists(file).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(
                        "the module has not said ready since it started (`ready` of mesh-sdk writes MESH_READY_FILE)"
                            .into(),
                    ),
                    Err(e) => Err(format!("reading {}: {e}", file.display())),
                },
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "{} gave no answer within {}",
                self.what(),
                mesh_core::duration::show_span(
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
                )
            )),
        }
    }

    fn what(&self) -> String {
        match self {
            Probe::Running => "the process".into(),
            Probe::Http { url } => format!("GET {url}"),
            Probe::Tcp { address } => format!("tcp {address}"),
            Probe::Exec { argv, .. } => format!("`{}`", argv.join(" ")),
            Probe::Ready { file } => format!("the ready file {}", file.display()),
        }
    }
}

/// `GET` over HTTP/1.0 (one exchange, ended by the server's close).
async fn http(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("GET {url}: not an http:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let address = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nUser-Agent: mesh-host\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while answer.len() < READ_AT_MOST {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if answer.is_empty() => return Err(format!("GET {url}: {e}")),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok());
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    match status {
        Some(200..=299) => Ok(()),
        Some(code) => Err(format!("GET {url} answered {code}: {body}")),
        None => Err(format!("GET {url}: the answer is not HTTP")),
    }
}

/// The program with the module's environment and directory; its output,
/// both streams, is the failure's reason.
async fn exec(argv: &[String], within: &ExecIn) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("the check's command is empty")?;
    let out = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(&within.env)
        .current_dir(&within.workdir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("`{}`: {e}", argv.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = out.stdout;
    output.extend_from_slice(&out.stderr);
    output.truncate(READ_AT_MOST);
    let status = crate::driver::ExitInfo::from_status(out.status);
    Err(format!(
        "`{}` {status}: {}",
        argv.join(" "),
        String::from_utf8_lossy(&output).trim()
    ))
}
