//! `/metrics` in Prometheus text format. Each scrape encodes the counters
//! as they are at that moment; only the apply-lag histogram is kept between
//! scrapes (its buckets are what it observed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_core::names::Name;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::warn;

use super::Shared;
use crate::CountersView;
use crate::composer::ComposerStatus;

/// From a declaration's publish to the first report answering it being
/// recorded: how long nodes take to converge.
pub(crate) struct ApplyLag {
    /// The newest declaration published to each node, and when.
    published: Mutex<HashMap<Name, (u64, Instant)>>,
    histogram: Histogram,
}

impl Default for ApplyLag {
    fn default() -> Self {
        ApplyLag {
            published: Mutex::new(HashMap::new()),
            histogram: lag_histogram(),
        }
    }
}

/// 10 ms doubling to about 80 s: a module download can take minutes, a
/// local apply milliseconds.
fn lag_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl ApplyLag {
    pub(crate) fn published(&self, node: &Name, sequence: u64) {
        let mut m = self.published.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(node.clone(), (sequence, Instant::now()));
    }

    /// A report answering `sequence` was recorded: the first one observes
    /// the lag (later ones say a module's state moved, not the apply).
    pub(crate) fn recorded(&self, node: &Name, sequence: u64) {
        let mut m = self.published.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, at)) = m.get(node)
            && *s == sequence
        {
            self.histogram.observe(at.elapsed().as_secs_f64());
            m.remove(node);
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabel {
    health: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// Registers with `help` as written: the encoder ends every HELP line
/// with a full stop of its own, so the text carries none.
fn register(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: impl prometheus_client::registry::Metric,
) {
    registry.register(name, help.trim_end_matches('.'), metric);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    register(registry, name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    register(registry, name, help, g);
}

/// What one scrape reports, read before anything is encoded.
struct Figures {
    counters: CountersView,
    composer: ComposerStatus,
    window_open: bool,
    ready: bool,
    /// Nodes by liveness; none when the store could not be read.
    nodes: Option<Vec<(&'static str, usize)>>,
    /// Modules by health in their hosts' newest reports, and deployments
    /// under way; none when the store could not be read.
    health: Option<std::collections::BTreeMap<String, i64>>,
    deploying: Option<usize>,
    lag: Histogram,
}

/// The metrics, encoded.
pub(crate) async fn render(shared: &Shared) -> Result<String, std::fmt::Error> {
    let ctx = shared.running();
    let now = u64::try_from(mesh_store::now_ms()).unwrap_or(0);
    let nodes = match mesh_state::views::nodes(&shared.store, now).await {
        Ok(views) => Some(
            ["ready", "stale", "down", "unseen", "not enrolled"]
                .into_iter()
                .map(|state| {
                    (
                        state,
                        views.iter().filter(|v| v.condition() == state).count(),
                    )
                })
                .collect(),
        ),
        Err(e) => {
            warn!(error = %crate::chain::error_chain(&e), "nodes not counted for /metrics");
            None
        }
    };
    let health = shared
        .store
        .health_counts()
        .await
        .inspect_err(
            |e| warn!(error = %crate::chain::error_chain(e), "health not counted for /metrics"),
        )
        .ok();
    let deploying = shared
        .store
        .active_deployments()
        .await
        .inspect_err(|e| warn!(error = %crate::chain::error_chain(e), "deployments not counted for /metrics"))
        .ok()
        .map(|d| d.len());
    let composer = shared.composer_status();
    encode(&Figures {
        counters: ctx.as_ref().map(|c| c.counters()).unwrap_or_default(),
        composer,
        window_open: shared.window_open(),
        ready: shared.not_ready().is_none(),
        nodes,
        health,
        deploying,
        lag: ctx
            .as_ref()
            .map_or_else(lag_histogram, |c| c.lag().histogram.clone()),
    })
}

fn encode(f: &Figures) -> Result<String, std::fmt::Error> {
    let mut r = Registry::default();
    let c = &f.counters;
    counter(
        &mut r,
        "mesh_reports_recorded",
        "Reports recorded in the store",
        c.reports,
    );
    counter(
        &mut r,
        "mesh_reports_duplicate",
        "Reports redelivered after they were recorded (acknowledged again)",
        c.duplicates,
    );
    counter(
        &mut r,
        "mesh_reports_superseded",
        "Reports answering an older declaration than the node's newest",
        c.superseded,
    );
    counter(
        &mut r,
        "mesh_reports_let_go",
        "Reports let go after the store stayed unavailable past the store window",
        c.let_go,
    );
    counter(
        &mut r,
        "mesh_declarations_published",
        "Declarations published to NODES",
        c.declarations,
    );
    counter(
        &mut r,
        "mesh_hostile_terminated",
        "Malformed messages terminated (never redelivered)",
        c.terminated,
    );
    counter(&mut r, "mesh_enrolments", "Enrolments taken", c.enrolled);
    counter(
        &mut r,
        "mesh_enrolments_refused",
        "Enrolments refused",
        c.refused,
    );
    counter(&mut r, "mesh_heartbeats", "Heartbeats heard", c.heartbeats);

    let status = &f.composer;
    counter(
        &mut r,
        "mesh_compositions",
        "Compositions of the users file",
        status.compositions,
    );
    counter(
        &mut r,
        "mesh_compositions_live",
        "Compositions confirmed live by their canary",
        status.live,
    );
    counter(
        &mut r,
        "mesh_compositions_not_live",
        "Compositions not in force on the broker",
        status.not_live,
    );
    gauge(
        &mut r,
        "mesh_composition_live",
        "1 when the newest composition is live",
        i64::from(status.last.as_ref().is_some_and(|o| o.is_live())),
    );
    let reload: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64> =
        Default::default();
    reload.set(status.last_reload.map_or(0.0, |d| d.as_secs_f64()));
    register(
        &mut r,
        "mesh_composition_reload_seconds",
        "How long the last composition that signalled the broker took, until its canary was admitted",
        reload,
    );
    gauge(
        &mut r,
        "mesh_store_window_open",
        "1 while the store cannot take reports (they wait in CONTROL)",
        i64::from(f.window_open),
    );
    gauge(
        &mut r,
        "mesh_ready",
        "1 when /readyz answers 200",
        i64::from(f.ready),
    );

    let nodes = Family::<StateLabel, Gauge>::default();
    for (state, n) in f.nodes.iter().flatten() {
        nodes
            .get_or_create(&StateLabel {
                state: state.replace(' ', "_"),
            })
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    register(
        &mut r,
        "mesh_nodes",
        "Nodes by liveness (ready, stale, down, unseen; not_enrolled)",
        nodes,
    );
    let health = Family::<HealthLabel, Gauge>::default();
    if let Some(counts) = &f.health {
        // Every health named, 0 included: an alert on `unhealthy > 0`
        // needs the series to exist while nothing is unhealthy.
        for h in ["starting", "healthy", "unhealthy", "unknown"] {
            health
                .get_or_create(&HealthLabel { health: h.into() })
                .set(0);
        }
        for (h, n) in counts {
            health
                .get_or_create(&HealthLabel { health: h.clone() })
                .set(*n);
        }
    }
    register(
        &mut r,
        "mesh_modules",
        "Modules by health, as their hosts' newest reports give it (unknown: a host that checks none)",
        health,
    );
    if let Some(n) = f.deploying {
        gauge(
            &mut r,
            "mesh_deployments_running",
            "Deployments running or paused",
            i64::try_from(n).unwrap_or(i64::MAX),
        );
    }
    register(
        &mut r,
        "mesh_declaration_apply_lag_seconds",
        "From a declaration's publish to the first report answering it being recorded",
        f.lag.clone(),
    );

    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)?;
    Ok(out)
}

pub(crate) async fn scrape(State(shared): State<Arc<Shared>>) -> Response {
    match render(&shared).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "metrics not encoded\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_help_line_ends_in_one_full_stop() {
        let text = encode(&Figures {
            counters: CountersView::default(),
            composer: ComposerStatus::default(),
            window_open: false,
            ready: true,
            nodes: Some(vec![("ready", 1)]),
            health: Some([("healthy".to_string(), 2)].into()),
            deploying: Some(0),
            lag: lag_histogram(),
        })
        .unwrap();
        let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert!(help.len() >= 20, "{text}");
        assert!(
            text.contains("mesh_modules{health=\"healthy\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("mesh_modules{health=\"unhealthy\"} 0\n"),
            "{text}"
        );
        for line in help {
            assert!(line.ends_with('.') && !line.ends_with(".."), "{line}");
        }
    }
}
