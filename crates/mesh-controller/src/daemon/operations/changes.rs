//! The operations that change the records: each through the same
//! `mesh_state::operations` function the CLI on the controller's machine
//! takes, so the checks and the words are one, whoever asks.

use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{
    ArtifactPutArgs, AssignArgs, BrokerArgs, BuildArgs, DeployArgs, DeploymentChangeArgs, NameArgs,
    NodeAddArgs, NodeSetArgs, PersonAddArgs, RegisterArgs, Reply, Request, SecretArgs,
};
use mesh_state::deployments;
use mesh_state::operations::{self as op_fns, OperationError};

use super::{args, changed, not_served, refused};
use crate::daemon::Ctx;

pub(super) async fn carry_out(ctx: &Ctx, person: &Name, op: Operation, request: &Request) -> Reply {
    let store = &ctx.store;
    let said = match op {
        Operation::Assign => {
            let a: AssignArgs = args!(op, request);
            match store
                .assign_version(&a.node, &a.module, a.version.as_deref())
                .await
            {
                Ok(pin) => {
                    let pin = pin.map(|v| format!(" (version {v})")).unwrap_or_default();
                    Ok(format!("assigned {} to {}{pin}", a.module, a.node))
                }
                Err(e) => return refused(e),
            }
        }
        Operation::Unassign => {
            let a: AssignArgs = args!(op, request);
            match store.unassign(&a.node, &a.module).await {
                Ok(true) => Ok(format!("unassigned {} from {}", a.module, a.node)),
                Ok(false) => Err(OperationError::Refused(format!(
                    "{} is not assigned to {}",
                    a.module, a.node
                ))),
                Err(e) => return refused(e),
            }
        }
        Operation::SecretSet | Operation::SecretRotate => {
            let a: SecretArgs = args!(op, request);
            op_fns::secret_set(
                store,
                &a,
                op == Operation::SecretRotate,
                Some(&ctx.xkey_seed),
            )
            .await
        }
        Operation::SecretRemove => {
            let a: NameArgs = args!(op, request);
            op_fns::secret_remove(store, &a.name).await
        }
        Operation::NodeAdd => {
            let a: NodeAddArgs = args!(op, request);
            return node_add(ctx, &a).await;
        }
        Operation::NodeSet => {
            let a: NodeSetArgs = args!(op, request);
            op_fns::node_set(store, &a).await
        }
        Operation::NodeForget => {
            let a: NameArgs = args!(op, request);
            op_fns::node_forget(store, &a.name).await
        }
        Operation::PersonAdd => {
            let a: PersonAddArgs = args!(op, request);
            return person_add(ctx, &a).await;
        }
        Operation::PersonRemove => {
            let a: NameArgs = args!(op, request);
            op_fns::person_remove(store, &a.name).await
        }
        Operation::ArtifactPut => {
            let a: ArtifactPutArgs = args!(op, request);
            return super::upload::artifact_put(ctx, person, &a).await;
        }
        Operation::Build => {
            let a: BuildArgs = args!(op, request);
            return match crate::builds::submit(store, &ctx.bus, &a.module, &a.rev).await {
                // Queued, not waited for: the controller serves one request
                // at a time, and a build takes minutes.
                Ok(s) => Reply::Done {
                    said: format!(
                        "queued build {} of {}@{}; `mesh events tail seat:mesh-build-machine.built` shows it built, `mesh modules` the version an assign then pins",
                        s.id, a.module, a.rev
                    ),
                    revision: None,
                    data: serde_json::json!({ "id": s.id }),
                },
                Err(crate::builds::SubmitError::Refused(reason)) => Reply::Refused { reason },
                Err(e) => refused(e),
            };
        }
        Operation::Register => {
            let a: RegisterArgs = args!(op, request);
            return register(ctx, &a).await;
        }
        Operation::BrokerSetAddress => {
            let a: BrokerArgs = args!(op, request);
            return broker_set_address(ctx, &a).await;
        }
        Operation::Deploy => {
            let a: DeployArgs = args!(op, request);
            return match deployments::deploy(store, a.spec).await {
                Ok((id, deployment)) => Reply::Done {
                    said: format!("deployment #{id} recorded"),
                    revision: store.records_revision().await.ok(),
                    data: serde_json::json!({ "id": id, "deployment": deployment }),
                },
                Err(OperationError::Refused(reason)) => Reply::Refused { reason },
                Err(e) => refused(e),
            };
        }
        Operation::DeploymentChange => {
            let a: DeploymentChangeArgs = args!(op, request);
            return match deployments::change(store, a.id, a.change, &format!("person {person}"))
                .await
            {
                Ok(shown) => Reply::Done {
                    said: format!("deployment #{} {}", a.id, shown.deployment.state),
                    revision: store.records_revision().await.ok(),
                    data: serde_json::to_value(shown).unwrap_or_default(),
                },
                Err(OperationError::Refused(reason)) => Reply::Refused { reason },
                Err(e) => refused(e),
            };
        }
        other => return not_served(other),
    };
    match said {
        Ok(said) => changed(store, said).await,
        Err(OperationError::Refused(reason)) => Reply::Refused { reason },
        Err(e) => refused(e),
    }
}

/// A node's token, made here from the genesis: the enrolment key the
/// store issued, the broker's addresses and pin, the controller's key.
async fn node_add(ctx: &Ctx, a: &NodeAddArgs) -> Reply {
    let genesis = match crate::Genesis::open(&ctx.opts.dir) {
        Ok(g) => g,
        Err(e) => return refused(e),
    };
    let issued = match op_fns::node_add(&ctx.store, a).await {
        Ok(i) => i,
        Err(OperationError::Refused(reason)) => return Reply::Refused { reason },
        Err(e) => return refused(e),
    };
    // A mesh moved onto another bus: the node enrols there.
    let bus_urls = match ctx.store.moved_bus_urls().await {
        Ok(urls) => urls.unwrap_or_else(|| genesis.bus_urls()),
        Err(e) => return refused(e),
    };
    let token = mesh_core::token::Token {
        bus_urls,
        cert_sha256: genesis.cert_sha256.clone(),
        controller_key: genesis.signing_key.clone(),
        node: a.node.clone(),
        enrolment_seed: issued.secret,
        expires_at: u64::try_from(issued.expires_at).unwrap_or(0),
    };
    match changed(&ctx.store, format!("token for node {}", a.node)).await {
        Reply::Done { said, revision, .. } => Reply::Done {
            said,
            revision,
            data: serde_json::json!({ "token": token.encode().expose() }),
        },
        refused => refused,
    }
}

/// The broker moved in this controller's directory: the addresses
/// recorded for every node to follow, its configuration written where the
/// broker is started again, on this machine, once they have.
async fn broker_set_address(ctx: &Ctx, a: &BrokerArgs) -> Reply {
    if a.port == 0 {
        return Reply::Refused {
            reason: "port 0 is no port the broker can listen on: give 1 to 65535".into(),
        };
    }
    let genesis = match crate::Genesis::open(&ctx.opts.dir) {
        Ok(g) => g,
        Err(e) => return refused(e),
    };
    let addresses = (!a.addresses.is_empty()).then_some(a.addresses.as_slice());
    let moved =
        match crate::broker_address::set_broker_address(&genesis, &ctx.store, a.port, addresses)
            .await
        {
            Ok(m) => m,
            Err(e) => return refused(e),
        };
    let next = match &moved.conf {
        Ok(conf) => format!(
            "every node is declared them and follows; once `mesh status` names no node behind the broker, start it again on the controller's machine on {} (port {} from then on)",
            conf.display(),
            a.port
        ),
        Err(e) => format!(
            "recorded, but the broker's configuration was not written: {}",
            crate::daemon::error_chain(e)
        ),
    };
    changed(
        &ctx.store,
        format!("broker addresses: {}\n{next}", moved.urls.join(", ")),
    )
    .await
}

/// A catalogue registered from the texts a person read: parsed and checked
/// here, with the registered catalogue in view, as the CLI checks files.
async fn register(ctx: &Ctx, a: &RegisterArgs) -> Reply {
    use mesh_state::registering::{InView, Refused, prepare};
    let manifests: Vec<(String, Vec<u8>)> = a
        .manifests
        .iter()
        .map(|(name, text)| (name.clone(), text.clone().into_bytes()))
        .collect();
    if manifests.is_empty() {
        return Reply::Refused {
            reason: "no manifest was given: name a catalogue directory or mesh.toml files".into(),
        };
    }
    let report = mesh_state::catalogue::from_texts(&manifests, &a.aliases);
    let registered = match InView::read(&ctx.store).await {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    let registering = match prepare(report, &registered) {
        Ok(r) => r,
        Err(Refused::Errors(check)) => {
            return Reply::Refused {
                reason: format!(
                    "the catalogue has {} error(s); nothing was registered:\n{}",
                    check.errors(),
                    check.rendered().join("\n")
                ),
            };
        }
        Err(Refused::Breaks {
            check,
            in_registered,
        }) => {
            let what = if in_registered {
                "registering it would break the registered catalogue"
            } else {
                "with the registered catalogue in view it has errors"
            };
            return Reply::Refused {
                reason: format!(
                    "{what}: {} error(s), each where it is; nothing was registered:\n{}",
                    check.diagnostics.len(),
                    check.rendered().join("\n")
                ),
            };
        }
    };
    if let Err(e) = mesh_state::registering::record(&ctx.store, &registering, &registered).await {
        return refused(e);
    }
    let modules: Vec<&str> = registering
        .registration
        .modules
        .iter()
        .map(|(m, _)| m.as_str())
        .collect();
    changed(
        &ctx.store,
        format!(
            "registered {} module(s): {}",
            modules.len(),
            modules.join(", ")
        ),
    )
    .await
}

/// A person added; given a role and no key, their login token made here
/// from the genesis (the broker's addresses and pin).
async fn person_add(ctx: &Ctx, a: &PersonAddArgs) -> Reply {
    let (said, login) = match op_fns::person_add(&ctx.store, a).await {
        Ok(done) => done,
        Err(OperationError::Refused(reason)) => return Reply::Refused { reason },
        Err(e) => return refused(e),
    };
    let token = match login {
        None => None,
        Some(login) => match (
            crate::Genesis::open(&ctx.opts.dir),
            ctx.store.moved_bus_urls().await,
        ) {
            (Ok(g), Ok(moved)) => Some(g.person_token(login, moved)),
            (Err(e), _) => return refused(e),
            (_, Err(e)) => return refused(e),
        },
    };
    match changed(&ctx.store, said).await {
        Reply::Done { said, revision, .. } => Reply::Done {
            said,
            revision,
            data: serde_json::json!({ "token": token.map(|t| t.expose().to_string()) }),
        },
        refused => refused,
    }
}
