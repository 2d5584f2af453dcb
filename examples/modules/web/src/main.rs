//! mesh-web: an example HTTP service with a health endpoint — the module
//! `mesh deploy` is shown and tested with. `GET /healthz` answers 200
//! (`--health ok`) or 503 (`--health fail`); `GET /` answers the version.
//! `--exit N` exits at once with status N: a version that crash-loops.
//!
//! ```sh
//! mesh-web --listen 127.0.0.1:8080 --version v2 [--health ok|fail] [--exit N]
//! ```

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;

struct Options {
    listen: String,
    version: String,
    healthy: bool,
    exit: Option<u8>,
}

const USAGE: &str = "usage: mesh-web --listen HOST:PORT --version V [--health ok|fail] [--exit N]";

fn options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        listen: String::new(),
        version: "unversioned".into(),
        healthy: true,
        exit: None,
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value; {USAGE}"));
        match a.as_str() {
            "--listen" => o.listen = value()?,
            "--version" => o.version = value()?,
            "--health" => {
                o.healthy = match value()?.as_str() {
                    "ok" => true,
                    "fail" => false,
                    other => return Err(format!("--health {other}: write ok or fail")),
                }
            }
            "--exit" => {
                let v = value()?;
                o.exit = Some(
                    v.parse()
                        .map_err(|_| format!("--exit {v}: a status 0-255"))?,
                );
            }
            other => return Err(format!("unknown argument {other}; {USAGE}")),
        }
    }
    if o.listen.is_empty() && o.exit.is_none() {
        return Err(format!("--listen is required; {USAGE}"));
    }
    Ok(o)
}

fn answer(mut s: TcpStream, o: &Options) {
    let mut line = String::new();
    if BufReader::new(&s).read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path {
        "/healthz" if o.healthy => ("200 OK", format!("ok {}\n", o.version)),
        "/healthz" => (
            "503 Service Unavailable",
            format!("{} is unhealthy (started with --health fail)\n", o.version),
        ),
        _ => ("200 OK", format!("mesh-web {}\n", o.version)),
    };
    let _ = write!(
        s,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

fn main() -> ExitCode {
    let o = match options(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mesh-web: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(code) = o.exit {
        eprintln!(
            "mesh-web {}: exiting at once with status {code} (--exit)",
            o.version
        );
        return ExitCode::from(code);
    }
    let listener = match TcpListener::bind(&o.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mesh-web: cannot listen on {}: {e}", o.listen);
            return ExitCode::FAILURE;
        }
    };
    println!("mesh-web {} listening on {}", o.version, o.listen);
    let o = std::sync::Arc::new(o);
    for s in listener.incoming().flatten() {
        let o = o.clone();
        std::thread::spawn(move || answer(s, &o));
    }
    ExitCode::SUCCESS
}
