//! A fleet change: applied whole in one transaction, or not at all.

use std::time::Duration;

use mesh_core::authority::PrincipalKind;
use mesh_core::records::ToolAccess;

use crate::fixture::*;
use mesh_store::*;

const DAY: Duration = Duration::from_secs(86_400);

async fn change(with_credentials: bool) -> (FleetChange, Vec<Secret>) {
    let mut c = FleetChange {
        registration: Registration {
            modules: vec![(n("git"), "name = \"git\"".into())],
            ..Registration::default()
        },
        nodes: vec![n("n1"), n("n2")],
        assignments: vec![(n("n1"), n("git"))],
        persons: vec![(n("ada"), ToolAccess::All)],
        ..FleetChange::default()
    };
    let mut secrets = Vec::new();
    if with_credentials {
        let (s, t) = prepare_token(&n("n2"), DAY);
        secrets.push(s);
        c.tokens.push(t);
        for kind in [
            PrincipalKind::Controller,
            PrincipalKind::Host { node: n("n1") },
            PrincipalKind::Module {
                node: n("n1"),
                module: n("git"),
            },
            PrincipalKind::Person { person: n("ada") },
        ] {
            let (s, p) = match kind {
                PrincipalKind::Person { .. } => prepare_password(&kind).await.unwrap(),
                _ => {
                    let (seed, public) = new_user_key();
                    (seed, prepare_machine_key(&kind, &public).unwrap())
                }
            };
            secrets.push(s);
            c.credentials.push(p);
        }
    }
    (c, secrets)
}

async fn a_fleet_change_records_everything_and_again_nothing(fx: &Fixture) {
    let (c, secrets) = change(true).await;
    let done = fx.store.apply_fleet(&c).await.unwrap();
    assert_eq!(done.nodes_added, [n("n1"), n("n2")]);
    assert_eq!((done.assignments_added, done.persons_added.len()), (1, 1));
    assert_eq!((done.tokens_issued, done.credentials_recorded), (1, 4));
    assert_eq!(
        principals(&fx.store).await,
        ["controller", "host_n1", "module_n1_git", "person_ada"]
    );
    assert!(
        fx.store
            .verify_credential("module_n1_git", secrets[3].expose())
            .await
            .unwrap()
    );
    assert_eq!(fx.store.live_tokens().await.unwrap().len(), 1);

    let (again, _) = change(false).await;
    let done = fx.store.apply_fleet(&again).await.unwrap();
    assert_eq!(done, FleetApplied::default(), "nothing new");
}

async fn a_failing_fleet_change_changes_nothing(fx: &Fixture) {
    let (first, _) = change(true).await;
    fx.store.apply_fleet(&first).await.unwrap();
    let before = fx.every_value().await;
    let (mut c, _) = change(true).await;
    c.nodes.push(n("n3"));
    c.persons.push((n("bob"), ToolAccess::All));
    // A credential for an assignment the change does not make: refused by
    // the foreign key after everything else was written in the transaction.
    let (_, public) = new_user_key();
    let orphan = prepare_machine_key(
        &PrincipalKind::Module {
            node: n("n3"),
            module: n("git"),
        },
        &public,
    )
    .unwrap();
    c.credentials.push(orphan);
    let err = fx.store.apply_fleet(&c).await.expect_err("refused");
    assert!(!err.is_unavailable(), "{err:?}");
    assert_eq!(fx.every_value().await, before, "the store is as it was");
}

async fn pruning_forgets_what_the_change_does_not_name(fx: &Fixture) {
    let (first, _) = change(true).await;
    fx.store.apply_fleet(&first).await.unwrap();
    let c = FleetChange {
        registration: Registration {
            modules: vec![(n("git"), "name = \"git\"".into())],
            ..Registration::default()
        },
        nodes: vec![n("n2")],
        prune: true,
        ..FleetChange::default()
    };
    let done = fx.store.apply_fleet(&c).await.unwrap();
    assert_eq!(done.nodes_pruned.len(), 1);
    let (node, forgotten) = &done.nodes_pruned[0];
    assert_eq!(node, &n("n1"));
    assert_eq!(forgotten.credentials, ["host_n1", "module_n1_git"]);
    assert_eq!(done.persons_pruned, [n("ada")]);
    assert_eq!(principals(&fx.store).await, ["controller"]);
    assert!(fx.store.node(&n("n1")).await.unwrap().is_none());
    assert!(fx.store.node(&n("n2")).await.unwrap().is_some());
    assert!(fx.store.persons().await.unwrap().is_empty());
}

/// A fleet whose assignments make a second holder of a mesh-scoped seat is
/// refused as `assign` refuses it, naming the first; nothing of it is kept.
async fn a_fleet_with_two_holders_of_a_mesh_seat_is_refused_whole(fx: &Fixture) {
    let s = &fx.store;
    let holder = "[module]\nname = \"keeper\"\ndescription = \"keeps\"\n[[seat]]\nname = \"audit\"\nscope = \"mesh\"\nprotocol = \"\"\n[holds]\nseats = [\"audit\"]\n";
    let c = FleetChange {
        registration: Registration {
            modules: vec![(n("keeper"), holder.into())],
            ..Registration::default()
        },
        nodes: vec![n("n1"), n("n2")],
        assignments: vec![(n("n1"), n("keeper")), (n("n2"), n("keeper"))],
        ..FleetChange::default()
    };
    match s.apply_fleet(&c).await {
        Err(StoreError::SeatHeld(conflict)) => {
            let text = conflict.to_string();
            assert!(text.contains("seat `audit` is mesh-scoped"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(s.nodes().await.unwrap().is_empty(), "nothing kept");
    assert!(s.modules().await.unwrap().is_empty(), "nothing kept");
    // One holder is fine.
    let one = FleetChange {
        assignments: vec![(n("n1"), n("keeper"))],
        ..c
    };
    s.apply_fleet(&one).await.unwrap();
    assert_eq!(s.assignments().await.unwrap().len(), 1);
}

conformance!(
    a_fleet_with_two_holders_of_a_mesh_seat_is_refused_whole,
    a_fleet_change_records_everything_and_again_nothing,
    a_failing_fleet_change_changes_nothing,
    pruning_forgets_what_the_change_does_not_name,
);
