//! Module keys for a pass over the nodes: each assigned module's recorded
//! key, and for a module with none, one of its node's spare keys, given
//! and recorded now, before the declaration naming it is published
//! (DESIGN §6 "Keys announced ahead, compositions live before
//! declarations").

use std::collections::BTreeMap;
use std::time::Duration;

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::users_file::UserCredential;
use mesh_store::StoreError;
use tracing::{info, warn};

use super::{Ctx, error_chain};

/// (node, module) → the module's key, as recorded.
pub(crate) type Keys = BTreeMap<(Name, Name), String>;

/// What a pass gives out: each module's key, the keys given now, and the
/// modules held back (node, module): their node's host makes spares but
/// has too few left for all of them (none, when an earlier pass gave them
/// all), and a module declared without a key would start under one its
/// host makes, refused once. Declared when the node's next report
/// announces more.
pub(crate) struct ModuleKeys {
    pub keys: Keys,
    pub given: Vec<(Name, Name, String)>,
    pub held_back: std::collections::BTreeSet<(Name, Name)>,
}

/// The keys of `derived`'s assigned modules, giving spares to those
/// without one.
pub(crate) async fn module_keys(
    ctx: &Ctx,
    derived: &mesh_state::Derived,
) -> Result<ModuleKeys, StoreError> {
    let mut keys = Keys::new();
    let mut needing = Vec::new();
    for a in &derived.snapshot.records.assignments {
        if derived.left_out.contains_key(&a.module) {
            continue;
        }
        let principal = PrincipalKind::Module {
            node: a.node.clone(),
            module: a.module.clone(),
        }
        .principal_name();
        match derived.snapshot.credentials.get(&principal) {
            Some(UserCredential::NKey(k)) => {
                keys.insert((a.node.clone(), a.module.clone()), k.clone());
            }
            _ => needing.push((a.node.clone(), a.module.clone())),
        }
    }
    if needing.is_empty() {
        return Ok(ModuleKeys {
            keys,
            given: Vec::new(),
            held_back: Default::default(),
        });
    }
    let spares = ctx.store.spare_keys().await?;
    let makers = ctx.store.spare_makers().await?;
    let gifts = mesh_core::spare_keys::give(&needing, &spares);
    let held_back = mesh_core::spare_keys::held_back(&needing, &makers, &gifts);
    let given = ctx.store.give_keys(&gifts).await?;
    if !given.is_empty() {
        info!(
            keys = given.len(),
            "module keys given from the nodes' spares"
        );
    }
    for (node, module, key) in &given {
        keys.insert((node.clone(), module.clone()), key.clone());
    }
    // Given fewer than were decided (another writer took one meanwhile):
    // those wait too.
    let mut held_back = held_back;
    for (node, module, _) in &gifts {
        if !given.iter().any(|(n, m, _)| n == node && m == module) {
            held_back.insert((node.clone(), module.clone()));
        }
    }
    Ok(ModuleKeys {
        keys,
        given,
        held_back,
    })
}

/// How long declarations wait for the composition they rely on.
const LIVE_BEFORE_DECLARING: Duration = Duration::from_secs(30);

/// Waits until the broker serves a composition of the records as they are
/// now: a declaration that brings a module, or widens its grants, is
/// published only after the broker admits what it needs (else the module
/// is refused once and comes back through its restart backoff).
pub(crate) async fn composition_live(ctx: &Ctx) {
    let revision = match ctx.store.records_revision().await {
        Ok(r) => r,
        Err(e) => {
            warn!(error = %error_chain(&e), "cannot read the records revision; declaring without waiting for the composition");
            return;
        }
    };
    let generation = ctx.covered.trigger(&ctx.composer, revision);
    match tokio::time::timeout(LIVE_BEFORE_DECLARING, ctx.composer.live(generation)).await {
        Ok(Ok(_)) => {}
        Ok(Err(stopped)) => warn!(error = %stopped, "composition not confirmed"),
        Err(_) => warn!(
            waited = ?LIVE_BEFORE_DECLARING,
            "the composition these declarations rely on is not live yet; declaring anyway (a module it admits may be refused until it is)"
        ),
    }
}
