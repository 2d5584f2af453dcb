use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use super::*;

fn seen(since: Option<Duration>, failures: u32, output: Option<&str>, now: Instant) -> Seen {
    Seen {
        passing_since: since.map(|d| now - d),
        failures,
        last_output: output.map(str::to_string),
        pid: Some(1),
    }
}

#[test]
fn healthy_only_after_passing_for_healthy_after_and_unhealthy_after_three_failures() {
    let now = Instant::now() + Duration::from_secs(60);
    let after = Duration::from_secs(2);
    assert_eq!(
        verdict(&seen(None, 0, None, now), after, now),
        ModuleHealth::Starting
    );
    let just_short = seen(Some(Duration::from_millis(1999)), 0, None, now);
    assert_eq!(verdict(&just_short, after, now), ModuleHealth::Starting);
    let exactly = seen(Some(after), 0, None, now);
    assert_eq!(
        verdict(&exactly, after, now),
        ModuleHealth::Healthy { for_ms: 2000 }
    );
    let two = seen(None, 2, Some("answered 503"), now);
    assert_eq!(verdict(&two, after, now), ModuleHealth::Starting);
    let three = seen(None, 3, Some("answered 503"), now);
    assert_eq!(
        verdict(&three, after, now),
        ModuleHealth::Unhealthy {
            reason: "answered 503".into()
        }
    );
}

#[test]
fn a_reason_keeps_its_tail_on_a_character_boundary() {
    let long = format!("{}é{}", "a".repeat(3000), "end");
    let t = tail(&long);
    assert!(t.len() <= MAX_HEALTH_REASON, "{}", t.len());
    assert!(t.ends_with("end"));
    let odd = format!("é{}", "b".repeat(MAX_HEALTH_REASON - 1));
    assert_eq!(tail(&odd), "b".repeat(MAX_HEALTH_REASON - 1));
    assert_eq!(tail("  short \n"), "short");
}

/// An HTTP server on loopback that answers each connection with `answer`.
async fn serve(answer: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
    addr.to_string()
}

#[tokio::test]
async fn an_http_check_passes_on_2xx_and_quotes_any_other_answer() {
    let ok = serve("HTTP/1.0 204 No Content\r\n\r\n").await;
    let probe = Probe::Http {
        url: format!("http://{ok}/healthz"),
    };
    assert_eq!(probe.run(Duration::from_secs(2)).await, Ok(()));
    let bad = serve("HTTP/1.1 503 Service Unavailable\r\n\r\ndatabase unreachable\n").await;
    let url = format!("http://{bad}/healthz");
    let e = Probe::Http { url: url.clone() }
        .run(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert_eq!(e, format!("GET {url} answered 503: database unreachable"));
    let junk = serve("SSH-2.0-x\r\n").await;
    let e = Probe::Http {
        url: format!("http://{junk}/"),
    }
    .run(Duration::from_secs(2))
    .await
    .unwrap_err();
    assert!(e.ends_with("the answer is not HTTP"), "{e}");
}

#[tokio::test]
async fn a_tcp_check_passes_on_a_connection_and_a_silent_server_times_out() {
    let ok = serve("").await;
    assert_eq!(
        Probe::Tcp {
            address: ok.clone()
        }
        .run(Duration::from_secs(2))
        .await,
        Ok(())
    );
    // A port nobody listens on: refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let e = Probe::Tcp {
        address: closed.clone(),
    }
    .run(Duration::from_secs(2))
    .await
    .unwrap_err();
    assert!(e.starts_with(&format!("tcp {closed}: ")), "{e}");
    // A server that accepts and never answers an HTTP check: the timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap();
    let e = Probe::Http {
        url: format!("http://{silent}/"),
    }
    .run(Duration::from_millis(300))
    .await
    .unwrap_err();
    assert_eq!(
        e,
        format!("GET http://{silent}/ gave no answer within 300ms")
    );
    drop(listener);
}

#[tokio::test]
async fn an_exec_check_runs_in_the_modules_environment_and_quotes_its_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ready"), "").unwrap();
    let within = ExecIn {
        env: BTreeMap::from([
            ("PATH".to_string(), std::env::var("PATH").unwrap()),
            ("WANT".to_string(), "ready".to_string()),
        ]),
        workdir: dir.path().to_path_buf(),
    };
    let sh = |script: &str| Probe::Exec {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        within: within.clone(),
    };
    assert_eq!(
        sh("test -f \"$WANT\"").run(Duration::from_secs(5)).await,
        Ok(())
    );
    let e = sh("echo not ready; echo >&2 still loading; exit 3")
        .run(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        e.contains("exited with status 3: not ready\nstill loading"),
        "{e}"
    );
    let e = Probe::Exec {
        argv: vec!["/nonexistent/check".into()],
        within: within.clone(),
    }
    .run(Duration::from_secs(5))
    .await
    .unwrap_err();
    assert!(e.starts_with("`/nonexistent/check`: "), "{e}");
    let e = sh("sleep 5")
        .run(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(e.ends_with("gave no answer within 200ms"), "{e}");
}

#[tokio::test]
async fn an_sdk_check_passes_once_the_module_wrote_its_ready_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(crate::driver::READY_FILE);
    let probe = Probe::Ready { file: file.clone() };
    let e = probe.run(Duration::from_secs(1)).await.unwrap_err();
    assert!(e.contains("has not said ready since it started"), "{e}");
    std::fs::write(&file, "").unwrap();
    assert_eq!(probe.run(Duration::from_secs(1)).await, Ok(()));
}
