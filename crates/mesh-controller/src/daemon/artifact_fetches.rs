//! Artifacts handed to hosts over the bus, on a mesh whose bus keeps none
//! (RabbitMQ): each request on `mesh.controller.artifact.<node>` — the node
//! is the broker's word, as only its host may publish there — is decided by
//! `mesh_core::artifact_fetch` against that node's newest declaration, and
//! answered with the piece read from the artifacts this controller keeps.

use std::sync::Arc;

use base64::Engine as _;
use mesh_bus::seam::{Message, Messages};
use mesh_core::artifact_fetch::{Decision, FetchRequest, Piece, decide};
use mesh_core::names::Name;
use mesh_core::tool::ToolReply;
use tracing::warn;

use super::{Ctx, error_chain};

pub(crate) async fn serve(ctx: Arc<Ctx>, mut requests: Messages) {
    while let Some(m) = requests.next().await {
        let Ok(m) = m else { continue };
        if m.reply.is_none() {
            continue;
        }
        let answer = answer(&ctx, &m).await;
        if let Err(e) = ctx.bus.respond(&m, &answer.to_json()).await {
            warn!(error = %error_chain(&e), "an artifact piece was not sent");
        }
    }
}

async fn answer(ctx: &Ctx, m: &Message) -> ToolReply {
    let Some(node) = m
        .subject
        .strip_prefix("mesh.controller.artifact.")
        .and_then(|n| Name::new(n).ok())
    else {
        return ToolReply::Error("no node's artifact request".into());
    };
    let Ok(req) = serde_json::from_slice::<FetchRequest>(&m.payload) else {
        return ToolReply::Error(
            "not an artifact request: {\"sha256\": HEX, \"offset\": N}".into(),
        );
    };
    let newest = match ctx.store.latest_declaration(&node).await {
        Ok(Some(d)) => mesh_core::declaration::verify(
            d.body.as_bytes(),
            &ctx.signing_key.verifying_key(),
            &node,
            None,
        )
        .ok(),
        Ok(None) => None,
        Err(e) => {
            return ToolReply::Error(format!(
                "the records cannot be read now: {}",
                error_chain(&e)
            ));
        }
    };
    match decide(newest.as_ref(), &req) {
        Decision::Refused(why) => {
            warn!(%node, sha256 = %req.sha256, reason = %why, "artifact request refused");
            ToolReply::Error(why)
        }
        Decision::Read {
            sha256,
            offset,
            len,
            size,
        } => {
            let dir = ctx.opts.dir.clone();
            let read = tokio::task::spawn_blocking(move || {
                crate::artifacts::read_piece(&dir, &sha256, offset, len)
            })
            .await;
            match read {
                Ok(Ok(bytes)) => match serde_json::to_value(Piece {
                    data: base64::engine::general_purpose::STANDARD.encode(bytes),
                    size,
                }) {
                    Ok(v) => ToolReply::Ok(v),
                    Err(e) => ToolReply::Error(e.to_string()),
                },
                Ok(Err(e)) => ToolReply::Error(format!(
                    "this controller does not keep sha256:{} ({e}); put it again with `mesh up` or `mesh artifact put`",
                    req.sha256
                )),
                Err(e) => ToolReply::Error(e.to_string()),
            }
        }
    }
}
