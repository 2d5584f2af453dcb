//! A deployment (DESIGN "health and deploys"): one module's pin moved to a
//! version over its nodes — a canary first, then batches, each waiting for
//! every node in it to stay healthy for a window within a deadline. A node
//! that fails halts it, and unless told otherwise every node it touched
//! goes back to the version it ran before. The controller carries out the
//! steps [`next`] returns and decides nothing; a standby resumes from the
//! record, and a node already on the version is never moved again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::names::Name;

/// How many nodes a batch after the canary takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchSize {
    Nodes(u32),
    /// Of the deployment's nodes, rounded up.
    Percent(u8),
}

/// What `mesh deploy` asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub module: Name,
    pub version: String,
    /// In the order they are moved.
    pub nodes: Vec<Name>,
    /// The first batch's size (0: none).
    pub canary: u32,
    pub batch: BatchSize,
    /// How long each node of a batch must stay healthy (ms).
    pub healthy_for_ms: u64,
    /// How long a batch may take to be healthy, from its start (ms).
    pub deadline_ms: u64,
    pub auto_revert: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "a deployment needs at least one node; name them with --nodes, or assign {module} first"
    )]
    NoNodes { module: Name },
    #[error(
        "a batch of 0 nodes would never finish; give --batch 1 or more (or a percentage above 0)"
    )]
    EmptyBatch,
    #[error("a percentage is at most 100; --batch {0}% names more nodes than there are")]
    Percent(u8),
    #[error("node {0} is named twice; each node is moved once")]
    Twice(Name),
    #[error(
        "module {module} is not assigned to node {node}: a deployment moves only the nodes running it (`mesh assign {module} {node}` first)"
    )]
    NotAssigned { module: Name, node: Name },
}

impl Spec {
    /// Refuses what could never finish or would move a node twice.
    /// `assigned`: the nodes the module is assigned to.
    pub fn check(&self, assigned: &[Name]) -> Result<(), SpecError> {
        if self.nodes.is_empty() {
            return Err(SpecError::NoNodes {
                module: self.module.clone(),
            });
        }
        match self.batch {
            BatchSize::Nodes(0) | BatchSize::Percent(0) => return Err(SpecError::EmptyBatch),
            BatchSize::Percent(p) if p > 100 => return Err(SpecError::Percent(p)),
            _ => {}
        }
        let mut seen = std::collections::BTreeSet::new();
        for n in &self.nodes {
            if !seen.insert(n) {
                return Err(SpecError::Twice(n.clone()));
            }
            if !assigned.contains(n) {
                return Err(SpecError::NotAssigned {
                    module: self.module.clone(),
                    node: n.clone(),
                });
            }
        }
        Ok(())
    }

    /// The batches, in order: the canary, then the rest in batches of
    /// [`Spec::batch`] (the last may be smaller).
    pub fn batches(&self) -> Vec<Vec<Name>> {
        let total = self.nodes.len();
        let size = match self.batch {
            BatchSize::Nodes(n) => n as usize,
            BatchSize::Percent(p) => (total * usize::from(p)).div_ceil(100),
        }
        .max(1);
        let canary = (self.canary as usize).min(total);
        let (first, rest) = self.nodes.split_at(canary);
        let mut out = Vec::new();
        if !first.is_empty() {
            out.push(first.to_vec());
        }
        out.extend(rest.chunks(size).map(<[Name]>::to_vec));
        out
    }
}

/// Where a deployment is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    /// Moving batch `batch` (0-based), begun at `started_ms`.
    Running {
        batch: usize,
        started_ms: u64,
    },
    /// Held by an operator at `batch`; resumed where it was.
    Paused {
        batch: usize,
    },
    Succeeded,
    /// A node failed and auto-revert is off: left as it is.
    Halted {
        node: Name,
        reason: String,
    },
    /// A node failed (or an operator asked): every node it touched went
    /// back to the version it ran before.
    Reverted {
        node: Option<Name>,
        reason: String,
    },
}

/// As listings say it: `running batch 2`, `reverted at n1: …`.
impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Running { batch, .. } => write!(f, "running batch {}", batch + 1),
            State::Paused { batch } => write!(f, "paused at batch {}", batch + 1),
            State::Succeeded => f.write_str("succeeded"),
            State::Halted { node, reason } => write!(f, "halted at {node}: {reason}"),
            State::Reverted {
                node: Some(node),
                reason,
            } => write!(f, "reverted at {node}: {reason}"),
            State::Reverted { node: None, reason } => write!(f, "reverted: {reason}"),
        }
    }
}

/// The record: what was asked, each node's version before, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    pub spec: Spec,
    /// Each node's pinned version when the deployment was made.
    pub previous: BTreeMap<Name, String>,
    pub state: State,
}

/// A node's module as its newest report and the records say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// The version its assignment is pinned to in the records.
    pub pinned: Option<String>,
    /// The version the host reports running; none before it reports.
    pub running: Option<String>,
    pub health: Health,
}

/// A module's health as its host reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "health", rename_all = "snake_case")]
pub enum Health {
    Starting,
    /// Healthy without a break since `since_ms`.
    Healthy {
        since_ms: u64,
    },
    /// The check failed (its output), or the process keeps exiting.
    Unhealthy {
        reason: String,
    },
}

/// What the controller does next, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Pin the module on `node` to `version` (the declaration follows).
    Pin { node: Name, version: String },
    /// Record the deployment's new state.
    Record { state: State },
}

/// The steps that move `d` on, given each node's module as observed now.
/// A node missing from `observed` is one not heard from yet: starting.
pub fn next(d: &Deployment, observed: &BTreeMap<Name, Observed>, now_ms: u64) -> Vec<Step> {
    let State::Running { batch, started_ms } = d.state else {
        return Vec::new();
    };
    let batches = d.spec.batches();
    let Some(nodes) = batches.get(batch) else {
        return vec![Step::Record {
            state: State::Succeeded,
        }];
    };
    let target = &d.spec.version;
    let starting = Observed {
        pinned: None,
        running: None,
        health: Health::Starting,
    };
    let of = |n: &Name| observed.get(n).unwrap_or(&starting);

    // A failed node halts the deployment before anything else moves.
    let failed = nodes.iter().find_map(|n| match &of(n).health {
        Health::Unhealthy { reason } if of(n).running.as_ref() == Some(target) => {
            Some((n, format!("unhealthy on {target}: {reason}")))
        }
        _ => None,
    });
    let late = now_ms.saturating_sub(started_ms) > d.spec.deadline_ms;
    let failed = failed.or_else(|| {
        late.then(|| {
            nodes
                .iter()
                .find(|n| !healthy_long_enough(of(n), target, d.spec.healthy_for_ms, now_ms))
                .map(|n| {
                    (
                        n,
                        format!(
                            "not healthy on {target} for {} s within the deadline of {} s",
                            d.spec.healthy_for_ms / 1000,
                            d.spec.deadline_ms / 1000
                        ),
                    )
                })
        })?
    });
    if let Some((node, reason)) = failed {
        return halt(d, &batches[..=batch], node.clone(), reason);
    }

    let mut steps: Vec<Step> = nodes
        .iter()
        .filter(|n| of(n).pinned.as_ref() != Some(target))
        .map(|n| Step::Pin {
            node: n.clone(),
            version: target.clone(),
        })
        .collect();
    let done = steps.is_empty()
        && nodes
            .iter()
            .all(|n| healthy_long_enough(of(n), target, d.spec.healthy_for_ms, now_ms));
    if done {
        let state = if batch + 1 < batches.len() {
            State::Running {
                batch: batch + 1,
                started_ms: now_ms,
            }
        } else {
            State::Succeeded
        };
        steps.push(Step::Record { state });
    }
    steps
}

/// Whether a node runs `target` and has been healthy for `window`.
fn healthy_long_enough(o: &Observed, target: &str, window: u64, now_ms: u64) -> bool {
    o.running.as_deref() == Some(target)
        && matches!(o.health, Health::Healthy { since_ms } if now_ms.saturating_sub(since_ms) >= window)
}

/// Halted at `node`: every node of `touched` back to its version before
/// (auto-revert), or left as it is.
fn halt(d: &Deployment, touched: &[Vec<Name>], node: Name, reason: String) -> Vec<Step> {
    if !d.spec.auto_revert {
        return vec![Step::Record {
            state: State::Halted { node, reason },
        }];
    }
    let mut steps = revert_steps(d, touched.iter().flatten());
    steps.push(Step::Record {
        state: State::Reverted {
            node: Some(node),
            reason,
        },
    });
    steps
}

/// Each node back to the version it ran before (a node without one, newly
/// assigned, keeps the deployment's: there is nothing to go back to).
fn revert_steps<'a>(d: &Deployment, nodes: impl Iterator<Item = &'a Name>) -> Vec<Step> {
    nodes
        .filter_map(|n| {
            d.previous.get(n).map(|v| Step::Pin {
                node: n.clone(),
                version: v.clone(),
            })
        })
        .collect()
}

/// An operator's `--revert`: every node the deployment may have touched
/// (those of the batches begun) back to its version before.
pub fn revert(d: &Deployment, reason: &str) -> Vec<Step> {
    let begun = match d.state {
        State::Running { batch, .. } | State::Paused { batch } => batch + 1,
        State::Succeeded => usize::MAX,
        State::Halted { .. } => usize::MAX,
        State::Reverted { .. } => return Vec::new(),
    };
    let batches = d.spec.batches();
    let mut steps = revert_steps(d, batches.iter().take(begun).flatten());
    steps.push(Step::Record {
        state: State::Reverted {
            node: None,
            reason: reason.to_string(),
        },
    });
    steps
}

#[cfg(test)]
mod tests;
