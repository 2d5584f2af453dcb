//! A person's one-time login: issued with the person, live in the users
//! file until spent or expired, spent once — the key the person made
//! recorded in the same transaction — and refused alike for every reason.

use std::time::Duration;

use mesh_core::records::ToolAccess;

use crate::fixture::*;
use mesh_store::*;

/// `person` recorded with a role and no key: their login, of `life`.
async fn login(s: &Store, person: &str, life: Duration) -> IssuedLogin {
    s.record_person(
        &n(person),
        &ToolAccess::Only(vec![]),
        Some(mesh_core::operation::Role::Viewer),
        None,
        Some(life),
    )
    .await
    .unwrap()
    .expect("a login")
}

async fn a_login_is_spent_once_and_records_the_persons_key(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("ada"), &ToolAccess::Only(vec![]))
        .await
        .unwrap();
    let before = s.records_revision().await.unwrap();
    let login = login(s, "ada", Duration::from_secs(3600)).await;
    assert!(
        s.records_revision().await.unwrap() > before,
        "a login is composed into the users file at once"
    );
    let live = s.live_logins().await.unwrap();
    assert_eq!(
        live.iter()
            .map(|l| (l.person.as_str(), l.login_key.as_str()))
            .collect::<Vec<_>>(),
        [("ada", login.login_key.as_str())]
    );
    let key = nkeys::KeyPair::new_user().public_key();
    // Another login's key, or a key that is no key: refused, nothing spent.
    let other = nkeys::KeyPair::new_user().public_key();
    assert!(matches!(
        s.spend_login(&n("ada"), &other, &key).await,
        Err(StoreError::TokenRefused(_))
    ));
    assert!(
        s.spend_login(&n("ada"), &login.login_key, "SUAB…")
            .await
            .is_err()
    );
    assert_eq!(s.live_logins().await.unwrap().len(), 1);
    s.spend_login(&n("ada"), &login.login_key, &key)
        .await
        .unwrap();
    assert_eq!(
        s.person_keys().await.unwrap(),
        [(n("ada"), key.clone())],
        "the key the person made is theirs"
    );
    assert!(s.live_logins().await.unwrap().is_empty());
    // Spent: the same login again is refused, the key stays.
    let again = nkeys::KeyPair::new_user().public_key();
    let e = s
        .spend_login(&n("ada"), &login.login_key, &again)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "this enrolment token cannot be used; ask the operator for a new one"
    );
    assert_eq!(s.person_keys().await.unwrap()[0].1, key);
}

async fn an_expired_login_is_neither_live_nor_spendable(fx: &Fixture) {
    let s = &fx.store;
    let login = login(s, "dan", Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(s.live_logins().await.unwrap().is_empty());
    let key = nkeys::KeyPair::new_user().public_key();
    assert!(matches!(
        s.spend_login(&n("dan"), &login.login_key, &key).await,
        Err(StoreError::TokenRefused(_))
    ));
    assert!(s.person_keys().await.unwrap().is_empty());
}

async fn a_person_is_recorded_whole_or_not_at_all(fx: &Fixture) {
    let s = &fx.store;
    let key = nkeys::KeyPair::new_user().public_key();
    s.record_person(
        &n("ada"),
        &ToolAccess::All,
        Some(mesh_core::operation::Role::Viewer),
        Some(&key),
        None,
    )
    .await
    .unwrap();
    // Bob with ada's key: refused, and bob is not recorded at all.
    let e = s
        .record_person(
            &n("bob"),
            &ToolAccess::All,
            Some(mesh_core::operation::Role::Admin),
            Some(&key),
            None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("a person's key"), "{e}");
    assert!(
        s.person(&n("bob")).await.unwrap().is_none(),
        "half a person was recorded"
    );
    // A role and no key: a login with the person.
    let login = s
        .record_person(
            &n("carl"),
            &ToolAccess::Only(vec![]),
            Some(mesh_core::operation::Role::Operator),
            None,
            Some(Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .expect("a login");
    assert_eq!(s.live_logins().await.unwrap()[0].login_key, login.login_key);
    assert_eq!(
        s.person(&n("carl")).await.unwrap().unwrap().role,
        Some(mesh_core::operation::Role::Operator)
    );
}

conformance!(
    a_person_is_recorded_whole_or_not_at_all,
    a_login_is_spent_once_and_records_the_persons_key,
    an_expired_login_is_neither_live_nor_spendable,
);
