//! The report a host sends after applying (or refusing) a declaration.

use super::*;

impl Applier {
    /// Reports every module the last declaration names, as the driver sees
    /// it now. Published to CONTROL and confirmed stored.
    pub async fn report(&self, client: &Bus, refused: Option<String>) {
        let applied = self.applied.lock().await;
        let status = self.driver.status();
        let not_started = self.not_started_lock().clone();
        let modules = applied
            .modules
            .iter()
            .map(|m| {
                let s = status.iter().find(|s| s.module == m.name);
                let refused = not_started.get(&m.name);
                let state = match (s, refused) {
                    (_, Some(_)) => ModuleState::Failed,
                    (Some(s), None) => s.state,
                    (None, None) => ModuleState::Stopped,
                };
                let reason = refused
                    .cloned()
                    .or_else(|| s.and_then(|s| s.reason.clone()));
                ModuleReport {
                    name: m.name.clone(),
                    state,
                    health: Some(self.health.of(&m.name, state, reason.as_deref())),
                    pinned: m.pinned.clone(),
                    reason,
                    restarts: s.map_or(0, |s| s.restarts),
                    nkey: self.public_key(&m.name),
                }
            })
            .collect();
        let advertised = std::fs::read_to_string(self.state.dir.join(ADVERTISED_FILE)).ok();
        let address = self
            .advertise
            .clone()
            .filter(|a| advertised.as_deref() != Some(a.as_str()));
        let spare_keys = match crate::spare::top_up(&self.state.dir) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(reason = %e, "spare module keys not made");
                crate::spare::list(&self.state.dir)
            }
        };
        // Every key announced, with its hash: a mesh moved onto RabbitMQ
        // admits them without asking again.
        let mut amqp_hashes = crate::spare::hashes(&self.state.dir, &spare_keys);
        amqp_hashes.extend(
            applied
                .modules
                .iter()
                .filter_map(|m| self.announced_key(&m.name)),
        );
        let report = Report {
            id: report_id(),
            node: self.state.node.clone(),
            sequence: applied.sequence.unwrap_or(0),
            modules,
            refused,
            address: address.clone(),
            spare_keys,
            amqp_hashes,
        };
        drop(applied);
        let payload = report.to_json();
        // Tried again (the same id: recorded once however often it lands)
        // while the server cannot store it — a broker reloading a large
        // users file answers "no responders" for a moment — up to
        // REPORT_TRIES times, the waits doubling.
        let mut wait = REPORT_RETRY_START;
        for attempt in 1..=REPORT_TRIES {
            let stored = client
                .publish_stored(&subjects::report(&self.state.node), &payload)
                .await
                .map_err(|e| crate::dial::chain(&e));
            match stored {
                Ok(()) => {
                    if let Some(a) = address
                        && let Err(e) =
                            write_private(&self.state.dir.join(ADVERTISED_FILE), a.as_bytes())
                    {
                        tracing::warn!(reason = %e, "the advertised address was not noted; it is reported again");
                    }
                    return;
                }
                Err(reason) if attempt < REPORT_TRIES => {
                    tracing::info!(%reason, attempt, retry_in = ?wait, "the report was not stored; sending it again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(REPORT_RETRY_MAX);
                }
                Err(reason) => {
                    tracing::warn!(%reason, attempts = REPORT_TRIES, "the report was not stored; giving up (the next change or reconnection reports again)")
                }
            }
        }
    }
}

/// How often a report the server did not store is sent, and the waits
/// between: about a minute in all.
const REPORT_TRIES: u32 = 8;
const REPORT_RETRY_START: Duration = Duration::from_millis(250);
const REPORT_RETRY_MAX: Duration = Duration::from_secs(15);

/// 16 random bytes, hex: unique per report, so a redelivered one is
/// recorded once.
fn report_id() -> String {
    use rand::RngCore as _;
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}
