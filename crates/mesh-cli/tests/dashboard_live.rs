//! The dashboard in a real headless Chromium: the page of a live mesh,
//! rendered by its own script from the JSON API, shows the mesh's nodes and
//! modules; a screenshot is written under the target directory.

#[path = "join_live/harness.rs"]
mod harness;
#[path = "http_live/serving.rs"]
mod serving;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::wait_until;
use mesh_cli::status::http_get;

const LONG: Duration = Duration::from_secs(60);

/// Runs chromium headless on `url` with `extra`, killed past a bound.
fn chromium(profile: &Path, url: &str, extra: &[&str]) -> Output {
    let child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium on PATH (scripts/setup installs Debian's chromium package)");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    loop {
        if let Ok(out) = rx.try_recv() {
            return out.unwrap();
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the child this test spawned.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_of_a_live_mesh_shows_its_nodes_and_modules() {
    let (mesh, _host, addr) = serving::with_host("dash-node").await;
    mesh.assign("echo", "dash-node", true);
    assert!(
        wait_until(LONG, || http_get(&addr, "/api/modules")
            .is_ok_and(|(_, b)| b.contains("\"healthy\""))),
        "echo never healthy"
    );

    let url = format!("http://{addr}/");
    let profile = mesh.tmp.path().join("chromium");
    let out = chromium(&profile, &url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Cells the script made from the JSON API: the page works, not only loads.
    for cell in [
        "<td>dash-node</td>",
        "<td>echo</td>",
        "<td class=\"running\">running</td>",
        // echo has no [health]: healthy once running its default window.
        "<td class=\"healthy\">healthy</td>",
        "<td>git-server</td>",
    ] {
        assert!(
            dom.contains(cell),
            "{cell} not in the rendered page:\n{dom}"
        );
    }
    assert!(dom.contains("<h2>Catalogue</h2>"), "{dom}");
    assert!(dom.contains("<h2>Deployments</h2>"), "{dom}");
    // The audit trail: the assignment made above, by the local user.
    assert!(dom.contains("<h2>Audit trail</h2>"), "{dom}");
    assert!(
        dom.contains("<td>assign</td>")
            && dom.contains(r#"{"module":"echo","node":"dash-node"}"#)
            && dom.contains("<td>local "),
        "the assignment is not in the trail:\n{dom}"
    );
    // The picture beside it is the catalogue graph the CLI draws.
    assert!(dom.contains("src=\"/graph.svg\""), "{dom}");
    let (status, svg) = http_get(&addr, "/graph.svg").unwrap();
    assert_eq!(status, 200, "{svg}");
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
    assert!(svg.contains("git-server") && svg.contains("echo"), "{svg}");
    assert!(dom.contains("class=\"badge ok\">ready<"), "{dom}");

    // Something needs action (a module left out: no holder of git): the
    // header is no longer green, and says how many.
    mesh.assign("code-search", "dash-node", true);
    assert!(
        wait_until(LONG, || http_get(&addr, "/api/status")
            .is_ok_and(|(_, b)| b.contains("code-search"))),
        "code-search never needs action"
    );
    let out = chromium(&profile, &url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("class=\"badge warn\">ready; 1 thing needs action<"),
        "{dom}"
    );

    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        &profile,
        &url,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1100",
            "--hide-scrollbars",
        ],
    );
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    // A blank 1280x1100 page compresses to a few kB; tables of text do not.
    assert!(png.len() > 20_000, "screenshot of {} bytes", png.len());
    eprintln!("dashboard screenshot: {}", shot.display());
}
