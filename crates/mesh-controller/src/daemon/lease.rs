//! The store's lease, kept by a task of its own: standing by while another
//! controller holds it, trying to take it; holding it while this one does,
//! confirming it well inside its length. What the task finds is a [`Role`]
//! the daemon follows: a term as the active controller begins when the
//! role turns active and ends when it turns back.
//!
//! A lost session (the store restarted, the connection cut) is not yet a
//! lost lease: the keeper takes it again if it can (the epoch moves, the
//! fence with it) and stays active meanwhile — every write of the term is
//! fenced, so nothing it does lands if another controller took over.

use std::path::Path;
use std::time::Duration;

use mesh_store::{Candidate, Lease, LeaseLost, Store, StoreError};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{AbortOnDrop, error_chain};

/// How often a standby tries to take the lease: a takeover waits at most
/// this long past the lock's release.
const TRY_EVERY: Duration = Duration::from_millis(250);

/// What this controller is, as its lease keeper found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// Nothing decided yet (the first try has not answered).
    Starting,
    /// Another controller holds the lease (`active` as its record names
    /// it), or the store cannot be asked.
    Standby {
        active: Option<String>,
    },
    Active {
        epoch: i64,
    },
    /// The store holds one controller and another has it (SQLite): this
    /// one cannot stand by.
    Refused(String),
}

/// How a term as the active controller ended.
pub(crate) enum Ended {
    Shutdown(crate::CountersView),
    /// The lease passed to another controller; why.
    Deposed(String),
    /// The bus connection was lost and its client does not reconnect by
    /// itself (RabbitMQ's): the term starts again, still holding the lease.
    Reconnect,
}

/// Who this controller is, as the lease records it.
pub(crate) fn candidate(dir: &Path, http: Option<std::net::SocketAddr>) -> Candidate {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "this machine".into());
    Candidate {
        holder: format!(
            "mesh controller on {host} (pid {}, {})",
            std::process::id(),
            dir.display()
        ),
        http: http.map(|a| a.to_string()),
    }
}

/// The task keeping the lease. Dropped, it ends, and with it the lease's
/// session: the lease is free, but its record still names this controller.
pub(crate) struct Keeper {
    task: AbortOnDrop,
    release: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Keeper {
    /// A clean stop: the lease given up, its record saying no controller
    /// holds it (see [`Lease::release`]); bounded by `within`.
    pub(crate) async fn release(mut self, within: Duration) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(within, &mut self.task.0)
            .await
            .is_err()
        {
            warn!(limit = ?within, "the lease was not released in time; it ends with this process's session");
        }
    }
}

/// Starts keeping `lease` (whose fenced store is `fenced`).
pub(crate) fn keep(lease: Lease, fenced: Store) -> (watch::Receiver<Role>, Keeper) {
    let (tx, rx) = watch::channel(Role::Starting);
    let (release, released) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut lease = lease;
        tokio::select! {
            () = keeper(&mut lease, fenced, tx) => {}
            _ = released => {
                if let Err(e) = lease.release().await {
                    warn!(error = %error_chain(&e), "the lease's record still names this controller");
                }
            }
        }
    });
    let keeper = Keeper {
        task: AbortOnDrop(task),
        release: Some(release),
    };
    (rx, keeper)
}

async fn keeper(lease: &mut Lease, fenced: Store, role: watch::Sender<Role>) {
    let mut waits = super::retry_waits();
    loop {
        // Standing by.
        let epoch = loop {
            match lease.try_take().await {
                Ok(Some(epoch)) => break epoch,
                Ok(None) => {
                    let active = fenced
                        .lease_record()
                        .await
                        .ok()
                        .flatten()
                        .and_then(|r| r.holder);
                    let said = active.clone();
                    if role.send_if_modified(|r| set(r, Role::Standby { active })) {
                        info!(
                            active = said.as_deref().unwrap_or("none recorded"),
                            "standing by: another controller holds the lease"
                        );
                    }
                    tokio::time::sleep(TRY_EVERY).await;
                }
                Err(e @ StoreError::ControllerRunning { .. }) => {
                    role.send_replace(Role::Refused(e.to_string()));
                    return;
                }
                Err(e) => {
                    let wait = waits.next().unwrap_or(Duration::from_secs(5));
                    warn!(error = %error_chain(&e), retry_in = ?wait, "cannot ask the store for the lease");
                    role.send_if_modified(|r| set(r, Role::Standby { active: None }));
                    tokio::time::sleep(wait).await;
                }
            }
        };
        role.send_replace(Role::Active { epoch });
        // Holding: confirmed four times a lease, and at once when a write
        // found the epoch moved.
        let lost = loop {
            tokio::select! {
                () = tokio::time::sleep(lease.ttl() / 4) => {}
                // Bounded: a refusal the keep then does not confirm must
                // not turn this loop into a spin.
                _ = fenced.deposed() => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            match lease.keep().await {
                Ok(()) => continue,
                Err(lost @ LeaseLost::Moved { .. }) => break error_chain(&lost),
                Err(lost) => {
                    warn!(error = %error_chain(&lost), "the lease's session ended; taking the lease again");
                    match take_again(lease).await {
                        Some(epoch) => {
                            info!(epoch, "lease taken again");
                            role.send_replace(Role::Active { epoch });
                        }
                        None => break "another controller took the lease".to_string(),
                    }
                }
            }
        };
        warn!(reason = %lost, "lease lost");
        role.send_replace(Role::Standby { active: None });
    }
}

/// After a lost session: the lease again (its epoch), or none once another
/// controller holds it. While the store cannot be asked, this controller
/// stays active: its writes fail there as everyone's do.
async fn take_again(lease: &mut Lease) -> Option<i64> {
    let mut waits = super::retry_waits();
    loop {
        match lease.try_take().await {
            Ok(taken) => return taken,
            Err(e) => {
                let wait = waits.next().unwrap_or(Duration::from_secs(5));
                warn!(error = %error_chain(&e), retry_in = ?wait, "cannot take the lease again yet");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn set(r: &mut Role, to: Role) -> bool {
    if *r == to {
        return false;
    }
    *r = to;
    true
}

/// Resolves with the epoch once the role is active; an error when this
/// controller cannot stand by.
pub(crate) async fn active(roles: &mut watch::Receiver<Role>) -> Result<i64, String> {
    loop {
        match &*roles.borrow_and_update() {
            Role::Active { epoch } => return Ok(*epoch),
            Role::Refused(why) => return Err(why.clone()),
            Role::Starting | Role::Standby { .. } => {}
        }
        if roles.changed().await.is_err() {
            return Err("the lease keeper stopped".into());
        }
    }
}

/// Resolves once the role is no longer active: why.
pub(crate) async fn lost(roles: &mut watch::Receiver<Role>) -> String {
    let r = roles
        .wait_for(|r| !matches!(r, Role::Active { .. }))
        .await
        .map(|r| r.clone());
    match r {
        Ok(Role::Standby {
            active: Some(holder),
        }) => format!("{holder} holds the lease"),
        Ok(_) => "the lease passed to another controller".into(),
        Err(_) => "the lease keeper stopped".into(),
    }
}
