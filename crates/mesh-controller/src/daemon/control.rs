//! The controller's CONTROL consumer through the bus seam: enrolments
//! (several at once) and reports (in batches, in order), bound again
//! whenever the deliveries end.

use std::sync::Arc;
use std::time::Duration;

use mesh_bus::seam::{Deliveries, Delivery};
use mesh_core::jetstream::ConsumerSpec;
use mesh_core::subjects;
use tokio::sync::Semaphore;
use tracing::warn;

use super::{Ctx, enrol, error_chain, report, retry_waits};

/// Takes what CONTROL delivers: enrolments (several at once: each waits for
/// a composition) and reports (in order). Binds, and binds again whenever
/// the delivery ends.
pub(super) async fn take_control(ctx: Arc<Ctx>) {
    let permits = Arc::new(Semaphore::new(ctx.opts.enrolments_at_once));
    let control = mesh_core::jetstream::controller_control();
    // A batch and the enrolments at work may all be unsettled at once.
    let prefetch = u16::try_from(REPORT_BATCH + ctx.opts.enrolments_at_once).unwrap_or(u16::MAX);
    loop {
        let mut deliveries = bind_deliveries(&ctx, &control, prefetch).await;
        deliver(&ctx, &permits, &mut deliveries).await;
        warn!("the CONTROL consumer stopped delivering; binding again");
    }
}

/// The deliveries of the controller's consumer `c` through the bus seam,
/// retried with backoff while the bus fails it (a consumer just asserted,
/// a broker just restarted): a failed bind is never the end of the
/// controller.
pub(super) async fn bind_deliveries(ctx: &Ctx, c: &ConsumerSpec, prefetch: u16) -> Deliveries {
    let mut waits = retry_waits();
    loop {
        match ctx.bus.consume(c, prefetch).await {
            Ok(d) => return d,
            Err(e) => {
                let wait = waits.next().unwrap_or(Duration::from_secs(5));
                warn!(error = %error_chain(&e), consumer = %c.name, stream = %c.stream, retry_in = ?wait, "cannot bind the consumer yet");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Reports taken from CONTROL at most at once: what has arrived is
/// recorded in one transaction (one commit, where one per report would be
/// one fsync per report), each then acknowledged on its own.
pub const REPORT_BATCH: usize = 256;

async fn deliver(ctx: &Arc<Ctx>, permits: &Arc<Semaphore>, messages: &mut Deliveries) {
    use futures::FutureExt as _;
    let mut batch: Vec<Delivery> = Vec::new();
    'delivering: loop {
        // Waits for the first; then takes what has already arrived.
        let next = if batch.is_empty() {
            messages.next().await
        } else {
            match messages.next().now_or_never() {
                Some(n) => n,
                None => {
                    report::take_batch(ctx, std::mem::take(&mut batch)).await;
                    continue;
                }
            }
        };
        let Some(next) = next else {
            break 'delivering;
        };
        let msg = match next {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "CONTROL delivery failed");
                continue;
            }
        };
        if subjects::is_enrolment(&msg.subject) {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let ctx = ctx.clone();
            tokio::spawn(async move {
                enrol::take(&ctx, msg).await;
                drop(permit);
            });
        } else {
            batch.push(msg);
            if batch.len() >= REPORT_BATCH {
                report::take_batch(ctx, std::mem::take(&mut batch)).await;
            }
        }
    }
    if !batch.is_empty() {
        report::take_batch(ctx, batch).await;
    }
}
