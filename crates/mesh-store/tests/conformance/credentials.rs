//! Credentials: machine keys recorded (public keys only), person passwords
//! minted, rotation, verification, refusals, no seed or plaintext kept or
//! shown; a credential never outlives its owner.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use mesh_core::authority::PrincipalKind;
use mesh_core::records::ToolAccess;
use mesh_core::users_file::UserCredential;

use crate::fixture::*;
use mesh_store::*;

fn host(node: &str) -> PrincipalKind {
    PrincipalKind::Host { node: n(node) }
}

fn module(node: &str, module: &str) -> PrincipalKind {
    PrincipalKind::Module {
        node: n(node),
        module: n(module),
    }
}

async fn recording_a_machine_key_rotates_and_verifies(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let first = record_key(s, &host("n1")).await.unwrap();
    assert!(first.expose().starts_with("SU"), "an nkey user seed");
    assert!(
        s.verify_credential("host_n1", first.expose())
            .await
            .unwrap()
    );

    let second = record_key(s, &host("n1")).await.unwrap();
    assert_ne!(first, second);
    assert!(
        !s.verify_credential("host_n1", first.expose())
            .await
            .unwrap()
    );
    assert!(
        s.verify_credential("host_n1", second.expose())
            .await
            .unwrap()
    );
    let rows: Vec<Credential> = s
        .credentials()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.principal == "host_n1")
        .collect();
    assert_eq!(rows.len(), 1, "recording again rotates, never adds");
    let c = &rows[0];
    assert_eq!(c.kind, CredentialKind::Machine);
    assert_eq!(c.node.as_ref(), Some(&n("n1")));
    match &c.credential {
        UserCredential::NKey(key) => assert!(UserCredential::is_user_nkey(key), "{key}"),
        other => panic!("a machine recorded by {other:?}"),
    }

    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    let p = s.mint_person_credential(&n("ada")).await.unwrap();
    let c = s.credential("person_ada").await.unwrap().unwrap();
    assert_eq!(c.kind, CredentialKind::Person);
    match &c.credential {
        UserCredential::Password(hash) => assert!(hash.starts_with("$2a$11$"), "{hash}"),
        other => panic!("a person recorded by {other:?}"),
    }
    assert!(s.verify_credential("person_ada", p.expose()).await.unwrap());

    match s.mint_person_credential(&n("nobody")).await {
        Err(StoreError::NotFound { what: "person", .. }) => {}
        other => panic!("credential for an unknown person: {other:?}"),
    }
    match record_key(s, &module("n1", "audit-log")).await {
        Err(StoreError::NotFound {
            what: "assignment", ..
        }) => {}
        other => panic!("credential for an unassigned module: {other:?}"),
    }
    assert!(!s.verify_credential("host_ghost", "x").await.unwrap());
}

/// A machine never gets a password, neither through the API nor by a row
/// written past it; only an NKey *user* public key is a machine's key.
async fn a_machine_password_and_a_non_user_key_are_refused(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    for machine in [PrincipalKind::Controller, host("n1")] {
        match s.mint_password(&machine).await {
            Err(StoreError::Invalid {
                what: "a password", ..
            }) => {}
            other => panic!("a password for {machine:?}: {other:?}"),
        }
        match prepare_password(&machine).await {
            Err(StoreError::Invalid {
                what: "a password", ..
            }) => {}
            other => panic!("a prepared password for {machine:?}: {other:?}"),
        }
    }
    let (seed, _) = new_user_key();
    let account = nkeys::KeyPair::new_account().public_key();
    let server = nkeys::KeyPair::new_server().public_key();
    for bad in [
        seed.expose(),
        account.as_str(),
        server.as_str(),
        "Unot-a-key",
        "",
    ] {
        match s.record_machine_key(&host("n1"), bad).await {
            Err(StoreError::Invalid {
                what: "a machine key",
                detail,
            }) => assert!(!detail.contains(bad) || bad.is_empty(), "{detail}"),
            other => panic!("recording a non-user key: {other:?}"),
        }
        assert!(prepare_machine_key(&host("n1"), bad).is_err());
        assert!(!s.adopt_controller_key_if_absent(bad).await.is_ok_and(|b| b));
    }
    let person = PrincipalKind::Person { person: n("ada") };
    let (_, public) = new_user_key();
    assert!(s.record_machine_key(&person, &public).await.is_err());
    assert!(
        s.credentials().await.unwrap().is_empty(),
        "nothing recorded"
    );

    // Past the API, the schema refuses a machine row holding a hash (beside
    // a key or instead of one) and a person row holding a key.
    let (_, key) = new_user_key();
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    for (row, what) in [
        (
            format!("'host_n1', 'machine', '{key}', '$2a$04$x', 'n1', NULL"),
            "a machine row with a key and a password",
        ),
        (
            "'host_n1', 'machine', NULL, '$2a$04$x', 'n1', NULL".to_string(),
            "a machine row with a password",
        ),
        (
            format!("'person_ada', 'person', '{key}', NULL, NULL, 'ada'"),
            "a person row with a key",
        ),
    ] {
        let sql = format!(
            "INSERT INTO credentials (principal, kind, nkey, bcrypt_hash, node, person, created_at) \
             VALUES ({row}, 1)"
        );
        assert!(fx.raw_try_execute(&sql).await.is_err(), "{what}");
    }
    // The same statement with a machine's key alone is accepted: the refusals
    // above are the checks', not a malformed statement's.
    fx.raw_execute(&format!(
        "INSERT INTO credentials (principal, kind, nkey, bcrypt_hash, node, person, created_at) \
         VALUES ('host_n1', 'machine', '{key}', NULL, 'n1', NULL, 1)"
    ))
    .await;
    assert_eq!(principals(s).await, ["host_n1"]);
}

async fn the_genesis_key_never_overwrites_a_rotated_one(fx: &Fixture) {
    let s = &fx.store;
    let (genesis_seed, genesis) = new_user_key();
    assert!(s.adopt_controller_key_if_absent(&genesis).await.unwrap());
    let rotated = record_key(s, &PrincipalKind::Controller).await.unwrap();
    assert!(
        !s.adopt_controller_key_if_absent(&genesis).await.unwrap(),
        "a restart must not put the genesis key back"
    );
    assert!(
        s.verify_credential("controller", rotated.expose())
            .await
            .unwrap()
    );
    assert!(
        !s.verify_credential("controller", genesis_seed.expose())
            .await
            .unwrap()
    );
}

async fn no_table_holds_a_seed_or_a_plaintext_secret(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("audit-log"), "[module]\nname = \"audit-log\"\n")
        .await
        .unwrap();
    s.assign(&n("n1"), &n("audit-log")).await.unwrap();
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    let mut seeds = vec![
        record_key(s, &host("n1")).await.unwrap(),
        record_key(s, &module("n1", "audit-log")).await.unwrap(),
        record_key(s, &PrincipalKind::Controller).await.unwrap(),
    ];
    let password = s.mint_person_credential(&n("ada")).await.unwrap();
    let live = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(live.secret.expose().starts_with("SU"));
    seeds.push(live.secret);

    let values = fx.every_value().await;
    assert!(values.iter().any(|(c, _)| c == "credentials.nkey"));
    assert!(values.iter().any(|(c, _)| c == "credentials.bcrypt_hash"));
    assert!(
        values
            .iter()
            .any(|(c, _)| c == "enrolment_tokens.enrolment_key")
    );
    for (column, value) in &values {
        // No seed of any kind rests here, not only the ones minted above.
        assert!(!holds_seed(value), "{column} holds an nkey seed");
        for seed in &seeds {
            assert!(!contains(value, seed.expose().as_bytes()), "{column}");
        }
        let raw = hex::decode(password.expose()).expect("hex password");
        assert!(
            !contains(value, password.expose().as_bytes()) && !contains(value, &raw),
            "{column} holds a person's plaintext password"
        );
    }
}

/// A person removed while their credential is being minted keeps no
/// credential: the mint checks the person inside the transaction that writes.
async fn a_person_removed_while_minting_keeps_no_credential(fx: &Fixture) {
    let s = fx.store.clone();
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    let mint = {
        let s = s.clone();
        tokio::spawn(async move { s.mint_person_credential(&n("ada")).await })
    };
    // The cost-11 hash takes far longer than this; the removal lands while
    // the mint is hashing, between a check made outside its write and the write.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(s.remove_person(&n("ada")).await.unwrap());
    match mint.await.expect("join") {
        // Minted first: the removal deleted it too.
        Ok(_) | Err(StoreError::NotFound { what: "person", .. }) => {}
        Err(e) => panic!("minting for a person being removed: {e:?}"),
    }
    assert_eq!(
        s.credential("person_ada").await.unwrap(),
        None,
        "a credential outlived its person"
    );
}

/// The database itself deletes a credential with its person or its
/// assignment, whoever deletes the row: here plain SQL that knows nothing of
/// credentials. A host's credential (module NULL) is not an assignment's.
async fn credentials_go_with_their_person_and_assignment(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    record_key(s, &host("n1")).await.unwrap();
    record_key(s, &module("n1", "git")).await.unwrap();
    s.mint_person_credential(&n("ada")).await.unwrap();
    let ada = s.credential("person_ada").await.unwrap().unwrap();
    assert_eq!(ada.person, Some(n("ada")));
    assert_eq!((ada.node, ada.module), (None, None));
    let host = s.credential("host_n1").await.unwrap().unwrap();
    assert_eq!(host.person, None);

    fx.raw_execute("DELETE FROM persons WHERE name = 'ada'")
        .await;
    fx.raw_execute("DELETE FROM assignments WHERE node = 'n1' AND module = 'git'")
        .await;
    let left = principals(s).await;
    assert_eq!(left, ["host_n1"], "a credential outlived its owner");

    // Added back, they have no credential until one is minted again.
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    assert_eq!(s.credential("person_ada").await.unwrap(), None);
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
}

/// What a mint checked can still be removed before its insert (on
/// PostgreSQL a removal commits between the two). A trigger makes that
/// happen every time: the foreign keys refuse the insert, and the mint says
/// what the check would have said.
async fn an_owner_removed_before_the_insert_is_not_found(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    let removals = "DELETE FROM persons WHERE name = NEW.person; \
         DELETE FROM assignments WHERE node = NEW.node AND module = NEW.module; \
         DELETE FROM nodes WHERE name = NEW.node AND NEW.module IS NULL;";
    match s.kind() {
        BackendKind::Sqlite => {
            fx.raw_execute(&format!(
                "CREATE TRIGGER owner_goes BEFORE INSERT ON credentials BEGIN {removals} END"
            ))
            .await
        }
        BackendKind::Postgres => {
            fx.raw_execute(&format!(
                "CREATE FUNCTION owner_goes() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN {removals} RETURN NEW; END $$"
            ))
            .await;
            fx.raw_execute(
                "CREATE TRIGGER owner_goes BEFORE INSERT ON credentials \
                 FOR EACH ROW EXECUTE FUNCTION owner_goes()",
            )
            .await
        }
    }

    match s.mint_person_credential(&n("ada")).await {
        Err(StoreError::NotFound {
            what: "person",
            key,
        }) => assert_eq!(key, "ada"),
        other => panic!("minting for a person removed before the insert: {other:?}"),
    }
    match record_key(s, &module("n1", "git")).await {
        Err(StoreError::NotFound {
            what: "assignment",
            key,
        }) => assert_eq!(key, "git on n1"),
        other => panic!("minting for an assignment removed before the insert: {other:?}"),
    }
    match record_key(s, &host("n2")).await {
        Err(StoreError::NotFound { what: "node", key }) => assert_eq!(key, "n2"),
        other => panic!("minting for a node removed before the insert: {other:?}"),
    }
    assert!(s.credentials().await.unwrap().is_empty());
}

async fn secrets_stay_out_of_debug_output(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    let shown = format!("{token:?}");
    assert!(!shown.contains(token.secret.expose()), "{shown}");
    let minted = record_key(s, &host("n1")).await.unwrap();
    assert!(!format!("{minted:?}").contains(minted.expose()));
    // Not "no `SU` anywhere": a public key holds those two letters by chance.
    let (seed, prepared) = prepare_token(&n("n1"), Duration::from_secs(60));
    assert!(!format!("{prepared:?}").contains(seed.expose()));
}

/// Spare keys: recorded as a host announces them (a key in use is none),
/// replaced whole, given once to a module assigned to their node and then
/// its credential; forgetting the node forgets them.
async fn spare_keys_are_announced_replaced_and_given_once(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    s.register_module(&n("web"), "[module]\nname = \"web\"\n")
        .await
        .unwrap();
    s.assign(&n("n1"), &n("web")).await.unwrap();
    let key = || nkeys::KeyPair::new_user().public_key();
    let (a, b, c) = (key(), key(), key());
    assert!(s.spare_makers().await.unwrap().is_empty());
    s.record_spare_keys(&[(n("n1"), vec![a.clone(), b.clone()])])
        .await
        .unwrap();
    assert_eq!(s.spare_makers().await.unwrap(), BTreeSet::from([n("n1")]));
    let revision = s.records_revision().await.unwrap();
    assert_eq!(s.spare_keys().await.unwrap()[&n("n1")].len(), 2);
    // Given: the credential recorded, the spare gone; a module not
    // assigned to the node, or a key not its node's, gets nothing.
    let given = s
        .give_keys(&[
            (n("n1"), n("web"), a.clone()),
            (n("n2"), n("web"), b.clone()),
        ])
        .await
        .unwrap();
    assert_eq!(given, [(n("n1"), n("web"), a.clone())]);
    assert!(
        s.records_revision().await.unwrap() > revision,
        "a credential"
    );
    let cred = s.credential("module_n1_web").await.unwrap().unwrap();
    assert_eq!(
        cred.credential,
        mesh_core::users_file::UserCredential::NKey(a.clone())
    );
    assert_eq!(
        s.spare_keys().await.unwrap()[&n("n1")],
        std::slice::from_ref(&b)
    );
    // The host, not yet told, announces the given key again: not a spare.
    s.record_spare_keys(&[(n("n1"), vec![a.clone(), b.clone(), c.clone()])])
        .await
        .unwrap();
    let mut want = vec![b.clone(), c.clone()];
    want.sort();
    assert_eq!(s.spare_keys().await.unwrap()[&n("n1")], want);
    // Another node cannot take n1's spare.
    s.record_spare_keys(&[(n("n2"), vec![c.clone()])])
        .await
        .unwrap();
    assert!(!s.spare_keys().await.unwrap().contains_key(&n("n2")));
    assert!(
        s.record_spare_keys(&[(n("n1"), vec!["SUnotakey".into()])])
            .await
            .is_err()
    );
    // Every spare given, or none announced since: n1's host still makes
    // them (a module assigned now waits for the next), n3's never did.
    s.add_node(&n("n3"), &[]).await.unwrap();
    s.record_spare_keys(&[(n("n1"), vec![]), (n("n3"), vec![])])
        .await
        .unwrap();
    assert!(!s.spare_keys().await.unwrap().contains_key(&n("n1")));
    assert!(s.spare_makers().await.unwrap().contains(&n("n1")));
    assert!(!s.spare_makers().await.unwrap().contains(&n("n3")));
    s.forget_node(&n("n1")).await.unwrap();
    assert!(s.spare_keys().await.unwrap().is_empty());
    assert!(!s.spare_makers().await.unwrap().contains(&n("n1")));
}

async fn amqp_hashes_are_written_once_and_recompose(fx: &Fixture) {
    let s = &fx.store;
    let seed = |kp: &nkeys::KeyPair| kp.seed().unwrap();
    let (a, b) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let hash = |kp: &nkeys::KeyPair| mesh_core::authority::amqp::announced_hash(&seed(kp));
    let both = BTreeMap::from([(a.public_key(), hash(&a)), (b.public_key(), hash(&b))]);
    let before = s.records_revisions().await.unwrap()["credentials"];
    assert_eq!(s.record_amqp_hashes(&both).await.unwrap(), 2);
    assert_eq!(s.amqp_hashes().await.unwrap(), both);
    let after = s.records_revisions().await.unwrap()["credentials"];
    assert!(after > before, "a new hash recomposes the users");
    // Announced again, unchanged (every report does): nothing written, no
    // composition.
    let revision = s.records_revision().await.unwrap();
    assert_eq!(s.record_amqp_hashes(&both).await.unwrap(), 0);
    assert_eq!(s.records_revision().await.unwrap(), revision);
    // A changed one is written alone.
    let c = nkeys::KeyPair::new_user();
    let changed = BTreeMap::from([(a.public_key(), hash(&c))]);
    assert_eq!(s.record_amqp_hashes(&changed).await.unwrap(), 1);
    assert_eq!(s.amqp_hashes_of(&[a.public_key()]).await.unwrap(), changed);
    assert!(s.records_revision().await.unwrap() > revision);
    // Not a hash, or not a user key: refused, nothing written.
    for bad in [
        BTreeMap::from([(c.public_key(), "not a hash".to_string())]),
        BTreeMap::from([("SUAM".to_string(), hash(&c))]),
    ] {
        let e = s.record_amqp_hashes(&bad).await.unwrap_err().to_string();
        assert!(e.contains("hash") || e.contains("key"), "{e}");
    }
    assert!(
        s.amqp_hashes_of(&[c.public_key()])
            .await
            .unwrap()
            .is_empty()
    );
    // A token's seed is made here: its hash is recorded with it.
    s.add_node(&n("n1"), &[]).await.unwrap();
    let issued = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        s.amqp_hashes_of(std::slice::from_ref(&issued.enrolment_key))
            .await
            .unwrap()
            .get(&issued.enrolment_key),
        Some(&mesh_core::authority::amqp::announced_hash(
            issued.secret.expose()
        ))
    );
}

conformance!(
    amqp_hashes_are_written_once_and_recompose,
    spare_keys_are_announced_replaced_and_given_once,
    recording_a_machine_key_rotates_and_verifies,
    a_machine_password_and_a_non_user_key_are_refused,
    the_genesis_key_never_overwrites_a_rotated_one,
    no_table_holds_a_seed_or_a_plaintext_secret,
    a_person_removed_while_minting_keeps_no_credential,
    credentials_go_with_their_person_and_assignment,
    an_owner_removed_before_the_insert_is_not_found,
    secrets_stay_out_of_debug_output,
);
