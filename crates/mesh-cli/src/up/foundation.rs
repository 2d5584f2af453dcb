//! What `mesh up` runs beneath its controller and host, and stops after
//! them: the broker's servers, and with `--ha` the store's PostgreSQL and
//! the second controller. Stopped in the order each needs the next: the
//! second controller (it uses the broker and the store), the broker, then
//! the store.

use std::path::PathBuf;
use std::process::ExitStatus;

use super::broker::Broker;
use super::children::PidCell;
use super::postgres::Postgres;
use super::standby::Standby;

pub struct Foundation {
    pub broker: Broker,
    pub postgres: Option<Postgres>,
    pub standby: Option<Standby>,
}

impl Foundation {
    /// Every pid a second Ctrl-C kills.
    pub fn pid_cell(&self) -> PidCell {
        self.broker.pid_cell()
    }

    /// Starts whatever of it is not running.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.broker.start().await?;
        if let Some(s) = &mut self.standby {
            s.start_again(&self.broker.pid_cell())?;
        }
        Ok(())
    }

    /// Resolves when a server or the second controller exits: which, how,
    /// and where its log is.
    pub async fn exited(&mut self) -> (&'static str, std::io::Result<ExitStatus>, PathBuf) {
        let pids = self.broker.pid_cell();
        let standby = async {
            match &mut self.standby {
                Some(s) => {
                    let status = s.exited(&pids).await;
                    (status, s.log.clone())
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            (status, log) = self.broker.exited() => ("a broker server", status, log),
            (status, log) = standby => ("the second controller", status, log),
        }
    }

    /// The second controller first, at once: stopping after this
    /// process's, it would take the lease only to be stopped.
    pub async fn stop_standby(&mut self) {
        let pids = self.pid_cell();
        if let Some(s) = &mut self.standby {
            s.stop(crate::controller::STOP_LIMIT, &pids).await;
        }
    }

    /// A start cut short: what was started stopped, then how `mesh up`
    /// ends ([`super::cut_short`]).
    pub async fn cut_short(
        &mut self,
        why: Option<anyhow::Error>,
    ) -> anyhow::Result<std::process::ExitCode> {
        self.stop().await;
        super::cut_short(why)
    }

    pub async fn stop(&mut self) {
        let pids = self.pid_cell();
        if let Some(s) = &mut self.standby {
            s.stop(crate::controller::STOP_LIMIT, &pids).await;
        }
        self.broker.stop().await;
        if let Some(pg) = &mut self.postgres {
            pg.stop().await;
        }
    }
}
