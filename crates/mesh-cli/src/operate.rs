//! A change to the records, whoever asks: on the controller's machine the
//! command applies it through the same `mesh_state::operations` function
//! the controller serves it with, and appends its audit row as the local
//! OS user; from a person's machine (a context, no mesh directory) it asks
//! the active controller, which does the same in the person's name.

use mesh_core::operation::Operation;
use mesh_state::operations::OperationError;

use crate::authority::open_store_to_write;
use crate::state::MeshArgs;

/// A change on the controller's machine through the same function the
/// controller serves it with, audited as the local user; or asked of the
/// controller from a person's machine.
pub async fn change<F>(
    mesh: &MeshArgs,
    op: Operation,
    request: serde_json::Value,
    apply: impl FnOnce(mesh_store::Store) -> F,
) -> anyhow::Result<String>
where
    F: std::future::Future<Output = (mesh_store::Store, Result<String, OperationError>)>,
{
    if let Some(ctx) = mesh.remote()? {
        let (said, _) = crate::remote::ask_current(ctx, op, request).await?;
        return Ok(said);
    }
    let store = open_store_to_write(&mesh.store_url()?).await?;
    let (store, applied) = apply(store).await;
    let result = async {
        let said = applied?;
        crate::audit::record_local(&store, op, request).await?;
        anyhow::Ok(said)
    }
    .await;
    store.close().await;
    result
}
