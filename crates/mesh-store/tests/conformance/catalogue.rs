//! The catalogue's records: modules, their versions, seats and seat aliases.

use mesh_core::catalogue::{Alias, Aliases};
use mesh_core::diagnostic::Pos;
use mesh_core::manifest::{Located, Scope};
use mesh_core::names::Name;

use crate::fixture::*;
use mesh_store::*;

/// The seat `name` means, resolved as mesh resolves every rename: the
/// store's alias rows as `Aliases`, followed to a recorded seat. `None` when
/// it leads to no seat.
async fn resolve_seat(s: &Store, name: &Name) -> Option<Name> {
    let mut aliases = Aliases::new();
    for (old, seat) in s.seat_aliases().await.unwrap() {
        aliases.push(Alias {
            old: Located::new(old, Pos::START),
            new: Located::new(seat, Pos::START),
            file: "<store>".into(),
        });
    }
    let seat = aliases.resolve(name);
    s.seat(&seat).await.unwrap().map(|_| seat)
}

async fn catalogue_round_trip(fx: &Fixture) {
    let s = &fx.store;
    let source = "[module]\nname = \"git\"\n";
    let m = s.register_module(&n("git"), source).await.unwrap();
    assert_eq!(m.manifest_source, source);
    assert_eq!(m.manifest_digest, sha256_digest(source));
    assert!(m.manifest_digest.starts_with("sha256:"));
    assert_eq!(s.module(&n("git")).await.unwrap(), Some(m.clone()));

    let again = s.register_module(&n("git"), "changed").await.unwrap();
    assert_eq!(again.registered_at, m.registered_at);
    assert_eq!(again.manifest_digest, sha256_digest("changed"));
    assert_eq!(s.modules().await.unwrap().len(), 1);

    s.record_module_version(&n("git"), "abc123", None)
        .await
        .unwrap();
    let v = s
        .record_module_version(&n("git"), "abc123", Some("build-1"))
        .await
        .unwrap();
    assert_eq!(v.build_id.as_deref(), Some("build-1"));
    s.record_module_version(&n("git"), "def456", None)
        .await
        .unwrap();
    let revs: Vec<String> = s
        .module_versions(&n("git"))
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.rev)
        .collect();
    assert_eq!(revs.len(), 2);
    assert!(revs.contains(&"abc123".to_string()));
    match s.record_module_version(&n("nope"), "x", None).await {
        Err(StoreError::NotFound { what: "module", .. }) => {}
        other => panic!("version of an unknown module: {other:?}"),
    }

    let seat = Seat {
        name: n("git"),
        declared_by: Some(n("git")),
        scope: Scope::Mesh,
        protocol: "git".into(),
    };
    s.put_seat(&seat).await.unwrap();
    let role = Seat {
        name: n("mesh-store"),
        declared_by: None,
        scope: Scope::Mesh,
        protocol: "postgres".into(),
    };
    s.put_seat(&role).await.unwrap();
    let marker = Seat {
        name: n("packet-filter"),
        declared_by: Some(n("git")),
        scope: Scope::Node,
        protocol: String::new(),
    };
    s.put_seat(&marker).await.unwrap();
    assert_eq!(s.seat(&n("packet-filter")).await.unwrap(), Some(marker));
    assert_eq!(s.seats().await.unwrap().len(), 3);

    s.add_seat_alias(&n("vcs"), &n("git")).await.unwrap();
    assert_eq!(resolve_seat(s, &n("vcs")).await, Some(n("git")));
    assert_eq!(resolve_seat(s, &n("git")).await, Some(n("git")));
    assert_eq!(resolve_seat(s, &n("nothing")).await, None);
    assert_eq!(s.seat_aliases().await.unwrap(), vec![(n("vcs"), n("git"))]);
    match s.add_seat_alias(&n("vcs"), &n("mesh-store")).await {
        Err(StoreError::AlreadyExists { .. }) => {}
        other => panic!("alias twice: {other:?}"),
    }
    match s.add_seat_alias(&n("mesh-store"), &n("git")).await {
        Err(StoreError::AlreadyExists { what: "seat", .. }) => {}
        other => panic!("alias shadowing a seat: {other:?}"),
    }

    s.add_node(&n("n1"), &[]).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    match s.remove_module(&n("git")).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("removing an assigned module: {other:?}"),
    }
    s.unassign(&n("n1"), &n("git")).await.unwrap();
    assert!(s.remove_module(&n("git")).await.unwrap());
    assert_eq!(s.module(&n("git")).await.unwrap(), None);
    assert_eq!(s.seat(&n("git")).await.unwrap(), None, "its seats go too");
    assert_eq!(resolve_seat(s, &n("vcs")).await, None);
    assert!(
        s.seat(&n("mesh-store")).await.unwrap().is_some(),
        "roles stay"
    );
}

fn seat(name: &str, by: Option<&str>) -> Seat {
    Seat {
        name: n(name),
        declared_by: by.map(n),
        scope: Scope::Mesh,
        protocol: String::new(),
    }
}

/// A registration records manifests, seats and renames together; a module
/// registered again without a seat forgets the seat and its renames; a
/// registration the store refuses records nothing of itself.
async fn a_registration_is_recorded_whole_or_not_at_all(fx: &Fixture) {
    let s = &fx.store;
    let r = Registration {
        modules: vec![(n("git-server"), "a".into()), (n("mirror"), "b".into())],
        seats: vec![seat("git", Some("git-server")), seat("mesh-broker", None)],
        aliases: vec![(n("vcs"), n("git"))],
    };
    s.register_catalogue(&r).await.unwrap();
    assert_eq!(s.modules().await.unwrap().len(), 2);
    assert_eq!(resolve_seat(s, &n("vcs")).await, Some(n("git")));
    assert_eq!(
        s.seat(&n("mesh-broker"))
            .await
            .unwrap()
            .unwrap()
            .declared_by,
        None
    );
    // The same registration again changes nothing.
    s.register_catalogue(&r).await.unwrap();
    assert_eq!(s.seat_aliases().await.unwrap().len(), 1);
    // git-server no longer declares git: the seat and its rename go.
    s.register_catalogue(&Registration {
        modules: vec![(n("git-server"), "c".into())],
        seats: vec![seat("mesh-broker", None)],
        aliases: vec![],
    })
    .await
    .unwrap();
    assert!(s.seat(&n("git")).await.unwrap().is_none());
    assert!(s.seat_aliases().await.unwrap().is_empty());
    // A rename of a seat nobody declares is refused, and the manifest
    // registered with it is not kept.
    let refused = s
        .register_catalogue(&Registration {
            modules: vec![(n("late"), "d".into())],
            seats: vec![],
            aliases: vec![(n("old"), n("ghost"))],
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::NotFound { what: "seat", .. })),
        "{refused:?}"
    );
    assert!(s.module(&n("late")).await.unwrap().is_none());
    // A rename may not take a declared seat's name, nor a seat an alias's.
    s.register_catalogue(&Registration {
        modules: vec![(n("git-server"), "e".into())],
        seats: vec![seat("git", Some("git-server"))],
        aliases: vec![(n("vcs"), n("git"))],
    })
    .await
    .unwrap();
    let clash = s
        .register_catalogue(&Registration {
            modules: vec![],
            seats: vec![seat("vcs", Some("mirror"))],
            aliases: vec![],
        })
        .await;
    assert!(
        matches!(
            clash,
            Err(StoreError::AlreadyExists {
                what: "seat alias",
                ..
            })
        ),
        "{clash:?}"
    );
}

/// A manifest declaring seat `seat` of `scope` (when `declares`) and
/// holding it (when `holds`).
fn manifest(module: &str, seat: &str, scope: &str, declares: bool, holds: bool) -> String {
    let mut text = format!("[module]\nname = \"{module}\"\n[run]\ncommand = [\"x\"]\n");
    if declares {
        text += &format!("[[seat]]\nname = \"{seat}\"\nscope = \"{scope}\"\nprotocol = \"\"\n");
    }
    if holds {
        text += &format!("[holds]\nseats = [\"{seat}\"]\n");
    }
    text
}

/// Registering `modules` (name, text) with `seat` of `scope` declared by
/// `by`.
async fn register(
    s: &Store,
    modules: &[(&str, &str)],
    seat_name: &str,
    by: &str,
    scope: Scope,
) -> Result<(), StoreError> {
    s.register_catalogue(&Registration {
        modules: modules.iter().map(|(m, t)| (n(m), t.to_string())).collect(),
        seats: vec![Seat {
            scope,
            ..seat(seat_name, Some(by))
        }],
        aliases: vec![],
    })
    .await
}

/// Registration checks holders as `assign` does: re-registering an
/// assigned module so that it holds a mesh seat someone holds already, or
/// a seat's scope turned from node to mesh while two nodes hold it, is
/// refused naming the first holder, and nothing of it is recorded.
async fn a_registration_that_makes_a_second_holder_is_refused_naming_the_first(fx: &Fixture) {
    let s = &fx.store;
    for node in ["n1", "n2"] {
        s.add_node(&n(node), &[]).await.unwrap();
    }
    let keeper = manifest("keeper", "audit", "mesh", true, true);
    let plain = manifest("plain", "audit", "mesh", false, false);
    register(
        s,
        &[("keeper", &keeper), ("plain", &plain)],
        "audit",
        "keeper",
        Scope::Mesh,
    )
    .await
    .unwrap();
    s.assign(&n("n1"), &n("keeper")).await.unwrap();
    s.assign(&n("n2"), &n("plain")).await.unwrap();
    let holding = manifest("plain", "audit", "mesh", false, true);
    match register(s, &[("plain", &holding)], "audit", "keeper", Scope::Mesh).await {
        Err(StoreError::SecondHolder(h)) => {
            assert_eq!(
                (&h.module, &h.node, &h.first, &h.first_node),
                (&n("plain"), &n("n2"), &n("keeper"), &n("n1"))
            );
            assert!(
                h.to_string()
                    .contains("which module keeper holds on node n1"),
                "{h}"
            );
        }
        other => panic!("a second holder of audit: {other:?}"),
    }
    let kept = s.module(&n("plain")).await.unwrap().unwrap();
    assert_eq!(kept.manifest_source, plain, "nothing recorded");

    // A node-scoped seat held on two nodes, its scope turned to mesh.
    let filter = manifest("filter-a", "filter", "node", true, true);
    register(
        s,
        &[("filter-a", &filter)],
        "filter",
        "filter-a",
        Scope::Node,
    )
    .await
    .unwrap();
    // Both in one fleet change: the same millisecond, so the order they
    // were made in, not the clock or the node's name, says which is first.
    s.apply_fleet(&mesh_store::FleetChange {
        nodes: vec![n("n1"), n("n2")],
        assignments: vec![(n("n2"), n("filter-a")), (n("n1"), n("filter-a"))],
        ..mesh_store::FleetChange::default()
    })
    .await
    .unwrap();
    let meshed = manifest("filter-a", "filter", "mesh", true, true);
    match register(
        s,
        &[("filter-a", &meshed)],
        "filter",
        "filter-a",
        Scope::Mesh,
    )
    .await
    {
        Err(StoreError::SecondHolder(h)) => assert_eq!(
            (&h.node, &h.first, &h.first_node),
            (&n("n1"), &n("filter-a"), &n("n2")),
            "the first assigned is named first"
        ),
        other => panic!("a mesh seat held twice: {other:?}"),
    }
    assert_eq!(
        s.seat(&n("filter")).await.unwrap().unwrap().scope,
        Scope::Node,
        "nothing recorded"
    );
    // Once one holder is unassigned, it registers.
    s.unassign(&n("n1"), &n("filter-a")).await.unwrap();
    register(
        s,
        &[("filter-a", &meshed)],
        "filter",
        "filter-a",
        Scope::Mesh,
    )
    .await
    .unwrap();
}

async fn a_registration_checked_against_an_older_catalogue_is_refused(fx: &Fixture) {
    let s = &fx.store;
    let seen = s.records_revisions().await.unwrap()["catalogue"];
    let first = Registration {
        modules: vec![(n("echo"), "a".into())],
        seats: vec![],
        aliases: vec![],
    };
    s.register_catalogue_at(&first, seen).await.unwrap();
    // Checked against the catalogue before `first`: refused, nothing kept.
    let second = Registration {
        modules: vec![(n("mirror"), "b".into())],
        seats: vec![],
        aliases: vec![],
    };
    let e = s.register_catalogue_at(&second, seen).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("changed while this one was checked against it"),
        "{e}"
    );
    let names: Vec<String> = s
        .modules()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name.to_string())
        .collect();
    assert_eq!(names, ["echo"]);
    // Checked again against the catalogue as it is now: recorded.
    let now = s.records_revisions().await.unwrap()["catalogue"];
    s.register_catalogue_at(&second, now).await.unwrap();
    assert_eq!(s.modules().await.unwrap().len(), 2);
}

conformance!(
    a_registration_checked_against_an_older_catalogue_is_refused,
    catalogue_round_trip,
    a_registration_is_recorded_whole_or_not_at_all,
    a_registration_that_makes_a_second_holder_is_refused_naming_the_first,
);
