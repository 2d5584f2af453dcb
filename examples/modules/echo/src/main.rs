//! mesh-echo: the smallest real mesh module.
//!
//! Listens on TCP (`--listen`, default `127.0.0.1:0`: any free port), writes
//! the bound address to `echo.addr` in its working directory, connects to the
//! bus from its environment ([`mesh_sdk::Module::connect`]'s contract), emits `started` (`{"addr": …}`),
//! then answers every line a client sends with `echo: <line>` and emits
//! `heard` (`{"line": …}`) for it. The answer follows the stored event, so a
//! client that got its echo can find the event in `EVENTS`.
//!
//! Logs one plain line per event to stderr; an incomplete environment or a
//! bus that refuses it ends the process non-zero with the reason as the last
//! line (what a host reports). SIGTERM ends it with 0.

use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use mesh_sdk::{Module, ModuleEnv, chain};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};

/// Where the bound address is written, relative to the working directory
/// (the host runs a module in its own directory).
const ADDR_FILE: &str = "echo.addr";
/// Longest line answered; a client sending more is told so and dropped,
/// rather than growing this process without bound.
const MAX_LINE: usize = 64 * 1024;
const DEFAULT_LISTEN: &str = "127.0.0.1:0";

type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let listen = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("usage: mesh-echo [--listen ADDR]   (default {DEFAULT_LISTEN})");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("mesh-echo: {e}; usage: mesh-echo [--listen ADDR]");
            return ExitCode::from(2);
        }
    };
    // Installed before anything slow (the bus connect), so a stop asked for
    // at any point is honoured promptly.
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mesh-echo: cannot listen for SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        r = run(listen) => match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mesh-echo: {}", chain(e.as_ref()));
                ExitCode::FAILURE
            }
        },
        _ = term.recv() => {
            eprintln!("mesh-echo: SIGTERM, stopping");
            ExitCode::SUCCESS
        }
    }
}

/// `Ok(None)`: help was asked for.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<SocketAddr>, String> {
    let mut listen = DEFAULT_LISTEN.to_string();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                listen = args
                    .next()
                    .ok_or_else(|| "--listen needs an address".to_string())?
            }
            other => match other.strip_prefix("--listen=") {
                Some(v) => listen = v.to_string(),
                None => return Err(format!("unknown argument {other:?}")),
            },
        }
    }
    listen
        .parse()
        .map(Some)
        .map_err(|_| format!("--listen {listen:?} is not an ip:port address"))
}

async fn run(listen: SocketAddr) -> Result<(), BoxError> {
    // Read before anything is advertised: an address file naming a module
    // that cannot start would send clients to a port about to close.
    let env = ModuleEnv::from_env()?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    write_atomically(Path::new(ADDR_FILE), &format!("{addr}\n"))
        .map_err(|e| format!("cannot write {ADDR_FILE}: {e}"))?;
    eprintln!("mesh-echo: listening on {addr} (written to {ADDR_FILE})");

    let module = Arc::new(Module::connect_with(&env).await?);
    eprintln!(
        "mesh-echo: connected to the bus as module {} on node {}",
        module.module(),
        module.node()
    );
    module
        .emit("started", serde_json::json!({ "addr": addr.to_string() }))
        .await?;
    eprintln!("mesh-echo: emitted started");

    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Per-connection trouble (too many open files, a reset
                // before accept): the listener itself is still good.
                eprintln!("mesh-echo: accepting a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let module = module.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(stream, peer, &module).await {
                eprintln!("mesh-echo: connection from {peer}: {e}");
            }
        });
    }
}

async fn serve(stream: TcpStream, peer: SocketAddr, module: &Module) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await?;
        if n == 0 {
            return Ok(());
        }
        if buf.len() > MAX_LINE {
            write
                .write_all(format!("error: a line may hold at most {MAX_LINE} bytes\n").as_bytes())
                .await?;
            return Ok(());
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        match module
            .emit("heard", serde_json::json!({ "line": line }))
            .await
        {
            Ok(()) => eprintln!(
                "mesh-echo: emitted heard ({} bytes from {peer})",
                line.len()
            ),
            // Still answered: the client is owed its echo whatever the bus says.
            Err(e) => eprintln!("mesh-echo: {}", chain(&e)),
        }
        write
            .write_all(format!("echo: {line}\n").as_bytes())
            .await?;
    }
}

/// Temp file in the same directory, then rename: a reader sees no file or
/// the whole line, never half of it.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<Option<SocketAddr>, String> {
        parse_args(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        assert_eq!(args(&[]).unwrap(), Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(
            args(&["--listen", "0.0.0.0:7"]).unwrap(),
            Some("0.0.0.0:7".parse().unwrap())
        );
        assert_eq!(
            args(&["--listen=127.0.0.1:9"]).unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(args(&["--help"]).unwrap(), None);
        assert!(
            args(&["--listen"])
                .unwrap_err()
                .contains("needs an address")
        );
        assert!(args(&["--listen", "x"]).unwrap_err().contains("\"x\""));
        assert!(args(&["--port"]).unwrap_err().contains("--port"));
    }

    #[test]
    fn the_address_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ADDR_FILE);
        write_atomically(&path, "127.0.0.1:1\n").unwrap();
        write_atomically(&path, "127.0.0.1:2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1:2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
