//! Enrolment tokens: one spend wins, and every refusal reads the same.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::fixture::*;
use mesh_store::*;

/// Keys a host would make for itself.
fn host_keys() -> HostKeys {
    HostKeys {
        host_key: nkeys::KeyPair::new_user().public_key(),
        xkey: nkeys::XKey::new().public_key(),
        spare_keys: Vec::new(),
    }
}

async fn token_spend_records_the_key(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let live = s.live_tokens().await.unwrap();
    assert_eq!(live.len(), 1);
    // The token carries the enrolment seed; the store keeps its public key,
    // the enrolment user's key in the users file.
    assert!(token.secret.expose().starts_with("SU"), "an nkey user seed");
    let from_seed = nkeys::KeyPair::from_seed(token.secret.expose()).unwrap();
    assert_eq!(from_seed.public_key(), token.enrolment_key);
    assert_eq!(live[0].enrolment_key, token.enrolment_key);
    assert!(mesh_core::users_file::UserCredential::is_user_nkey(
        &live[0].enrolment_key
    ));

    let keys = host_keys();
    let before = s.records_revision().await.unwrap();
    let enrolled = s
        .spend_token(&n("n1"), &token.enrolment_key, &keys)
        .await
        .unwrap();
    assert_eq!(enrolled.public_key, keys.host_key);
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.public_key.as_deref(), Some(keys.host_key.as_str()));
    assert_eq!(node.xkey.as_deref(), Some(keys.xkey.as_str()));
    assert_eq!(node.enrolled_at, Some(enrolled.enrolled_at));
    // A host announcing no spares makes its modules' keys itself.
    assert!(!s.spare_makers().await.unwrap().contains(&n("n1")));
    // The host principal's credential is what the users file names it by.
    let cred = s.credential("host_n1").await.unwrap().expect("recorded");
    assert_eq!(
        cred.credential,
        mesh_core::users_file::UserCredential::NKey(keys.host_key.clone())
    );
    assert!(
        s.records_revision().await.unwrap() > before,
        "an enrolment changes what authority is derived from"
    );
    assert!(
        s.live_tokens().await.unwrap().is_empty(),
        "spent is not live"
    );

    // Spending again is refused and leaves the recorded key alone.
    assert_refused(
        s.spend_token(&n("n1"), &token.enrolment_key, &host_keys())
            .await,
        |r| matches!(r, RefusalReason::Spent { .. }),
    );
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.public_key.as_deref(), Some(keys.host_key.as_str()));
    let cred = s.credential("host_n1").await.unwrap().expect("recorded");
    assert_eq!(
        cred.credential,
        mesh_core::users_file::UserCredential::NKey(keys.host_key)
    );

    // A malformed key is refused before the spend: the token stays live.
    s.add_node(&n("n2"), &[]).await.unwrap();
    let t2 = s
        .issue_token(&n("n2"), Duration::from_secs(60))
        .await
        .unwrap();
    for bad in [
        HostKeys {
            host_key: "ed25519:nope".into(),
            ..host_keys()
        },
        HostKeys {
            xkey: nkeys::KeyPair::new_user().public_key(),
            ..host_keys()
        },
    ] {
        match s.spend_token(&n("n2"), &t2.enrolment_key, &bad).await {
            Err(StoreError::Invalid { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(s.live_tokens().await.unwrap().len(), 1, "not spent");
}

async fn token_refusals_say_the_same_and_log_the_reason(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();

    // Expired: a token valid for no time at all.
    let expired = s.issue_token(&n("n1"), Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r_expired = s
        .spend_token(&n("n1"), &expired.enrolment_key, &host_keys())
        .await;
    // Unknown: a key nobody issued a token for.
    let (_, stranger) = new_user_key();
    let r_unknown = s.spend_token(&n("n1"), &stranger, &host_keys()).await;
    // Unknown too: n2's token presented for n1.
    let t2 = s
        .issue_token(&n("n2"), Duration::from_secs(60))
        .await
        .unwrap();
    let r_wrong_node = s
        .spend_token(&n("n1"), &t2.enrolment_key, &host_keys())
        .await;
    // Spent.
    let k2 = host_keys();
    s.spend_token(&n("n2"), &t2.enrolment_key, &k2)
        .await
        .unwrap();
    let r_spent = s
        .spend_token(&n("n2"), &t2.enrolment_key, &host_keys())
        .await;

    let shown: BTreeSet<String> = [&r_expired, &r_unknown, &r_wrong_node, &r_spent]
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert_eq!(
        shown.len(),
        1,
        "every refusal must read the same: {shown:?}"
    );
    let shown = shown.into_iter().next().unwrap();
    assert!(!shown.contains(expired.secret.expose()));
    assert!(!shown.contains(t2.secret.expose()));
    assert!(!shown.contains("SU"), "{shown}");

    assert_refused(r_expired, |r| matches!(r, RefusalReason::Expired { .. }));
    assert_refused(r_unknown, |r| *r == RefusalReason::Unknown);
    assert_refused(r_wrong_node, |r| *r == RefusalReason::Unknown);
    assert_refused(r_spent, |r| matches!(r, RefusalReason::Spent { .. }));

    // No refused spend recorded a key.
    assert_eq!(s.node(&n("n1")).await.unwrap().unwrap().public_key, None);
    assert_eq!(
        s.node(&n("n2")).await.unwrap().unwrap().public_key,
        Some(k2.host_key)
    );

    match s.issue_token(&n("ghost"), Duration::from_secs(60)).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("token for an unknown node: {other:?}"),
    }
}

async fn issuing_again_revokes_the_earlier_token(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let first = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    let second = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(s.live_tokens().await.unwrap().len(), 1, "one live claim");
    assert_ne!(first.enrolment_key, second.enrolment_key, "a new key");
    assert_eq!(
        s.live_tokens().await.unwrap()[0].enrolment_key,
        second.enrolment_key
    );
    assert_refused(
        s.spend_token(&n("n1"), &first.enrolment_key, &host_keys())
            .await,
        |r| *r == RefusalReason::Unknown,
    );
    s.spend_token(&n("n1"), &second.enrolment_key, &host_keys())
        .await
        .unwrap();
}

async fn fifty_concurrent_spends_one_wins(fx: &Fixture) {
    let s = fx.store.clone();
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let secret: Arc<str> = token.enrolment_key.as_str().into();
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let keys: Vec<HostKeys> = (0..50).map(|_| host_keys()).collect();
    let mut tasks = Vec::new();
    for (i, k) in keys.iter().cloned().enumerate() {
        let (s, secret, barrier) = (s.clone(), secret.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (i, s.spend_token(&n("n1"), &secret, &k).await)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (i, r) = t.await.expect("join");
        match r {
            Ok(_) => winners.push(i),
            Err(StoreError::TokenRefused(TokenRefused {
                reason: RefusalReason::Spent { .. },
                ..
            })) => {}
            Err(e) => panic!("spend {i} failed for a reason other than a spent token: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one spend wins: {winners:?}");
    let key = s.node(&n("n1")).await.unwrap().unwrap().public_key;
    assert_eq!(
        key,
        Some(keys[winners[0]].host_key.clone()),
        "the winner's key"
    );
}

/// The same enrolment delivered twice is one enrolment: the second spend
/// answers enrolled with the same record; a spend with another host key is
/// still refused as spent.
async fn the_same_enrolment_delivered_again_is_enrolled_not_refused(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let keys = host_keys();
    let first = s
        .spend_token(&n("n1"), &token.enrolment_key, &keys)
        .await
        .unwrap();
    let revision = s.records_revision().await.unwrap();
    let again = s
        .spend_token(&n("n1"), &token.enrolment_key, &keys)
        .await
        .expect("the same enrolment, delivered again");
    assert_eq!(again, first);
    assert_eq!(
        s.records_revision().await.unwrap(),
        revision,
        "nothing written"
    );
    // Another host key with the spent token: refused, keys kept.
    assert_refused(
        s.spend_token(&n("n1"), &token.enrolment_key, &host_keys())
            .await,
        |r| matches!(r, RefusalReason::Spent { .. }),
    );
    // The same host key but another XKey is another enrolment: refused.
    let other_xkey = HostKeys {
        host_key: keys.host_key.clone(),
        xkey: nkeys::XKey::new().public_key(),
        spare_keys: Vec::new(),
    };
    assert_refused(
        s.spend_token(&n("n1"), &token.enrolment_key, &other_xkey)
            .await,
        |r| matches!(r, RefusalReason::Spent { .. }),
    );
}

/// A node recorded as enrolled whose host never came gets a new token, and
/// loses the host key it enrolled with; one whose host was heard from does
/// not.
async fn a_token_is_reissued_only_for_a_host_never_heard_from(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    // Its host announced spares: it makes them.
    let keys = HostKeys {
        spare_keys: vec![nkeys::KeyPair::new_user().public_key()],
        ..host_keys()
    };
    s.spend_token(&n("n1"), &token.enrolment_key, &keys)
        .await
        .unwrap();
    assert!(s.spare_makers().await.unwrap().contains(&n("n1")));
    let again = s
        .reissue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("never heard from");
    assert_ne!(again.enrolment_key, token.enrolment_key);
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!((node.public_key, node.enrolled_at), (None, None));
    assert!(s.credential("host_n1").await.unwrap().is_none());
    assert_eq!(s.live_tokens().await.unwrap().len(), 1);
    // The new token enrols a new host; once heard from, no more reissues.
    let keys = host_keys();
    s.spend_token(&n("n1"), &again.enrolment_key, &keys)
        .await
        .unwrap();
    // The host enrolled now announces none: it makes its modules' keys.
    assert!(!s.spare_makers().await.unwrap().contains(&n("n1")));
    s.node_seen(&n("n1"), 5).await.unwrap();
    assert!(
        s.reissue_token(&n("n1"), Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.public_key.as_deref(), Some(keys.host_key.as_str()));
    assert!(matches!(
        s.reissue_token(&n("n9"), Duration::from_secs(60)).await,
        Err(StoreError::NotFound { what: "node", .. })
    ));
}

conformance!(
    the_same_enrolment_delivered_again_is_enrolled_not_refused,
    a_token_is_reissued_only_for_a_host_never_heard_from,
    token_spend_records_the_key,
    token_refusals_say_the_same_and_log_the_reason,
    issuing_again_revokes_the_earlier_token,
    fifty_concurrent_spends_one_wins,
);
