//! Reports from CONTROL: recorded, and each module's public key recorded
//! for a module assigned to the reporting node (never another's), which
//! moves the records revision and so recomposes the users file.

use std::collections::BTreeSet;
use std::time::Duration;

use mesh_bus::seam::{Delivery, Settle};
use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::report::{ModuleState, Report};
use mesh_core::store_window::Decision;
use mesh_store::{Store, StoreError};
use tracing::{debug, info, warn};

use super::{Counters, Ctx, error_chain};

pub(crate) async fn take(ctx: &Ctx, msg: Delivery) {
    let report = match Report::parse(&msg.subject, &msg.payload) {
        Ok(r) => r,
        Err(e) => {
            Counters::bump(&ctx.counters.terminated);
            warn!(subject = %msg.subject, reason = %e, "report terminated");
            let _ = msg.settle(Settle::Terminate).await;
            return;
        }
    };
    let deliveries = msg.deliveries;
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    if let Some(d) = ctx.window_without_trying(now, deliveries) {
        window(ctx, msg, &report, d).await;
        return;
    }
    match record(&ctx.store, &report).await {
        Ok(outcome) => {
            ctx.close_window();
            spares_heard(ctx, [&report]);
            count(ctx, &report, outcome);
            let _ = msg.settle(Settle::Ack).await;
        }
        // Neither acknowledged nor refused: the active controller takes it.
        Err(e) if e.is_deposed() => {
            info!(node = %report.node, sequence = report.sequence, error = %error_chain(&e), "report left to the active controller");
        }
        Err(e) if e.is_unavailable() => {
            warn!(node = %report.node, sequence = report.sequence, error = %error_chain(&e), "the store cannot take the report");
            let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
            let d = ctx.window_decision(now, deliveries);
            window(ctx, msg, &report, d).await;
        }
        Err(e) => {
            // A node forgotten meanwhile, or a report the store refuses:
            // redelivering would fail the same way.
            Counters::bump(&ctx.counters.terminated);
            warn!(node = %report.node, error = %error_chain(&e), "report terminated");
            let _ = msg.settle(Settle::Terminate).await;
        }
    }
}

/// Takes a batch CONTROL delivered together: the malformed terminated,
/// the rest recorded at once ([`record_batch`]), then each acknowledged as
/// [`take`] would. While the store window is open, or when the store
/// refuses the batch as a whole, each is taken alone, so only the report
/// the store refuses is decided as refused.
pub(crate) async fn take_batch(ctx: &Ctx, msgs: Vec<Delivery>) {
    if msgs.len() <= 1 {
        for m in msgs {
            take(ctx, m).await;
        }
        return;
    }
    let mut parsed = Vec::with_capacity(msgs.len());
    for msg in msgs {
        match Report::parse(&msg.subject, &msg.payload) {
            Ok(r) => parsed.push((msg, r)),
            Err(e) => {
                Counters::bump(&ctx.counters.terminated);
                warn!(subject = %msg.subject, reason = %e, "report terminated");
                let _ = msg.settle(Settle::Terminate).await;
            }
        }
    }
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    if ctx.window_without_trying(now, 1).is_some() {
        for (msg, _) in parsed {
            take(ctx, msg).await;
        }
        return;
    }
    let reports: Vec<Report> = parsed.iter().map(|(_, r)| r.clone()).collect();
    match record_batch(&ctx.store, &reports).await {
        Ok(outcomes) => {
            ctx.close_window();
            spares_heard(ctx, parsed.iter().map(|(_, r)| r));
            for ((msg, report), outcome) in parsed.into_iter().zip(outcomes) {
                count(ctx, &report, outcome);
                let _ = msg.settle(Settle::Ack).await;
            }
        }
        Err(e) if e.is_deposed() => {
            info!(reports = parsed.len(), error = %error_chain(&e), "reports left to the active controller");
        }
        Err(e) if e.is_unavailable() => {
            warn!(reports = parsed.len(), error = %error_chain(&e), "the store cannot take the reports");
            let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
            for (msg, report) in parsed {
                let d = ctx.window_decision(now, msg.deliveries);
                window(ctx, msg, &report, d).await;
            }
        }
        Err(e) => {
            debug!(reports = parsed.len(), error = %error_chain(&e), "the store refused the batch; taking each alone");
            for (msg, _) in parsed {
                take(ctx, msg).await;
            }
        }
    }
}

/// A node with a module held back for want of spare keys announced some
/// (recorded now): its modules are declared again.
fn spares_heard<'a>(ctx: &Ctx, reports: impl IntoIterator<Item = &'a Report>) {
    let mut awaiting = ctx
        .awaiting_spares
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if awaiting.is_empty() {
        return;
    }
    let mut heard = false;
    for r in reports {
        if !r.spare_keys.is_empty() && awaiting.remove(&r.node) {
            heard = true;
        }
    }
    if heard {
        ctx.declare_again.notify_one();
    }
}

fn count(ctx: &Ctx, report: &Report, outcome: Ingested) {
    match outcome {
        Ingested::Recorded => {
            Counters::bump(&ctx.counters.reports);
            ctx.lag.recorded(&report.node, report.sequence);
        }
        Ingested::Duplicate => {
            Counters::bump(&ctx.counters.duplicates);
            info!(node = %report.node, id = %report.id, "report recorded before; acknowledged again");
        }
        Ingested::Ahead { newest } => {
            Counters::bump(&ctx.counters.reports);
            ctx.lag.recorded(&report.node, report.sequence);
            let first = ctx
                .hosts_ahead
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(report.node.clone(), report.sequence)
                .is_none();
            if first {
                warn!(
                    node = %report.node,
                    applied = report.sequence,
                    newest,
                    "the host applied a declaration newer than the newest recorded (was the store restored from a backup?); declaring the node again above it"
                );
            }
            ctx.declare_again.notify_one();
        }
        Ingested::Superseded { newest } => {
            Counters::bump(&ctx.counters.superseded);
            info!(node = %report.node, sequence = report.sequence, newest, "report answers an older declaration; not recorded");
        }
    }
}

/// Carries out the store window's decision for one report.
async fn window(ctx: &Ctx, msg: Delivery, report: &Report, d: Decision) {
    match d {
        Decision::Nak { delay_ms } => {
            debug!(node = %report.node, sequence = report.sequence, retry_in_ms = delay_ms, "report stays in CONTROL");
            let after = Duration::from_millis(delay_ms);
            let _ = msg.settle(Settle::Retry { after }).await;
        }
        Decision::LetGo { open_for_ms } => {
            Counters::bump(&ctx.counters.let_go);
            warn!(node = %report.node, sequence = report.sequence, id = %report.id, open_for_ms, "the store has been unavailable past the bound; report let go");
            let _ = msg.settle(Settle::Terminate).await;
        }
    }
}

/// What recording one report came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    Recorded,
    /// Its id was recorded before (a redelivery).
    Duplicate,
    /// It answers an older declaration than the node's newest.
    Superseded {
        newest: i64,
    },
    /// Recorded, and it answers a declaration above the node's newest
    /// recorded one: the host applied what these records never made (a
    /// store restored from a backup).
    Ahead {
        newest: i64,
    },
}

/// Records one report as the controller does on CONTROL: the supersession
/// check, the report and its outcomes, then each module key it names for a
/// module assigned to the node. `mesh-bench` measures exactly this.
pub async fn record(store: &Store, r: &Report) -> Result<Ingested, StoreError> {
    let mut one = record_batch(store, std::slice::from_ref(r)).await?;
    Ok(one.pop().expect("one outcome per report"))
}

fn store_report(r: &Report) -> mesh_store::Report {
    mesh_store::Report {
        node: r.node.clone(),
        declaration_version: i64::try_from(r.sequence).unwrap_or(i64::MAX),
        outcomes: r
            .modules
            .iter()
            .map(|m| mesh_store::ModuleOutcome {
                module: m.name.clone(),
                state: match m.state {
                    ModuleState::Starting => mesh_store::ModuleState::Starting,
                    ModuleState::Running => mesh_store::ModuleState::Running,
                    ModuleState::Stopped => mesh_store::ModuleState::Stopped,
                    ModuleState::Failed => mesh_store::ModuleState::Failed {
                        reason: m.reason.clone().unwrap_or_default(),
                    },
                },
                restarts: m.restarts,
                pinned: m.pinned.clone(),
                health: m.health.clone(),
            })
            .collect(),
        received_at: mesh_store::now_ms(),
        refused: r.refused.clone(),
        report_id: Some(r.id.clone()),
    }
}

/// The address a host advertises, recorded when it differs from the one
/// the store holds (read first: writing an unchanged one would still move
/// the records revision on PostgreSQL, whose triggers are per statement).
async fn record_address(store: &Store, r: &Report) -> Result<(), StoreError> {
    let Some(address) = &r.address else {
        return Ok(());
    };
    let Some(node) = store.node(&r.node).await? else {
        return Ok(());
    };
    if node.address.as_deref() != Some(address.as_str()) {
        store.set_node_address(&r.node, Some(address)).await?;
        info!(node = %r.node, %address, "the node's address recorded, as its host advertises it");
    }
    Ok(())
}

/// Records reports as [`record`] does each, together: the supersession
/// checks, then every report and its outcomes in one transaction, then the
/// module keys they name (for modules assigned to their node) in one more.
/// The outcomes are in the order of `reports`. A superseded report is
/// settled without being acted on: not its outcomes, keys, spares, nor the
/// address it carries.
pub async fn record_batch(store: &Store, reports: &[Report]) -> Result<Vec<Ingested>, StoreError> {
    // A handful of statements for the batch, however many reports: the
    // nodes' newest versions, the reports and outcomes, the nodes'
    // assignments and the modules' recorded keys, each one read.
    let nodes: Vec<Name> = reports
        .iter()
        .map(|r| r.node.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let newest = store.latest_versions(&nodes).await?;
    let mut out: Vec<Option<Ingested>> = vec![None; reports.len()];
    let mut taken = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let sequence = i64::try_from(r.sequence).unwrap_or(i64::MAX);
        match newest.get(&r.node) {
            Some(v) if r.refused.is_none() && sequence < *v => {
                out[i] = Some(Ingested::Superseded { newest: *v });
            }
            _ => taken.push(i),
        }
    }
    for &i in &taken {
        record_address(store, &reports[i]).await?;
    }
    let rows: Vec<mesh_store::Report> = taken.iter().map(|&i| store_report(&reports[i])).collect();
    let recorded = store.record_reports(&rows).await?;
    let mut named: Vec<(PrincipalKind, &String)> = Vec::new();
    for (&i, rec) in taken.iter().zip(recorded) {
        let r = &reports[i];
        if rec == mesh_store::Recorded::Duplicate {
            out[i] = Some(Ingested::Duplicate);
            continue;
        }
        let sequence = i64::try_from(r.sequence).unwrap_or(i64::MAX);
        out[i] = Some(match newest.get(&r.node) {
            Some(&v) if sequence > v => Ingested::Ahead { newest: v },
            _ => Ingested::Recorded,
        });
        if let Some(why) = &r.refused {
            warn!(node = %r.node, sequence = r.sequence, reason = %why, "the host refused its declaration");
        } else {
            info!(node = %r.node, sequence = r.sequence, modules = r.modules.len(), "report recorded");
        }
        for m in &r.modules {
            if let Some(key) = &m.nkey {
                let principal = PrincipalKind::Module {
                    node: r.node.clone(),
                    module: m.name.clone(),
                };
                named.push((principal, key));
            }
        }
    }
    // The spares each host holds now (a report carries the whole set).
    let spares: Vec<(Name, Vec<String>)> = taken
        .iter()
        .map(|&i| &reports[i])
        .filter(|r| !r.spare_keys.is_empty())
        .map(|r| (r.node.clone(), r.spare_keys.clone()))
        .collect();
    store.record_spare_keys(&spares).await?;
    // The RabbitMQ hashes of the keys announced (written only when new):
    // a mesh on AMQP admits the keys by them, and one moved onto AMQP
    // finds them recorded already.
    let hashes: std::collections::BTreeMap<String, String> = taken
        .iter()
        .flat_map(|&i| reports[i].amqp_hashes.clone())
        .collect();
    store.record_amqp_hashes(&hashes).await?;
    let mut keys: Vec<(PrincipalKind, String)> = Vec::new();
    if !named.is_empty() {
        let assigned = store.assignments_on(&nodes).await?;
        let names: Vec<String> = named.iter().map(|(p, _)| p.principal_name()).collect();
        let known = store.machine_keys(&names).await?;
        for ((principal, key), name) in named.into_iter().zip(names) {
            let PrincipalKind::Module { node, module } = &principal else {
                continue;
            };
            // Only for a module assigned to this node: a host can name any
            // module, and a key recorded for another's would let it speak
            // as it.
            if !assigned.contains(&(node.clone(), module.clone())) {
                warn!(%node, %module, "key of a module not assigned to this node ignored");
                continue;
            }
            if known.get(&name) == Some(key)
                || keys.iter().any(|(p, k)| *p == principal && k == key)
            {
                continue;
            }
            keys.push((principal, key.clone()));
        }
    }
    if !keys.is_empty() {
        record_keys(store, &keys).await?;
    }
    Ok(out
        .into_iter()
        .map(|o| o.expect("every report decided"))
        .collect())
}

/// The module keys of a batch in one transaction (one move of the records
/// revision, so one recomposition); if the store refuses it (a module
/// unassigned meanwhile), one by one, as [`record`] does.
async fn record_keys(store: &Store, keys: &[(PrincipalKind, String)]) -> Result<(), StoreError> {
    let prepared: Result<Vec<_>, _> = keys
        .iter()
        .map(|(p, k)| mesh_store::prepare_machine_key(p, k))
        .collect();
    if let Ok(credentials) = prepared {
        let change = mesh_store::FleetChange {
            credentials,
            ..mesh_store::FleetChange::default()
        };
        match store.apply_fleet(&change).await {
            Ok(_) => {
                for (p, _) in keys {
                    if let PrincipalKind::Module { node, module } = p {
                        info!(%node, %module, "module key recorded");
                    }
                }
                return Ok(());
            }
            Err(e) if e.is_unavailable() => return Err(e),
            Err(_) => {}
        }
    }
    for (principal, key) in keys {
        match store.record_machine_key(principal, key).await {
            Ok(()) => {
                if let PrincipalKind::Module { node, module } = principal {
                    info!(%node, %module, "module key recorded");
                }
            }
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
