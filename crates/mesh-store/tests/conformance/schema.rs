//! The schema: reopening, bringing an older store forward, refusing a newer one.

use mesh_core::authority::PrincipalKind;
use mesh_core::names::Name;
use mesh_core::records::ToolAccess;
use mesh_core::users_file::UserCredential;

use crate::fixture::*;
use mesh_store::*;

async fn reopening_is_idempotent(fx: &Fixture) {
    fx.store.add_node(&n("n1"), &[22]).await.unwrap();
    assert_eq!(fx.store.schema_version().await.unwrap(), SCHEMA_VERSION);
    for _ in 0..2 {
        let again = fx.reopen().await.expect("reopen");
        assert_eq!(again.schema_version().await.unwrap(), SCHEMA_VERSION);
        assert_eq!(again.node(&n("n1")).await.unwrap().unwrap().ports, vec![22]);
        again.close().await;
    }
}

/// The URL of a database with no schema yet, to build an older store in. The
/// fixture's store is current: SQLite gets a file beside it; PostgreSQL reuses
/// the fixture's database after closing its store and dropping every table.
async fn schemaless_url(fx: &Fixture) -> String {
    match fx.store.kind() {
        BackendKind::Sqlite => fx.url.replace("mesh.db", "old.db"),
        BackendKind::Postgres => {
            fx.store.close().await;
            // One statement, so the foreign keys between them set no order.
            let tables = fx.tables().await.join(", ");
            fx.raw_execute(&format!("DROP TABLE {tables}")).await;
            fx.url.clone()
        }
    }
}

async fn an_older_store_is_brought_forward(fx: &Fixture) {
    let old_url = schemaless_url(fx).await;
    let old = Store::open_at(&old_url, options(), 1).await.unwrap();
    assert_eq!(old.schema_version().await.unwrap(), 1);
    old.add_node(&n("n1"), &[]).await.unwrap();
    match old.register_module(&n("git"), "x").await {
        Err(StoreError::Refused { .. }) => {}
        other => panic!("version 1 has no modules table: {other:?}"),
    }
    old.close().await;

    let current = Store::open_with(&old_url, options()).await.unwrap();
    assert_eq!(current.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert!(current.node(&n("n1")).await.unwrap().is_some(), "kept");
    current.register_module(&n("git"), "x").await.unwrap();
    current.close().await;
}

/// Version 4 ties credentials to their person or assignment. Bringing a
/// version 3 store forward keeps every credential that still has its owner
/// (a person's now naming the person) and drops the orphans, whose stale
/// secrets would otherwise be valid again once the name came back.
async fn bringing_credentials_forward_drops_the_orphans(fx: &Fixture) {
    let old_url = schemaless_url(fx).await;
    let old = Store::open_at(&old_url, options(), 3).await.unwrap();
    assert_eq!(old.schema_version().await.unwrap(), 3);
    old.add_node(&n("n1"), &[]).await.unwrap();
    old.register_module(&n("git"), "x").await.unwrap();
    old.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    old.close().await;
    // Written as version 3 wrote it (today's assign writes a later column).
    fx.raw_execute_at(
        &old_url,
        "INSERT INTO assignments (node, module, created_at) VALUES ('n1', 'git', 1)",
    )
    .await;
    // What a version 3 mint wrote, and what the race could leave behind:
    // person_gone and module_n1_gone name a person and an assignment that are
    // not recorded.
    fx.raw_execute_at(
        &old_url,
        "INSERT INTO credentials (principal, kind, bcrypt_hash, node, module, created_at) VALUES \
         ('controller', 'machine', 'h0', NULL, NULL, 1), \
         ('host_n1', 'machine', 'h1', 'n1', NULL, 2), \
         ('module_n1_git', 'machine', 'h2', 'n1', 'git', 3), \
         ('module_n1_gone', 'machine', 'h3', 'n1', 'gone', 4), \
         ('person_ada', 'person', 'h4', NULL, NULL, 5), \
         ('person_gone', 'person', 'h5', NULL, NULL, 6)",
    )
    .await;

    let current = Store::open_with(&old_url, options()).await.unwrap();
    assert_eq!(current.schema_version().await.unwrap(), SCHEMA_VERSION);
    let kept = current.credentials().await.unwrap();
    fn name(n: &Option<Name>) -> Option<&str> {
        n.as_ref().map(Name::as_str)
    }
    let owners: Vec<_> = kept
        .iter()
        .map(|c| {
            let (node, module, person) = (name(&c.node), name(&c.module), name(&c.person));
            (c.principal.as_str(), node, module, person)
        })
        .collect();
    // Version 6 then drops every machine's bcrypt hash (no public key can be
    // derived from one): only the person with an owner is left.
    assert_eq!(owners, [("person_ada", None, None, Some("ada"))]);
    let ada = current.credential("person_ada").await.unwrap().unwrap();
    assert_eq!(
        (ada.credential, ada.created_at),
        (UserCredential::Password("h4".into()), 5)
    );

    // The names coming back bring no secret back with them.
    current
        .put_person(&n("gone"), &ToolAccess::All)
        .await
        .unwrap();
    current.register_module(&n("gone"), "x").await.unwrap();
    current.assign(&n("n1"), &n("gone")).await.unwrap();
    assert_eq!(current.credential("person_gone").await.unwrap(), None);
    assert_eq!(current.credential("module_n1_gone").await.unwrap(), None);
    // And the kept person credential now goes with its person.
    assert!(current.remove_person(&n("ada")).await.unwrap());
    assert_eq!(current.credential("person_ada").await.unwrap(), None);
    current.close().await;
}

/// Version 6 makes machine credentials NKeys. A version 5 store brought
/// forward keeps its persons' hashes, drops its machines' hashes (nothing to
/// derive a public key from: re-mint them) and its tokens (their hex secrets
/// are no seeds: reissue them), and then records keys only.
async fn bringing_credentials_forward_to_nkeys(fx: &Fixture) {
    let old_url = schemaless_url(fx).await;
    let old = Store::open_at(&old_url, options(), 5).await.unwrap();
    old.add_node(&n("n1"), &[]).await.unwrap();
    old.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    old.close().await;
    fx.raw_execute_at(
        &old_url,
        "INSERT INTO credentials (principal, kind, bcrypt_hash, node, module, person, created_at) \
         VALUES ('controller', 'machine', '$2a$04$c', NULL, NULL, NULL, 1), \
         ('host_n1', 'machine', '$2a$04$h', 'n1', NULL, NULL, 2), \
         ('person_ada', 'person', '$2a$11$a', NULL, NULL, 'ada', 3)",
    )
    .await;
    fx.raw_execute_at(
        &old_url,
        "INSERT INTO enrolment_tokens (secret_hash, bus_hash, node, issued_at, expires_at) \
         VALUES ('ab', '$2a$04$t', 'n1', 1, 9999999999999)",
    )
    .await;

    let current = Store::open_with(&old_url, options()).await.unwrap();
    assert_eq!(current.schema_version().await.unwrap(), SCHEMA_VERSION);
    let kept: Vec<_> = current
        .credentials()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.principal, c.credential))
        .collect();
    assert_eq!(
        kept,
        [(
            "person_ada".to_string(),
            UserCredential::Password("$2a$11$a".into())
        )]
    );
    assert!(current.live_tokens().await.unwrap().is_empty());
    // The remedy works on the carried-forward store.
    let (_, key) = new_user_key();
    let host = PrincipalKind::Host { node: n("n1") };
    current.record_machine_key(&host, &key).await.unwrap();
    let token = current
        .issue_token(&n("n1"), std::time::Duration::from_secs(60))
        .await
        .unwrap();
    current
        .spend_token(
            &n("n1"),
            &token.enrolment_key,
            &HostKeys {
                host_key: new_user_key().1,
                xkey: nkeys::XKey::new().public_key(),
                spare_keys: Vec::new(),
            },
        )
        .await
        .unwrap();
    current.close().await;
}

async fn a_newer_store_is_refused_naming_both_versions(fx: &Fixture) {
    fx.store.close().await;
    let future = SCHEMA_VERSION + 1;
    fx.raw_execute(&format!(
        "INSERT INTO mesh_schema (version, name, applied_at) VALUES ({future}, 'from-the-future', 0)"
    ))
    .await;
    let err = fx
        .reopen()
        .await
        .expect_err("a newer store must be refused");
    match &err {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!((*found, *supported), (future, SCHEMA_VERSION))
        }
        other => panic!("wrong refusal: {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "store schema version {future} is newer than this mesh binary supports ({SCHEMA_VERSION}); upgrade mesh"
        )
    );
}

conformance!(
    reopening_is_idempotent,
    an_older_store_is_brought_forward,
    bringing_credentials_forward_drops_the_orphans,
    bringing_credentials_forward_to_nkeys,
    a_newer_store_is_refused_naming_both_versions,
);
