//! The table `mesh-bench` prints: each figure beside its target, and
//! whether it is met.

use crate::*;

/// The table: each figure, its target, and whether it is met.
pub(super) fn table(r: &Results) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let gib = r.machine.memory_bytes as f64 / (1u64 << 30) as f64;
    let mb = |b: u64| b as f64 / 1e6;
    let _ = writeln!(
        t,
        "mesh-bench: {} simulated hosts, store {:?}",
        thousands(r.hosts),
        r.store
    );
    let _ = writeln!(
        t,
        "machine:  {} cores ({}), {gib:.1} GiB, {}",
        r.machine.cores, r.machine.cpu, r.machine.kernel
    );
    let _ = writeln!(
        t,
        "versions: mesh {}, nats-server {}, {}{}",
        r.versions.mesh,
        r.versions.nats_server,
        r.versions.store,
        r.versions
            .ingestion
            .iter()
            .filter(|v| **v != r.versions.store)
            .map(|v| format!(", {v}"))
            .collect::<String>()
    );
    let _ = writeln!(
        t,
        "load:     {} at the start (1, 5, 15 min; other work on the machine shows here)",
        r.machine.load_at_start
    );
    let _ = writeln!(t, "command:  {}", r.command);
    let _ = writeln!(t, "targets are the issue's, stated for 10,000 hosts\n");
    let mut rows: Vec<(String, String, String, Option<bool>)> = Vec::new();
    let mut row = |f: &str, v: String, target: &str, met: Option<bool>| {
        rows.push((f.to_string(), v, target.to_string(), met))
    };
    let s = |ms: f64| {
        if ms >= 1000.0 {
            format!("{:.2} s", ms / 1000.0)
        } else {
            format!("{ms:.0} ms")
        }
    };
    row(
        "setup: hosts connected and bound",
        format!("{} ({} not)", s(r.setup.bound_ms), r.setup.not_bound),
        "",
        None,
    );
    let f = &r.fan_out;
    row(
        "fan-out: reports recorded",
        format!(
            "{} of {}, {} twice",
            thousands(f.recorded),
            thousands(f.nodes),
            f.twice
        ),
        "all, none twice",
        Some(f.missing == 0 && f.twice == 0),
    );
    row(
        "fan-out: declared, per node p50/p99/max",
        format!(
            "{} / {} / {}",
            s(f.declared.p50_ms),
            s(f.declared.p99_ms),
            s(f.declared.max_ms)
        ),
        "",
        None,
    );
    row(
        "fan-out: reported, per node p50/p99/max",
        format!(
            "{} / {} / {}",
            s(f.reported.p50_ms),
            s(f.reported.p99_ms),
            s(f.reported.max_ms)
        ),
        "",
        None,
    );
    row(
        "fan-out: all reports recorded",
        if f.missing == 0 {
            s(f.reported.max_ms)
        } else {
            format!(
                "not within {} ({} missing)",
                s(f.waited_ms),
                thousands(f.missing)
            )
        },
        "< 10 s",
        Some(f.missing == 0 && f.reported.max_ms < 10_000.0),
    );
    row(
        "fan-out: rate",
        format!(
            "{:.0}/s, {:.0}/s per core",
            f.reported.per_second, f.per_core
        ),
        ">= 1,000/s per core",
        Some(f.per_core >= 1000.0),
    );
    row(
        "fan-out: broker reloads",
        f.reloads.to_string(),
        "1",
        Some(f.reloads == 1),
    );
    let u = &r.update;
    row(
        "update adding no principal: recorded",
        format!(
            "{} of {}, {} twice",
            thousands(u.recorded),
            thousands(u.nodes),
            u.twice
        ),
        "all, none twice",
        Some(u.missing == 0 && u.twice == 0),
    );
    row(
        "update: all reports recorded; reloads",
        if u.missing == 0 {
            format!("{}; {}", s(u.reported.max_ms), u.reloads)
        } else {
            format!(
                "not within {} ({} missing); {}",
                s(u.waited_ms),
                thousands(u.missing),
                u.reloads
            )
        },
        "< 3 s; 0",
        Some(u.missing == 0 && u.reported.max_ms < 3_000.0 && u.reloads == 0),
    );
    match &r.raw {
        Some(raw) => {
            row(
                "raw JetStream: acked, p50/p99/max",
                format!(
                    "{} / {} / {} ({} conns)",
                    s(raw.acked.p50_ms),
                    s(raw.acked.p99_ms),
                    s(raw.acked.max_ms),
                    raw.connections
                ),
                "",
                None,
            );
            row(
                "raw JetStream: rate",
                format!("{:.0}/s", raw.acked.per_second),
                "",
                None,
            );
        }
        None => row("raw JetStream", "not run".into(), "", Some(false)),
    }
    if let Some(ratio) = r.ratio {
        row(
            "fan-out rate / raw JetStream's",
            format!("{:.1}%", ratio * 100.0),
            ">= 50%",
            Some(ratio >= 0.5),
        );
    }
    let st = &r.storm;
    row(
        "reconnect storm: all bound again",
        format!(
            "{} after listening, {} after stop ({} not)",
            s(st.bound_ms),
            s(st.bound_from_stop_ms),
            st.not_bound
        ),
        "< 15 s",
        Some(st.not_bound == 0 && st.bound_from_stop_ms < 15_000.0),
    );
    row(
        "reconnect storm: all reported again",
        format!("{} ({} not)", s(st.reported.max_ms), st.not_reported),
        "",
        None,
    );
    match &r.artifact {
        Some(a) => {
            let fetched = |t: &artifact::Transfer| {
                format!(
                    "{} of {} checked, {:.0} MB/s; p50 {}, max {}",
                    t.checked,
                    t.fetches,
                    t.mb_per_s,
                    s(t.done.p50_ms),
                    s(t.done.max_ms)
                )
            };
            let mib = a.bytes as f64 / (1u64 << 20) as f64;
            row(
                &format!("artifact {mib:.0} MiB x {}: reader", a.hosts),
                fetched(&a.reader),
                "all checked",
                Some(a.reader.failed == 0 && a.reader.checked == a.hosts),
            );
            row(
                "artifact: object store's own gets",
                fetched(&a.object_store),
                "",
                None,
            );
            match a.ratio {
                Some(ratio) => row(
                    "artifact reader rate / object store's",
                    format!("{:.1}%", ratio * 100.0),
                    ">= 50%",
                    Some(ratio >= 0.5),
                ),
                None => row(
                    "artifact reader rate",
                    "no rate".into(),
                    ">= 50%",
                    Some(false),
                ),
            }
            row(
                "artifact: declared; put",
                format!(
                    "all declared in {} ({} not); put in {}",
                    s(a.declared_ms),
                    a.not_declared,
                    s(a.put_ms)
                ),
                "",
                None,
            );
            let v = &a.second;
            row(
                "artifact: reads not declared, refused",
                format!(
                    "v2 before the move {} of {}, v1 after {} of {}",
                    v.refused_before, a.hosts, v.first_refused_after, a.hosts
                ),
                "all",
                Some(v.refused_before == a.hosts && v.first_refused_after == a.hosts),
            );
            row(
                &format!(
                    "artifact v2 (chunk {} of {} changed)",
                    v.changed_chunk, a.chunks
                ),
                fetched(&v.fetch),
                "all checked",
                Some(v.fetch.failed == 0 && v.fetch.checked == a.hosts),
            );
            row(
                "artifact v2: received per host",
                format!(
                    "{:.1}-{:.1} MB for its {:.1} MB; cached before: v1 {}, v2 on {} of {}",
                    mb(v.fetch.received_min),
                    mb(v.fetch.received_max),
                    mb(a.bytes),
                    if v.first_kept {
                        "on all"
                    } else {
                        "removed (no room)"
                    },
                    v.cached_before,
                    a.hosts
                ),
                "",
                None,
            );
            row(
                "artifact v2: move to all fetched; put",
                format!(
                    "{} (declared in {}); put in {}, {:.1} MB more stored",
                    s(v.moved_to_fetched_ms),
                    s(v.declared_ms),
                    s(v.put_ms),
                    mb(v.stored_bytes)
                ),
                "",
                None,
            );
        }
        None => row("artifact", "not run".into(), "", None),
    }
    match &r.users_file {
        Some(u) => {
            row(
                &format!("users file {}x{}: compose", thousands(u.nodes), u.modules),
                format!(
                    "{} best, {} median",
                    s(u.compose_best_ms),
                    s(u.compose_median_ms)
                ),
                "< 200 ms",
                Some(u.compose_median_ms < 200.0),
            );
            row(
                "users file: size, twice",
                format!(
                    "{} users, {:.1} MB, {}",
                    thousands(u.users),
                    mb(u.bytes as u64),
                    if u.identical {
                        "identical"
                    } else {
                        "DIFFERENT"
                    }
                ),
                "byte-identical",
                Some(u.identical),
            );
            let reload = u.reload_ms.map_or("never".into(), s);
            let usable = u.usable_ms.map_or("never".into(), s);
            row(
                "users file: reload; usable (canary)",
                format!("{reload}; {usable}"),
                "usable <= reload + 0.5 s",
                Some(matches!((u.reload_ms, u.usable_ms), (Some(a), Some(b)) if b <= a + 500.0)),
            );
            row(
                "users file: composer, trigger to live",
                u.composer_live_ms.map_or("never".into(), s),
                "",
                None,
            );
        }
        None => row("users file", "not run".into(), "", Some(false)),
    }
    for i in &r.ingestion {
        row(
            &format!("report ingestion: {}", i.backend),
            format!(
                "{:.0}/s in batches of {}; {:.0}/s one by one ({} nodes)",
                i.per_second,
                i.batch,
                i.one_by_one_per_second,
                thousands(i.nodes)
            ),
            ">= 10,000/s",
            Some(i.per_second >= 10_000.0),
        );
    }
    let m = &r.memory;
    row(
        "controller RSS, peak (now)",
        format!(
            "{:.0} MB ({:.0} MB), {} nodes",
            mb(m.controller.peak),
            mb(m.controller.now),
            thousands(m.nodes)
        ),
        "< 150 MB",
        Some(m.controller.peak < 150_000_000),
    );
    row(
        "controller RSS, peak by phase",
        m.controller_by_phase
            .iter()
            .map(|(p, b)| format!("{p} {:.0}", mb(*b)))
            .collect::<Vec<_>>()
            .join(", ")
            + " MB",
        "",
        None,
    );
    match m.idle_host {
        Some(h) => row(
            "host RSS idle (a real mesh host)",
            format!("{:.1} MB", mb(h.now)),
            "< 20 MB",
            Some(h.now < 20_000_000),
        ),
        None => row(
            "host RSS idle",
            "not measured".into(),
            "< 20 MB",
            Some(false),
        ),
    }
    row(
        "simulated host, this process's share",
        format!("{:.0} kB", m.simulated_host_bytes as f64 / 1000.0),
        "",
        None,
    );
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let _ = writeln!(t, "{:<w0$}  {:<w1$}  {:<w2$}", "figure", "value", "target");
    for (f, v, target, met) in &rows {
        let mark = match met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "",
        };
        let _ = writeln!(t, "{f:<w0$}  {v:<w1$}  {target:<w2$}  {mark}");
    }
    if r.problems.is_empty() {
        let _ = writeln!(
            t,
            "\ncorrect: every report recorded, none twice{}",
            if r.artifact.is_some() {
                "; every artifact fetch checked, every read not declared refused"
            } else {
                ""
            }
        );
    } else {
        let _ = writeln!(t, "\nproblems:");
        for p in &r.problems {
            let _ = writeln!(t, "  {p}");
        }
    }
    t
}

fn thousands(n: usize) -> String {
    mesh_core::diagnostic::thousands(n)
}
