//! What `mesh up` runs beneath its controller and host, and stops after
//! them: the broker's servers, and with `--ha` the store's PostgreSQL and
//! the second controller. Stopped in the order each needs the next: the
//! second controller (it uses the broker and the store), the broker, then
//! the store.

use std::path::PathBuf;
use std::process::ExitStatus;

use super::broker::{Broker, PidCell};
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

    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.broker.start().await
    }

    pub async fn exited(&mut self) -> (std::io::Result<ExitStatus>, PathBuf) {
        self.broker.exited().await
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
