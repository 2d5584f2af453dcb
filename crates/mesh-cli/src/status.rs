//! `mesh status`: the mesh on one screen — the controller (asked over its
//! HTTP API), the broker and the last composition as it says, nodes and
//! modules by state from the store, and what needs action, each with its
//! next step.
//!
//! The controller is asked where it says it serves (`controller/http.addr`
//! in the mesh's directory) unless `--http` names an address; whatever
//! answers must name this mesh's controller key, or nothing it says is
//! shown beside this mesh's records.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use mesh_state::views::{self, ControllerView, StatusView};

use crate::authority::open_existing_store;
use crate::output;
use crate::output::ListFormat;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The controller's HTTP address (`mesh controller --http`) [default:
    /// the address the mesh's controller wrote to `controller/http.addr` in
    /// its directory, else 127.0.0.1:7420].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub output: ListFormat,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// How long the controller has to answer: it is on this machine or near,
/// and a status that hangs is worse than one that says "not reachable".
const ASK_WITHIN: Duration = Duration::from_secs(3);

/// `GET path` on `addr`: the status code and body. HTTP/1.0 keeps it to
/// one exchange that the server ends by closing.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    http_get_within(addr, path, ASK_WITHIN)
}

/// [`http_get`], waiting up to `within` for the answer.
pub fn http_get_within(addr: &str, path: &str, within: Duration) -> std::io::Result<(u16, String)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let sock: SocketAddr = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| bad("no address"))?;
    let mut s = TcpStream::connect_timeout(&sock, ASK_WITHIN)?;
    s.set_read_timeout(Some(within))?;
    s.set_write_timeout(Some(ASK_WITHIN))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.take(16 << 20).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    Ok((code, body.to_string()))
}

/// The controller as it says of itself, or unreachable; one that names
/// another key than `ours` is another mesh's, and only that is kept.
fn ask_controller(addr: &str, ours: Option<&str>) -> ControllerView {
    let url = Some(format!("http://{addr}"));
    let said = http_get(addr, "/api/status")
        .ok()
        .filter(|(code, _)| *code == 200)
        .and_then(|(_, body)| serde_json::from_str::<StatusView>(&body).ok());
    match said {
        Some(s) if ours.is_some() && s.controller.controller_key.as_deref() == ours => {
            ControllerView {
                url,
                other_mesh: None,
                ..s.controller
            }
        }
        Some(s) => ControllerView {
            url,
            other_mesh: Some(
                s.controller
                    .controller_key
                    .unwrap_or_else(|| "none given".into()),
            ),
            ..ControllerView::default()
        },
        None => ControllerView {
            url,
            ..ControllerView::default()
        },
    }
}

/// This mesh's controller key: as its store records it (the controller
/// refuses a store recording another), else as its genesis holds it.
async fn our_key(store: &mesh_store::Store, dir: Option<&Path>) -> anyhow::Result<Option<String>> {
    use mesh_core::users_file::UserCredential;
    let recorded = store
        .credential(mesh_store::principal::CONTROLLER)
        .await?
        .and_then(|c| match c.credential {
            UserCredential::NKey(k) => Some(k),
            _ => None,
        });
    Ok(recorded.or_else(|| {
        dir.and_then(|d| mesh_controller::Genesis::open(d).ok())
            .map(|g| g.controller_nkey)
    }))
}

pub fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    if let Some(ctx) = args.mesh.remote()? {
        // The active controller's own view: it answered, so it is reached.
        let asked = format!("over the bus, context {}", ctx.name);
        let mut data: mesh_core::operation::wire::StatusData<StatusView> = crate::block_on(
            crate::remote::read(ctx, mesh_core::operation::Operation::Status),
        )??;
        data.status.controller.url = Some(asked);
        match args.output {
            ListFormat::Json => crate::output::print_json(&data.status)?,
            ListFormat::Text => print_text(&data.status)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    // With only --store given there may be no directory: the default
    // address, still checked against the store's key.
    let dir = args.mesh.find().ok();
    let url = args.mesh.store_url()?;
    let status = crate::block_on(async {
        let store = open_existing_store(&url).await?;
        let read = async {
            let controller = find_controller(&store, dir.as_deref(), args.http.as_deref()).await?;
            let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
            let mut status = views::status(&store, now, controller).await?;
            status.servers = servers(dir.as_deref());
            anyhow::Ok(status)
        }
        .await;
        store.close().await;
        read
    })??;
    match args.output {
        ListFormat::Json => crate::output::print_json(&status)?,
        ListFormat::Text => print_text(&status)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// This mesh's controller as it says of itself: the active one where its
/// lease says it serves, then where a controller of this directory wrote
/// it serves (a standby's answer still names the active one), then the
/// default; `http` alone when given. None answering as this mesh's: what
/// the first one said.
pub(crate) async fn find_controller(
    store: &mesh_store::Store,
    dir: Option<&Path>,
    http: Option<&str>,
) -> anyhow::Result<ControllerView> {
    let ours = our_key(store, dir).await?;
    let mut addrs = Vec::new();
    match http {
        Some(a) => addrs.push(a.to_string()),
        None => {
            let lease = store.lease_record().await?;
            addrs.extend(lease.and_then(|l| l.http));
            addrs.extend(dir.and_then(mesh_controller::http::served_at));
            addrs.push(mesh_controller::http::DEFAULT_ADDR.to_string());
            addrs.dedup();
        }
    }
    let mut first = None;
    for a in &addrs {
        let v = ask_controller(a, ours.as_deref());
        if v.reachable && v.other_mesh.is_none() {
            return Ok(v);
        }
        first.get_or_insert(v);
    }
    Ok(first.unwrap_or_default())
}

/// Each server of a clustered bus and whether it listens on its client
/// port; none for a single server.
fn servers(dir: Option<&Path>) -> Vec<views::ServerView> {
    let Some(genesis) = dir.and_then(|d| mesh_controller::Genesis::open(d).ok()) else {
        return Vec::new();
    };
    if genesis.replicas < 2 {
        return Vec::new();
    }
    genesis
        .local_urls()
        .into_iter()
        .map(|url| {
            let listening = url
                .split_once("://")
                .and_then(|(_, a)| a.to_socket_addrs().ok()?.next())
                .is_some_and(|a| {
                    TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok()
                });
            views::ServerView { url, listening }
        })
        .collect()
}

fn counts(m: &std::collections::BTreeMap<String, u64>, none: &str) -> String {
    if m.is_empty() {
        return none.into();
    }
    m.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn yes_no(v: Option<bool>, yes: &str, no: &str) -> String {
    match v {
        Some(true) => yes.into(),
        Some(false) => no.into(),
        None => "unknown (the controller does not answer)".into(),
    }
}

fn print_text(s: &StatusView) -> anyhow::Result<()> {
    let c = &s.controller;
    let at = c.url.as_deref().unwrap_or("");
    let mut out = output::Stdout::lock();
    let controller = match (c.reachable, c.ready) {
        _ if c.other_mesh.is_some() => format!(
            "not reachable: {at} is another mesh's controller (controller key {})",
            c.other_mesh.as_deref().unwrap_or_default()
        ),
        (false, _) => format!("not reachable at {at}"),
        (true, true) => format!("ready ({at})"),
        (true, false) => format!(
            "not ready: {} ({at})",
            c.reason.as_deref().unwrap_or("no reason given")
        ),
    };
    out.line(format_args!("controller   {controller}"))?;
    if let Some(l) = &s.lease {
        let now = mesh_store::now_ms();
        let since = std::time::Duration::from_millis(u64::try_from(now - l.since).unwrap_or(0));
        let since = crate::node::humane(since);
        match &l.holder {
            Some(holder) => out.line(format_args!(
                "lease        epoch {}: {holder}{} for {since}",
                l.epoch,
                l.http
                    .as_deref()
                    .map(|h| format!(" at http://{h}"))
                    .unwrap_or_default(),
            ))?,
            None => out.line(format_args!(
                "lease        epoch {}: held by no controller (released by the last {since} ago)",
                l.epoch
            ))?,
        }
    }
    out.line(format_args!(
        "broker       {}",
        yes_no(c.broker_connected, "connected", "not connected")
    ))?;
    if !s.servers.is_empty() {
        let each: Vec<String> = s
            .servers
            .iter()
            .map(|v| format!("{} {}", v.url, if v.listening { "up" } else { "down" }))
            .collect();
        out.line(format_args!("servers      {}", each.join(", ")))?;
    }
    let composition = match (c.composition_live, c.composition_generation) {
        (Some(true), Some(g)) => format!("live (generation {g})"),
        (Some(false), Some(g)) => format!("not live (generation {g})"),
        (Some(_), None) => "none yet".into(),
        (None, _) => yes_no(None, "", ""),
    };
    out.line(format_args!("composition  {composition}"))?;
    out.line(format_args!(
        "store window {}",
        yes_no(
            c.store_window_open,
            "open: reports wait in CONTROL",
            "closed"
        )
    ))?;
    out.line(format_args!("nodes        {}", counts(&s.nodes, "none")))?;
    out.line(format_args!(
        "modules      {}",
        counts(&s.modules, "none assigned")
    ))?;
    if s.needs_action.is_empty() {
        out.line("nothing needs action")?;
    } else {
        out.line("needs action:")?;
        for a in &s.needs_action {
            out.line(format_args!("  {}: {}", a.what, a.next))?;
        }
    }
    out.flush()?;
    Ok(())
}
