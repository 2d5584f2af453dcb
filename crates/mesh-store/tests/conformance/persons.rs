//! Persons and the tools each may call.

use mesh_core::records::{ToolAccess, ToolListError};

use crate::fixture::*;
use mesh_store::*;

/// The tools a fleet file would write, read as a grant.
fn tools(written: &[&str]) -> ToolAccess {
    let written: Vec<String> = written.iter().map(|t| t.to_string()).collect();
    ToolAccess::from_written(&written).expect("test tools read")
}

async fn persons_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    s.put_person(&n("bob"), &tools(&["git.clone", "audit-log.tail"]))
        .await
        .unwrap();
    assert_eq!(
        s.person(&n("bob")).await.unwrap().unwrap().tools,
        tools(&["audit-log.tail", "git.clone"])
    );
    let all: Vec<(String, ToolAccess)> = s
        .persons()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name.to_string(), p.tools))
        .collect();
    assert_eq!(all[0], ("ada".into(), ToolAccess::All));
    assert_eq!(all.len(), 2);

    // Narrowing replaces the grant.
    s.put_person(&n("ada"), &tools(&["git.clone"]))
        .await
        .unwrap();
    assert_eq!(
        s.person(&n("ada")).await.unwrap().unwrap().tools,
        tools(&["git.clone"])
    );
    // A "*" inside a tool list never reaches the store: it does not read as
    // a ToolAccess, which holds every tool or tool references, never both.
    match ToolAccess::from_written(&["git.clone".into(), "*".into()]) {
        Err(ToolListError::StarInList) => {}
        other => panic!("a '*' inside a tool list: {other:?}"),
    }

    s.mint_person_credential(&n("ada")).await.unwrap();
    assert!(s.remove_person(&n("ada")).await.unwrap());
    assert_eq!(s.person(&n("ada")).await.unwrap(), None);
    assert_eq!(s.credential("person_ada").await.unwrap(), None);
}

/// Tools read back as the grant they were written from, or not at all: a row
/// mesh could not have written makes the person malformed rather than
/// granting something else.
async fn tools_that_do_not_read_make_the_person_malformed(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("bob"), &tools(&["git.clone", "git.clone"]))
        .await
        .unwrap();
    assert_eq!(
        s.person(&n("bob")).await.unwrap().unwrap().tools,
        tools(&["git.clone"]),
        "deduplicated"
    );
    // Every tool is the all_tools flag; a lone "*" row is not how it is kept.
    fx.raw_execute("INSERT INTO persons (name, all_tools, created_at) VALUES ('eve', 0, 1)")
        .await;
    fx.raw_execute("INSERT INTO person_tools (person, tool) VALUES ('eve', '*')")
        .await;
    fx.raw_execute("INSERT INTO persons (name, all_tools, created_at) VALUES ('mallory', 0, 1)")
        .await;
    fx.raw_execute("INSERT INTO person_tools (person, tool) VALUES ('mallory', 'not a tool')")
        .await;
    match s.person(&n("eve")).await {
        Err(StoreError::Malformed {
            what: "person",
            source:
                MalformedValue::Tools {
                    source: ToolListError::StarInList,
                    ..
                },
        }) => {}
        other => panic!("eve's lone \"*\" row: {other:?}"),
    }
    let e = s.person(&n("mallory")).await.unwrap_err();
    match &e {
        StoreError::Malformed {
            what: "person",
            source:
                MalformedValue::Tools {
                    person,
                    source: ToolListError::BadTool { written, .. },
                },
        } => assert_eq!(
            (person.as_str(), written.as_str()),
            ("mallory", "not a tool")
        ),
        other => panic!("mallory's tool does not read: {other:?}"),
    }
    // The message says which record and, through its sources, why.
    let mut shown = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        shown = format!("{shown}: {c}");
        cause = c.source();
    }
    assert!(
        shown.starts_with(
            "a person record in the store is malformed: the tools of mallory do not read as a grant: \
             tool \"not a tool\""
        ),
        "{shown}"
    );
    match s.persons().await {
        Err(StoreError::Malformed { what: "person", .. }) => {}
        other => panic!("every person, two of them malformed: {other:?}"),
    }
}

async fn a_persons_key_is_theirs_alone_moves_the_revision_and_goes_with_them(fx: &Fixture) {
    let s = &fx.store;
    let ada_key = nkeys::KeyPair::new_user().public_key();
    let bob_key = nkeys::KeyPair::new_user().public_key();
    let err = s.set_person_key(&n("ada"), &ada_key).await.unwrap_err();
    assert!(err.to_string().contains("there is no person ada"), "{err}");
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    s.put_person(&n("bob"), &ToolAccess::All).await.unwrap();

    let before = s.records_revision().await.unwrap();
    s.set_person_key(&n("ada"), &ada_key).await.unwrap();
    assert!(
        s.records_revision().await.unwrap() > before,
        "a key changes who may connect"
    );
    let err = s.set_person_key(&n("bob"), &ada_key).await.unwrap_err();
    assert!(
        err.to_string().contains("already the key of person ada"),
        "{err}"
    );
    let err = s.set_person_key(&n("bob"), "SUAAAA").await.unwrap_err();
    assert!(
        err.to_string().contains("not an nkey user public key"),
        "{err}"
    );
    s.set_person_key(&n("bob"), &bob_key).await.unwrap();
    // Replacing one's own key is allowed.
    let ada_new = nkeys::KeyPair::new_user().public_key();
    s.set_person_key(&n("ada"), &ada_new).await.unwrap();
    assert_eq!(
        s.person_keys().await.unwrap(),
        [(n("ada"), ada_new), (n("bob"), bob_key.clone())]
    );
    assert!(s.remove_person(&n("ada")).await.unwrap());
    assert_eq!(s.person_keys().await.unwrap(), [(n("bob"), bob_key)]);
}

conformance!(
    persons_round_trip,
    tools_that_do_not_read_make_the_person_malformed,
    a_persons_key_is_theirs_alone_moves_the_revision_and_goes_with_them,
);
