//! `mesh status` and `/api/status`: the whole mesh on one screen, and what
//! needs the operator, each with its next step.

use std::collections::BTreeMap;

use mesh_core::names::Name;
use mesh_store::Store;
use serde::{Deserialize, Serialize};

use super::{ModuleView, NodeView, ViewError};

/// The controller as it says of itself (its HTTP API), or as unreachable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerView {
    /// Whether it answered at all.
    pub reachable: bool,
    /// Where it was asked (the CLI's view); none when it speaks of itself.
    pub url: Option<String>,
    /// The controller's NKey public key (`U…`) from its genesis: which
    /// mesh it is the controller of.
    pub controller_key: Option<String>,
    /// Set by `mesh status` when the controller that answered at `url` is
    /// another mesh's: its key (or that it named none). Nothing it said is
    /// shown beside this mesh's records.
    pub other_mesh: Option<String>,
    /// Connected to the broker, objects asserted, newest composition live.
    pub ready: bool,
    /// Why it is not ready.
    pub reason: Option<String>,
    pub broker_connected: Option<bool>,
    /// Whether the newest composition of the users file is in force.
    pub composition_live: Option<bool>,
    pub composition_generation: Option<u64>,
    pub compositions: Option<u64>,
    /// Reports wait in CONTROL while the store cannot take them.
    pub store_window_open: Option<bool>,
    /// `active` or `standby`: whether it holds the store's lease.
    #[serde(default)]
    pub role: Option<String>,
}

/// A server of a clustered bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerView {
    pub url: String,
    /// Whether it accepted a connection on its client port.
    pub listening: bool,
}

/// Which controller holds the store's lease, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    /// Moved by each take: a write of an older one is refused.
    pub epoch: i64,
    /// `mesh controller on HOST (pid N, DIR)`; none once its last holder
    /// released it (a clean stop).
    pub holder: Option<String>,
    /// Where it serves HTTP.
    pub http: Option<String>,
    /// Since when it is held, or was released (unix ms).
    pub since: i64,
}

/// Something that needs the operator, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub what: String,
    pub next: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    pub controller: ControllerView,
    /// None before any controller took the lease.
    #[serde(default)]
    pub lease: Option<LeaseView>,
    /// Each server of a clustered bus and whether it listens, as the
    /// machine asking finds it; empty for a single server (or when the
    /// asker has no genesis to name them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerView>,
    /// By [`NodeView::condition`]: `ready`, `stale`, `down`, `unseen`,
    /// `not enrolled`.
    pub nodes: BTreeMap<String, u64>,
    /// By state in the newest reports (`unreported` until one comes).
    pub modules: BTreeMap<String, u64>,
    pub needs_action: Vec<Action>,
}

/// A node that has not applied the declaration carrying the broker's
/// addresses `mesh broker set-address` recorded: its host keeps the old
/// ones, and cannot follow once the broker has moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub node: String,
    /// The declaration carrying the addresses.
    pub sequence: i64,
    pub urls: Vec<String>,
    /// When the addresses are a rollout's (a move onto another bus),
    /// whether the controller has moved itself already.
    pub rollout: Option<Moved>,
}

/// A rollout's phase, as a node left behind sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// The controller still drains the old bus: it waits for the node.
    Draining,
    /// The controller left the old bus: only the node can come over.
    Moved,
}

/// Whether a node whose newest declaration is `declared` (its sequence and
/// its body) and whose newest report answers `reported` has yet to apply
/// the broker's addresses `urls`: only a declaration that carries them
/// counts (the controller has not declared them yet otherwise).
pub fn behind(
    node: &str,
    urls: &[String],
    declared: Option<(i64, &str)>,
    reported: Option<i64>,
) -> Option<Behind> {
    let (sequence, body) = declared?;
    let carries = mesh_core::declaration::recorded(body)
        .and_then(|d| d.bus)
        .is_some_and(|b| b.urls == urls);
    (carries && reported.is_none_or(|r| r < sequence)).then(|| Behind {
        node: node.to_string(),
        sequence,
        urls: urls.to_vec(),
        rollout: None,
    })
}

/// A host's refusal of its node's newest declaration.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub node: String,
    pub sequence: i64,
    pub reason: String,
}

fn count<'a>(keys: impl Iterator<Item = &'a str>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for k in keys {
        *m.entry(k.to_string()).or_insert(0) += 1;
    }
    m
}

/// Reads the records and puts `controller` beside them.
pub async fn status(
    store: &Store,
    now_ms: u64,
    controller: ControllerView,
) -> Result<StatusView, ViewError> {
    let nodes = super::nodes(store, now_ms).await?;
    let modules = super::modules(store).await?;
    let mut refusals = Vec::new();
    let mut stranded = Vec::new();
    let moved = store.bus_urls().await?;
    // Addresses a rollout flipped to: what is left behind is a node on the
    // old bus.
    let rollout = store.bus_move().await?.and_then(|m| {
        (Some(&m.to_urls) == moved.as_ref()).then_some(if m.moved_at.is_some() {
            Moved::Moved
        } else {
            Moved::Draining
        })
    });
    for n in nodes.iter().filter(|n| n.enrolled_at.is_some()) {
        let Ok(name) = Name::new(&n.node) else {
            continue;
        };
        let report = store.latest_report(&name).await?;
        if let Some(urls) = &moved {
            let declared = store.latest_declaration(&name).await?;
            stranded.extend(
                behind(
                    &n.node,
                    urls,
                    declared.as_ref().map(|d| (d.version, d.body.as_str())),
                    report.as_ref().map(|r| r.report.declaration_version),
                )
                .map(|b| Behind { rollout, ..b }),
            );
        }
        if let Some(r) = report
            && let Some(reason) = r.report.refused
        {
            refusals.push(Refusal {
                node: n.node.clone(),
                sequence: r.report.declaration_version,
                reason,
            });
        }
    }
    let left_out = store.left_out().await?;
    let needs_action = needs_action(
        &controller,
        &nodes,
        &modules,
        &refusals,
        &left_out,
        &stranded,
    );
    let lease = store.lease_record().await?.map(|r| LeaseView {
        epoch: r.epoch,
        holder: r.holder,
        http: r.http,
        since: r.since,
    });
    Ok(StatusView {
        lease,
        servers: Vec::new(),
        nodes: count(nodes.iter().map(NodeView::condition)),
        modules: count(modules.iter().map(|m| m.state.as_str())),
        controller,
        needs_action,
    })
}

/// What needs the operator, most fundamental first: a controller that does
/// not answer explains every node that is not declared to.
pub fn needs_action(
    controller: &ControllerView,
    nodes: &[NodeView],
    modules: &[ModuleView],
    refusals: &[Refusal],
    left_out: &[mesh_store::LeftOut],
    stranded: &[Behind],
) -> Vec<Action> {
    let mut out = Vec::new();
    let mut add = |what: String, next: String| out.push(Action { what, next });
    if let Some(key) = &controller.other_mesh {
        add(
            format!(
                "the controller at {} belongs to another mesh (controller key {key}); this mesh's controller is not answering there",
                controller.url.as_deref().unwrap_or("the address asked")
            ),
            "is it running? start it with `mesh up` or `mesh controller --dir DIR`, or pass its address with --http".into(),
        );
    } else if !controller.reachable {
        add(
            format!(
                "the controller does not answer{}",
                controller
                    .url
                    .as_ref()
                    .map(|u| format!(" at {u}"))
                    .unwrap_or_default()
            ),
            "start it with `mesh controller` (or pass its address with --http)".into(),
        );
    } else if !controller.ready {
        add(
            format!(
                "the controller is not ready: {}",
                controller.reason.as_deref().unwrap_or("no reason given")
            ),
            "read the controller's log (one line per event on its stderr)".into(),
        );
    }
    if controller.store_window_open == Some(true) {
        add(
            "the store cannot take reports: they wait in CONTROL".into(),
            "bring the store back; reports are recorded when it answers".into(),
        );
    }
    for n in nodes {
        let node = &n.node;
        match (n.enrolled_at.is_some(), n.condition()) {
            (true, "down" | "stale") => add(
                format!("node {node} is {}", n.liveness),
                format!("check `mesh host` on {node}"),
            ),
            (true, "unseen") => add(
                format!("node {node} enrolled but was never heard from"),
                format!(
                    "start `mesh host` on {node}; if its host never kept the enrolment, `mesh node add {node} --reissue` issues a new token"
                ),
            ),
            (false, _) if n.state == "token issued" => add(
                format!("node {node} has a token but has not enrolled"),
                format!(
                    "run `mesh host --token -` on {node} with its token on standard input (or in MESH_TOKEN)"
                ),
            ),
            (false, _) => add(
                format!("node {node} has no token"),
                format!("issue one with `mesh node add {node}`"),
            ),
            _ => {}
        }
    }
    for b in stranded {
        let urls = b.urls.join(",");
        let url = b.urls.first().map_or("URL", String::as_str);
        match b.rollout {
            Some(Moved::Draining) => {
                add(
                    format!(
                        "node {} has not taken the move onto NATS at {urls}: its host has not applied declaration {}",
                        b.node, b.sequence
                    ),
                    format!(
                        "start its host on {} now: the controller waits for it on RabbitMQ ({} s after `--confirm` unless `mesh controller --move-within` says otherwise), then moves without it",
                        b.node,
                        mesh_core::rollout::NODES_WITHIN_MS / 1000
                    ),
                );
                continue;
            }
            Some(Moved::Moved) => {
                add(
                    format!(
                        "node {} was left behind on RabbitMQ by the move onto NATS at {urls}: its host has not applied declaration {}",
                        b.node, b.sequence
                    ),
                    format!(
                        "on {}: `mesh host --state DIR --broker {url}` (its key is in the new bus's user list); RabbitMQ's users stay until it reports there, or `mesh node forget {}`",
                        b.node, b.node
                    ),
                );
                continue;
            }
            None => {}
        }
        add(
            format!(
                "node {} has not followed the broker to {urls}: its host has not applied declaration {}",
                b.node, b.sequence
            ),
            format!(
                "start its host while the broker still listens where it was; if the broker has moved, on {}: `mesh host --state DIR --broker {}`",
                b.node,
                b.urls.first().map_or("URL", String::as_str)
            ),
        );
    }
    for r in refusals {
        add(
            format!(
                "the host of {} refused declaration {}: {}",
                r.node, r.sequence, r.reason
            ),
            format!("see `mesh reports {}`", r.node),
        );
    }
    for l in left_out {
        // The reason names its own remedy (every refusal of composition does).
        add(
            format!(
                "module {} is left out of the declaration of {}",
                l.module, l.node
            ),
            l.reason.clone(),
        );
    }
    let why = |m: &ModuleView| {
        m.reason
            .as_ref()
            .map(|r| format!(": {}", first_line(r)))
            .unwrap_or_default()
    };
    for m in modules {
        let (what, next) = match (m.state.as_str(), m.health.as_deref()) {
            ("failed", _) => (
                format!("module {} on {} failed{}", m.module, m.node, why(m)),
                format!(
                    "see `mesh reports {}` and the module's log on {}",
                    m.node, m.node
                ),
            ),
            // Running but failing its check: a deploy would halt on it.
            (_, Some("unhealthy")) => (
                format!("module {} on {} is unhealthy{}", m.module, m.node, why(m)),
                format!(
                    "its [health] check fails; see `mesh modules` for the check's output and the module's log on {}",
                    m.node
                ),
            ),
            _ => continue,
        };
        add(what, next);
    }
    out
}

/// A reason's first line: a failed module's carries its last log lines.
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded declaration of n1 at `sequence` carrying `urls`.
    fn recorded(sequence: u64, urls: Option<&[&str]>) -> String {
        let d = mesh_core::declaration::Declaration {
            node: Name::new("n1").unwrap(),
            sequence,
            composed_at: 0,
            modules: Vec::new(),
            bus: urls.map(|u| mesh_core::declaration::BusDecl {
                urls: u.iter().map(|s| s.to_string()).collect(),
            }),
            sealed_by: None,
        };
        let key = ed25519_dalek::SigningKey::from_bytes(&[1; 32]);
        String::from_utf8(d.sign(&key)).unwrap()
    }

    #[test]
    fn a_node_is_behind_the_broker_until_it_reports_the_declaration_carrying_its_addresses() {
        let urls = vec!["tls://10.0.0.5:4333".to_string()];
        let moved = recorded(7, Some(&["tls://10.0.0.5:4333"]));
        let old = recorded(7, Some(&["tls://10.0.0.5:4222"]));
        let none = recorded(7, None);
        let one = Behind {
            node: "n1".into(),
            sequence: 7,
            urls: urls.clone(),
            rollout: None,
        };
        let want = Some(one.clone());
        assert_eq!(behind("n1", &urls, Some((7, &moved)), Some(6)), want);
        assert_eq!(behind("n1", &urls, Some((7, &moved)), None), want);
        assert_eq!(behind("n1", &urls, Some((7, &moved)), Some(7)), None);
        assert_eq!(behind("n1", &urls, Some((7, &moved)), Some(8)), None);
        // Not declared yet: the controller's to do, not the host's.
        assert_eq!(behind("n1", &urls, Some((7, &old)), Some(6)), None);
        assert_eq!(behind("n1", &urls, Some((7, &none)), Some(6)), None);
        assert_eq!(behind("n1", &urls, None, None), None);
        let ctl = ControllerView {
            reachable: true,
            ready: true,
            ..ControllerView::default()
        };
        let rolled = |phase| {
            needs_action(
                &ctl,
                &[],
                &[],
                &[],
                &[],
                &[Behind {
                    rollout: Some(phase),
                    ..one.clone()
                }],
            )
            .remove(0)
        };
        let draining = rolled(Moved::Draining);
        assert_eq!(
            draining.what,
            "node n1 has not taken the move onto NATS at tls://10.0.0.5:4333: its host has not applied declaration 7"
        );
        assert!(
            draining.next.starts_with(
                "start its host on n1 now: the controller waits for it on RabbitMQ (60 s after `--confirm` unless `mesh controller --move-within` says otherwise)"
            ),
            "{}",
            draining.next
        );
        let left = rolled(Moved::Moved);
        assert_eq!(
            left.what,
            "node n1 was left behind on RabbitMQ by the move onto NATS at tls://10.0.0.5:4333: its host has not applied declaration 7"
        );
        assert!(
            left.next
                .starts_with("on n1: `mesh host --state DIR --broker tls://10.0.0.5:4333` (its key is in the new bus's user list); RabbitMQ's users stay until it reports there"),
            "{}",
            left.next
        );
        let a = needs_action(&ctl, &[], &[], &[], &[], &[one]);
        assert_eq!(
            a[0].what,
            "node n1 has not followed the broker to tls://10.0.0.5:4333: its host has not applied declaration 7"
        );
        assert!(
            a[0].next
                .contains("`mesh host --state DIR --broker tls://10.0.0.5:4333`"),
            "{}",
            a[0].next
        );
    }

    fn node(name: &str, enrolled: bool, liveness: &str, state: &str) -> NodeView {
        NodeView {
            node: name.into(),
            state: state.into(),
            host_key: None,
            enrolled_at: enrolled.then_some(1),
            last_seen_at: None,
            liveness: liveness.into(),
            address: None,
            ports: Default::default(),
        }
    }

    #[test]
    fn a_down_node_names_its_host_as_the_next_step() {
        let ctl = ControllerView {
            reachable: true,
            ready: true,
            ..Default::default()
        };
        let nodes = [
            node("n1", true, "ready", "enrolled"),
            node("n2", true, "down", "enrolled"),
            node("n3", false, "unseen", "token issued"),
        ];
        let a = needs_action(&ctl, &nodes, &[], &[], &[], &[]);
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a[0].what, "node n2 is down");
        assert_eq!(a[0].next, "check `mesh host` on n2");
        assert!(a[1].next.contains("mesh host --token"), "{a:?}");
    }

    #[test]
    fn an_unreachable_controller_comes_first() {
        let ctl = ControllerView {
            url: Some("http://127.0.0.1:7420".into()),
            ..Default::default()
        };
        let failed = ModuleView {
            module: "echo".into(),
            node: "n1".into(),
            state: "failed".into(),
            health: Some("unhealthy".into()),
            version: None,
            restarts: 3,
            reason: Some("exit status 1\nlast lines".into()),
            sequence: Some(2),
        };
        let unhealthy = ModuleView {
            module: "web".into(),
            state: "running".into(),
            reason: Some("GET http://127.0.0.1:8080/healthz answered 503: down".into()),
            ..failed.clone()
        };
        let healthy = ModuleView {
            module: "ok".into(),
            state: "running".into(),
            health: Some("healthy".into()),
            reason: None,
            ..failed.clone()
        };
        let a = needs_action(&ctl, &[], &[failed, unhealthy, healthy], &[], &[], &[]);
        assert_eq!(
            a[0].what,
            "the controller does not answer at http://127.0.0.1:7420"
        );
        // A failed module is said once, as failed.
        assert_eq!(a[1].what, "module echo on n1 failed: exit status 1");
        assert_eq!(
            a[2].what,
            "module web on n1 is unhealthy: GET http://127.0.0.1:8080/healthz answered 503: down"
        );
        assert!(a[2].next.contains("[health] check fails"), "{}", a[2].next);
        assert_eq!(a.len(), 3, "{a:?}");
    }

    #[test]
    fn a_module_left_out_is_named_with_the_reason_as_its_next_step() {
        let ctl = ControllerView {
            reachable: true,
            ready: true,
            ..Default::default()
        };
        let l = mesh_store::LeftOut {
            node: Name::new("n1").unwrap(),
            module: Name::new("echo").unwrap(),
            reason: "module echo: ${seat:db:5432} cannot be filled: assign its holder first".into(),
            since: 1,
        };
        let a = needs_action(&ctl, &[], &[], &[], &[l], &[]);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(
            a[0].what,
            "module echo is left out of the declaration of n1"
        );
        assert!(a[0].next.ends_with("assign its holder first"), "{a:?}");
    }
}
