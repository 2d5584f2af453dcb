//! The JSON API: what `mesh status|nodes|modules|seats|reports --output
//! json` print, from the same views, so a script can read either.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mesh_core::names::Name;
use mesh_state::views::{self, ControllerView, ViewError};
use serde::{Deserialize, Serialize};

use super::Shared;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/status", get(status))
        .route("/api/nodes", get(nodes))
        .route("/api/modules", get(modules))
        .route("/api/seats", get(seats))
        .route("/api/catalogue", get(catalogue))
        .route("/api/reports/{node}", get(reports))
        .route("/api/audit", get(audit))
        .route("/api/deployments", get(deployments))
        .route("/api/rollout/check", get(rollout_check))
        .route("/graph.svg", get(graph))
}

fn answer<T: Serialize>(read: Result<T, ViewError>) -> Response {
    match read {
        Ok(v) => Json(v).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::chain::error_chain(&e)),
        )
            .into_response(),
    }
}

fn now() -> u64 {
    u64::try_from(mesh_store::now_ms()).unwrap_or(0)
}

/// The controller as it sees itself.
pub(crate) fn controller_view(shared: &Shared) -> ControllerView {
    let reason = shared.not_ready();
    let status = shared.composer_status();
    ControllerView {
        reachable: true,
        url: None,
        controller_key: Some(shared.controller_key.clone()),
        other_mesh: None,
        ready: reason.is_none(),
        reason,
        broker_connected: Some(shared.running().is_some_and(|c| c.broker_connected())),
        composition_live: Some(status.last.as_ref().is_some_and(|o| o.is_live())),
        composition_generation: status.last.as_ref().map(|o| o.generation()),
        compositions: Some(status.compositions),
        store_window_open: Some(shared.window_open()),
        role: shared.role().and_then(|r| match r {
            crate::daemon::Role::Active { .. } => Some("active".into()),
            crate::daemon::Role::Standby { .. } => Some("standby".into()),
            crate::daemon::Role::Starting | crate::daemon::Role::Refused(_) => None,
        }),
    }
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let controller = controller_view(&shared);
    answer(views::status(&shared.store, now(), controller).await)
}

/// Asked of the active controller only: a standby's dial would prove
/// nothing about the mesh's own connection.
async fn rollout_check(State(shared): State<Arc<Shared>>) -> Response {
    let Some(running) = shared.running() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "this controller is not the active one: ask the active controller (`mesh status` names it)\n",
        )
            .into_response();
    };
    match running.rollout().await {
        Ok(r) => Json(r).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

async fn nodes(State(shared): State<Arc<Shared>>) -> Response {
    answer(views::nodes(&shared.store, now()).await)
}

async fn modules(State(shared): State<Arc<Shared>>) -> Response {
    answer(views::modules(&shared.store).await)
}

async fn deployments(State(shared): State<Arc<Shared>>, Query(q): Query<Limit>) -> Response {
    let limit = q.limit.map_or(20, |l| l.clamp(1, 1000));
    match mesh_state::deployments::listed(&shared.store, None, limit).await {
        Ok(rows) => Json(rows).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::chain::error_chain(&e)),
        )
            .into_response(),
    }
}

async fn seats(State(shared): State<Arc<Shared>>) -> Response {
    answer(views::seats(&shared.store).await)
}

async fn catalogue(State(shared): State<Arc<Shared>>) -> Response {
    answer(views::catalogue(&shared.store).await)
}

#[derive(Debug, Deserialize)]
struct Limit {
    limit: Option<u32>,
}

async fn reports(
    State(shared): State<Arc<Shared>>,
    Path(node): Path<String>,
    Query(q): Query<Limit>,
) -> Response {
    let Ok(node) = Name::new(&node) else {
        return (StatusCode::BAD_REQUEST, "not a node name\n").into_response();
    };
    answer(views::reports(&shared.store, &node, q.limit.unwrap_or(10).min(1000)).await)
}

/// The newest rows of the audit trail, newest first (`mesh audit` lists
/// them oldest first): who changed what, and what was refused.
async fn audit(State(shared): State<Arc<Shared>>, Query(q): Query<Limit>) -> Response {
    let filter = mesh_store::AuditFilter {
        since: None,
        who: None,
        limit: Some(i64::from(q.limit.unwrap_or(20).min(1000))),
    };
    match shared.store.audit(&filter).await {
        Ok(mut rows) => {
            rows.reverse();
            Json(rows).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::chain::error_chain(&e)),
        )
            .into_response(),
    }
}

/// The registered catalogue drawn as `mesh catalogue graph --format svg`
/// draws it: the same function, so the page and the command agree.
async fn graph(State(shared): State<Arc<Shared>>) -> Response {
    match mesh_state::registered::catalogue(&shared.store).await {
        Ok(c) => (
            [(axum::http::header::CONTENT_TYPE, "image/svg+xml")],
            mesh_core::catalogue::graph_svg(&c),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::chain::error_chain(&e)),
        )
            .into_response(),
    }
}
