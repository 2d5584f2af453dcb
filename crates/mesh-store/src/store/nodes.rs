//! Nodes: the machines of the mesh and the ports each was given; forgetting
//! one takes every record that names it.

use std::collections::BTreeMap;

use mesh_core::names::Name;

use super::{name, not_found};
use crate::error::{MalformedValue, StoreError};
use crate::records::{Forgotten, Node};
use crate::{Millis, Store, now_ms, with_pool};

/// Records `$ports` (checked, see `check_ports`) for `$node` in `$tx`.
macro_rules! insert_ports {
    ($tx:ident, $node:expr, $ports:expr) => {
        for p in $ports {
            sqlx::query("INSERT INTO node_ports (node, port) VALUES ($1, $2)")
                .bind($node.as_str())
                .bind(i64::from(*p))
                .execute(&mut *$tx)
                .await?;
        }
    };
}

/// Deletes every record naming `$node` in `$tx` (the node itself last) and
/// evaluates to what was forgotten; shared by `forget_node` and a fleet
/// change that prunes, so both forget the same things.
macro_rules! forget_node_in {
    ($tx:ident, $node:expr) => {{
        let node: &::mesh_core::names::Name = $node;
        let tx = &mut $tx;
            // By the node column, not by parsing principal names: a host's and
            // every module's credential on this node carry it.
            let principals: Vec<(String,)> =
                sqlx::query_as("DELETE FROM credentials WHERE node = $1 RETURNING principal")
                    .bind(node.as_str())
                    .fetch_all(&mut **tx)
                    .await?;
            let assignments = sqlx::query("DELETE FROM assignments WHERE node = $1")
                .bind(node.as_str())
                .execute(&mut **tx)
                .await?
                .rows_affected();
            // Children first, so nothing depends on the foreign keys cascading.
            for table in [
                "DELETE FROM report_outcomes WHERE report_id IN (SELECT id FROM reports WHERE node = $1)",
                "DELETE FROM reports WHERE node = $1",
                "DELETE FROM declarations WHERE node = $1",
                "DELETE FROM enrolment_tokens WHERE node = $1",
                "DELETE FROM node_ports WHERE node = $1",
                "DELETE FROM node_seat_ports WHERE node = $1",
                "DELETE FROM left_out WHERE node = $1",
                "DELETE FROM spare_keys WHERE node = $1",
                "DELETE FROM nodes WHERE name = $1",
            ] {
                sqlx::query(table)
                    .bind(node.as_str())
                    .execute(&mut **tx)
                    .await?;
            }
        let mut credentials: Vec<String> = principals.into_iter().map(|(p,)| p).collect();
        credentials.sort();
        $crate::records::Forgotten {
            credentials,
            assignments,
        }
    }};
}
pub(crate) use forget_node_in;

fn port(p: i64) -> Result<u16, StoreError> {
    u16::try_from(p).map_err(|_| StoreError::malformed("node", MalformedValue::Port(p)))
}

type NodeRow = (
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

fn node_from(row: NodeRow, ports: Vec<u16>) -> Result<Node, StoreError> {
    Ok(Node {
        name: name("node", row.0)?,
        public_key: row.1,
        xkey: row.2,
        ports,
        created_at: row.3,
        enrolled_at: row.4,
        last_seen_at: row.5,
        address: row.6,
    })
}

fn check_ports(ports: &[u16]) -> Result<Vec<u16>, StoreError> {
    if ports.contains(&0) {
        return Err(StoreError::Invalid {
            what: "port 0",
            detail: "ports run from 1 to 65535".into(),
        });
    }
    let mut p = ports.to_vec();
    p.sort_unstable();
    p.dedup();
    Ok(p)
}

const NODE_COLUMNS: &str = "name, public_key, xkey, created_at, enrolled_at, last_seen_at, address";

impl Store {
    /// Records a new node (not yet enrolled). Refused if the name is taken.
    pub async fn add_node(&self, node: &Name, ports: &[u16]) -> Result<Node, StoreError> {
        let ports = check_ports(ports)?;
        let now = now_ms();
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let inserted = sqlx::query(
                "INSERT INTO nodes (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(node.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "node",
                    key: node.to_string(),
                }
                .into());
            }
            insert_ports!(tx, node, &ports);
            tx.commit().await?;
            Ok(())
        })?;
        Ok(Node {
            name: node.clone(),
            public_key: None,
            xkey: None,
            ports,
            created_at: now,
            enrolled_at: None,
            last_seen_at: None,
            address: None,
        })
    }

    /// Records where other nodes reach `node` (`None`: nowhere known).
    /// Writing the address it has changes nothing (no declaration moves).
    pub async fn set_node_address(
        &self,
        node: &Name,
        address: Option<&str>,
    ) -> Result<(), StoreError> {
        if let Some(a) = address {
            mesh_core::names::check_address(a).map_err(|detail| StoreError::Invalid {
                what: "a node address",
                detail,
            })?;
        }
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            sqlx::query(
                "UPDATE nodes SET address = $1 WHERE name = $2 AND address IS DISTINCT FROM $1",
            )
            .bind(address)
            .bind(node.as_str())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Gives `seat`'s holder on `node` port `port` (`None`: the manifest's
    /// number again).
    pub async fn set_node_seat_port(
        &self,
        node: &Name,
        seat: &Name,
        port: Option<u16>,
    ) -> Result<(), StoreError> {
        if port == Some(0) {
            return Err(StoreError::Invalid {
                what: "port 0",
                detail: "ports run from 1 to 65535".into(),
            });
        }
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            match port {
                Some(p) => {
                    sqlx::query(
                        "INSERT INTO node_seat_ports (node, seat, port) VALUES ($1, $2, $3) \
                         ON CONFLICT (node, seat) DO UPDATE SET port = excluded.port \
                         WHERE node_seat_ports.port <> excluded.port",
                    )
                    .bind(node.as_str())
                    .bind(seat.as_str())
                    .bind(i64::from(p))
                    .execute(&mut *tx)
                    .await?;
                }
                None => {
                    sqlx::query("DELETE FROM node_seat_ports WHERE node = $1 AND seat = $2")
                        .bind(node.as_str())
                        .bind(seat.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every port a node gives a seat: (node, seat, port), by node and seat.
    pub async fn node_seat_ports(&self) -> Result<Vec<(Name, Name, u16)>, StoreError> {
        let rows = with_pool!(self, |pool| {
            let rows: Vec<(String, String, i64)> =
                sqlx::query_as("SELECT node, seat, port FROM node_seat_ports ORDER BY node, seat")
                    .fetch_all(pool)
                    .await?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(n, s, p)| Ok((name("node", n)?, name("seat", s)?, port(p)?)))
            .collect()
    }

    /// Replaces the ports given to `node`.
    pub async fn set_node_ports(&self, node: &Name, ports: &[u16]) -> Result<(), StoreError> {
        let ports = check_ports(ports)?;
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            sqlx::query("DELETE FROM node_ports WHERE node = $1")
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?;
            insert_ports!(tx, node, &ports);
            tx.commit().await?;
            Ok(())
        })
    }

    pub async fn node(&self, node: &Name) -> Result<Option<Node>, StoreError> {
        let (row, ports) = with_pool!(self, |pool| {
            let row: Option<NodeRow> =
                sqlx::query_as(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = $1"))
                    .bind(node.as_str())
                    .fetch_optional(pool)
                    .await?;
            let ports: Vec<(i64,)> =
                sqlx::query_as("SELECT port FROM node_ports WHERE node = $1 ORDER BY port")
                    .bind(node.as_str())
                    .fetch_all(pool)
                    .await?;
            Ok((row, ports))
        })?;
        let Some(row) = row else { return Ok(None) };
        let ports = ports
            .into_iter()
            .map(|(p,)| port(p))
            .collect::<Result<_, _>>()?;
        node_from(row, ports).map(Some)
    }

    /// Every node, by name.
    pub async fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        let (rows, ports) = with_pool!(self, |pool| {
            let rows: Vec<NodeRow> =
                sqlx::query_as(&format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY name"))
                    .fetch_all(pool)
                    .await?;
            let ports: Vec<(String, i64)> =
                sqlx::query_as("SELECT node, port FROM node_ports ORDER BY node, port")
                    .fetch_all(pool)
                    .await?;
            Ok((rows, ports))
        })?;
        let mut by_node: BTreeMap<String, Vec<u16>> = BTreeMap::new();
        for (n, p) in ports {
            by_node.entry(n).or_default().push(port(p)?);
        }
        rows.into_iter()
            .map(|row| {
                let ports = by_node.remove(&row.0).unwrap_or_default();
                node_from(row, ports)
            })
            .collect()
    }

    /// Records that `node` was heard from at `at` (a heartbeat).
    pub async fn node_seen(&self, node: &Name, at: Millis) -> Result<(), StoreError> {
        let done = with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let done = sqlx::query("UPDATE nodes SET last_seen_at = $1 WHERE name = $2")
                .bind(at)
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(done)
        })?;
        if done == 0 {
            return Err(not_found("node", node));
        }
        Ok(())
    }

    /// Records a batch of last-seen times in one transaction (the
    /// controller keeps them in memory and writes them every few seconds).
    /// Nodes no longer recorded are skipped: a node forgotten meanwhile.
    pub async fn nodes_seen(&self, seen: &[(Name, Millis)]) -> Result<u64, StoreError> {
        if seen.is_empty() {
            return Ok(0);
        }
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            let mut done = 0;
            for (node, at) in seen {
                // Never backwards: a batch delayed behind a newer one.
                done += sqlx::query(
                    "UPDATE nodes SET last_seen_at = $1 WHERE name = $2 \
                     AND (last_seen_at IS NULL OR last_seen_at < $1)",
                )
                .bind(*at)
                .bind(node.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
            tx.commit().await?;
            Ok(done)
        })
    }

    /// The records revision: it moves whenever a record principals or bus
    /// objects are derived from changes (triggers move it, whoever writes).
    pub async fn records_revision(&self) -> Result<i64, StoreError> {
        with_pool!(self, |pool| {
            let (r,): (i64,) = sqlx::query_as("SELECT revision FROM records_revision WHERE id = 1")
                .fetch_one(pool)
                .await?;
            Ok(r)
        })
    }

    /// The revision of each kind of input (`nodes`, `tokens`,
    /// `credentials`, `persons`, `catalogue`, `assignments`, `secrets`,
    /// `bus`), in one read.
    pub async fn records_revisions(
        &self,
    ) -> Result<std::collections::BTreeMap<String, i64>, StoreError> {
        let rows: Vec<(String, i64)> = with_pool!(self, |pool| {
            Ok(
                sqlx::query_as("SELECT kind, revision FROM records_revisions")
                    .fetch_all(pool)
                    .await?,
            )
        })?;
        Ok(rows.into_iter().collect())
    }

    /// Forgets `node`: deletes the credentials of its host and of every module
    /// on it, its assignments, tokens, ports, declarations and reports.
    pub async fn forget_node(&self, node: &Name) -> Result<Forgotten, StoreError> {
        with_pool!(self, |pool| {
            let mut tx = self.begin_write_on(pool).await?;
            must_exist!(tx, "node" in "nodes", node);
            let forgotten = forget_node_in!(tx, node);
            tx.commit().await?;
            Ok(forgotten)
        })
    }
}
