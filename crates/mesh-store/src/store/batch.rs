//! Reads for a batch of reports, each one statement however many nodes the
//! batch names: at 10,000 reports a second, a query per report is the cost.

use std::collections::{BTreeMap, BTreeSet};

use mesh_core::names::Name;

use super::name;
use crate::error::StoreError;
use crate::{Store, with_pool};

/// Names per `IN (…)` list: under every backend's bound-parameter limit.
pub(super) const PER_STATEMENT: usize = 1000;

impl Store {
    /// Each of `nodes`' newest declaration version (a node never declared
    /// to is absent).
    pub async fn latest_versions(&self, nodes: &[Name]) -> Result<BTreeMap<Name, i64>, StoreError> {
        let mut out = BTreeMap::new();
        for chunk in nodes.chunks(PER_STATEMENT) {
            let rows: Vec<(String, i64)> = with_pool!(self, |pool| {
                let mut q = sqlx::QueryBuilder::new(
                    "SELECT node, MAX(version) FROM declarations WHERE node IN (",
                );
                let mut list = q.separated(", ");
                for n in chunk {
                    list.push_bind(n.as_str());
                }
                q.push(") GROUP BY node");
                Ok(q.build_query_as().fetch_all(pool).await?)
            })?;
            for (n, v) in rows {
                out.insert(name("declaration", n)?, v);
            }
        }
        Ok(out)
    }

    /// The assignments of `nodes`, as (node, module).
    pub async fn assignments_on(
        &self,
        nodes: &[Name],
    ) -> Result<BTreeSet<(Name, Name)>, StoreError> {
        let mut out = BTreeSet::new();
        for chunk in nodes.chunks(PER_STATEMENT) {
            let rows: Vec<(String, String)> = with_pool!(self, |pool| {
                let mut q =
                    sqlx::QueryBuilder::new("SELECT node, module FROM assignments WHERE node IN (");
                let mut list = q.separated(", ");
                for n in chunk {
                    list.push_bind(n.as_str());
                }
                q.push(")");
                Ok(q.build_query_as().fetch_all(pool).await?)
            })?;
            for (n, m) in rows {
                out.insert((name("assignment", n)?, name("assignment", m)?));
            }
        }
        Ok(out)
    }

    /// The spare keys recorded for each of `nodes` that has some.
    pub async fn spare_keys_on(
        &self,
        nodes: &[Name],
    ) -> Result<BTreeMap<Name, Vec<String>>, StoreError> {
        let mut out: BTreeMap<Name, Vec<String>> = BTreeMap::new();
        for chunk in nodes.chunks(PER_STATEMENT) {
            let rows: Vec<(String, String)> = with_pool!(self, |pool| {
                let mut q =
                    sqlx::QueryBuilder::new("SELECT node, nkey FROM spare_keys WHERE node IN (");
                let mut list = q.separated(", ");
                for n in chunk {
                    list.push_bind(n.as_str());
                }
                q.push(") ORDER BY node, nkey");
                Ok(q.build_query_as().fetch_all(pool).await?)
            })?;
            for (n, k) in rows {
                out.entry(name("spare key", n)?).or_default().push(k);
            }
        }
        Ok(out)
    }

    /// The NKey public key recorded for each of `principals` that has one,
    /// by principal.
    pub async fn machine_keys(
        &self,
        principals: &[String],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let mut out = BTreeMap::new();
        for chunk in principals.chunks(PER_STATEMENT) {
            let rows: Vec<(String, String)> = with_pool!(self, |pool| {
                let mut q = sqlx::QueryBuilder::new(
                    "SELECT principal, nkey FROM credentials WHERE nkey IS NOT NULL AND principal IN (",
                );
                let mut list = q.separated(", ");
                for p in chunk {
                    list.push_bind(p.as_str());
                }
                q.push(")");
                Ok(q.build_query_as().fetch_all(pool).await?)
            })?;
            out.extend(rows);
        }
        Ok(out)
    }
}
