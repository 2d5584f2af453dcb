//! Persons and the tools each may call.

use crate::fixture::*;
use mesh_store::*;

async fn persons_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    s.put_person(
        &n("bob"),
        &ToolGrant::Tools(vec!["git.clone".into(), "audit-log.tail".into()]),
    )
    .await
    .unwrap();
    assert_eq!(
        s.person(&n("bob")).await.unwrap().unwrap().tools,
        ToolGrant::Tools(vec!["audit-log.tail".into(), "git.clone".into()])
    );
    let all: Vec<(String, ToolGrant)> = s
        .persons()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name.to_string(), p.tools))
        .collect();
    assert_eq!(all[0], ("ada".into(), ToolGrant::All));
    assert_eq!(all.len(), 2);

    // Narrowing replaces the grant.
    s.put_person(&n("ada"), &ToolGrant::Tools(vec!["git.clone".into()]))
        .await
        .unwrap();
    assert_eq!(
        s.person(&n("ada")).await.unwrap().unwrap().tools,
        ToolGrant::Tools(vec!["git.clone".into()])
    );
    match s
        .put_person(&n("eve"), &ToolGrant::Tools(vec!["*".into()]))
        .await
    {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("a '*' inside a tool list: {other:?}"),
    }

    s.mint_person_credential(&n("ada")).await.unwrap();
    assert!(s.remove_person(&n("ada")).await.unwrap());
    assert_eq!(s.person(&n("ada")).await.unwrap(), None);
    assert_eq!(s.credential("person_ada").await.unwrap(), None);
}

conformance!(persons_round_trip,);
