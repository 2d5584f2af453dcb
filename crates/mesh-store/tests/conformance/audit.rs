//! The audit trail and operators' roles: rows appended and listed, a
//! retried request recorded once, and no row changed or deleted by any
//! writer — the store's API has no way, and SQL through the same database
//! is refused by the table's own triggers.

use mesh_core::operation::Role;
use mesh_core::records::ToolAccess;

use crate::fixture::*;
use mesh_store::*;

fn entry(who: Actor, operation: &str, request: Option<&str>) -> AuditEntry {
    AuditEntry {
        who,
        operation: operation.into(),
        arguments: serde_json::json!({ "module": "echo", "node": "n1" }),
        outcome: Outcome::Done { revision: Some(7) },
        request_id: request.map(str::to_string),
    }
}

async fn audit_rows_are_appended_listed_and_never_changed(fx: &Fixture) {
    let s = &fx.store;
    let first = s
        .append_audit(&entry(Actor::Person("ada".into()), "assign", Some("r-1")))
        .await
        .unwrap();
    let Appended::New(first) = first else {
        panic!("a first append is new: {first:?}")
    };
    // The same request again (its answer lost): recognised, not appended.
    assert_eq!(
        s.append_audit(&entry(Actor::Person("ada".into()), "assign", Some("r-1")))
            .await
            .unwrap(),
        Appended::Seen(first)
    );
    let seen = s.audit_of_request("r-1").await.unwrap().expect("its row");
    assert_eq!((seen.id, seen.operation.as_str()), (first, "assign"));
    assert_eq!(s.audit_of_request("r-2").await.unwrap(), None);
    let refused = AuditEntry {
        outcome: Outcome::Refused {
            reason: "module ech is not registered".into(),
        },
        ..entry(Actor::Local("root".into()), "unassign", None)
    };
    s.append_audit(&refused).await.unwrap();
    let all = s.audit(&AuditFilter::default()).await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        (
            all[0].who.as_str(),
            all[0].operation.as_str(),
            all[0].outcome.as_str()
        ),
        ("person ada", "assign", "done")
    );
    assert_eq!(all[0].revision, Some(7));
    assert_eq!(all[0].request_id.as_deref(), Some("r-1"));
    let args: serde_json::Value = serde_json::from_str(&all[0].arguments).unwrap();
    assert_eq!(args["module"], "echo");
    assert_eq!(
        (
            all[1].who.as_str(),
            all[1].outcome.as_str(),
            all[1].revision
        ),
        ("local root", "refused: module ech is not registered", None)
    );
    let ada = s
        .audit(&AuditFilter {
            who: Some("person ada".into()),
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ada.len(), 1);
    let newest = s
        .audit(&AuditFilter {
            limit: Some(1),
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(newest[0].operation, "unassign", "the newest, when limited");
    let later = s
        .audit(&AuditFilter {
            since: Some(all[1].at + 1),
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert!(later.is_empty(), "{later:?}");

    // Any writer of the database, refused by the table itself.
    for sql in [
        "UPDATE audit SET who = 'person eve'",
        "DELETE FROM audit",
        "UPDATE audit SET outcome = 'done' WHERE outcome LIKE 'refused%'",
    ] {
        let e = fx.raw_try_execute(sql).await.expect_err(sql);
        assert!(e.to_string().contains("append-only"), "{sql}: {e}");
    }
    assert_eq!(s.audit(&AuditFilter::default()).await.unwrap(), all);
}

async fn a_persons_role_is_recorded_and_moves_the_revision(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("ada"), &ToolAccess::Only(vec![]))
        .await
        .unwrap();
    assert_eq!(s.person(&n("ada")).await.unwrap().unwrap().role, None);
    let before = s.records_revision().await.unwrap();
    assert!(
        s.set_person_role(&n("ada"), Some(Role::Operator))
            .await
            .unwrap()
    );
    assert!(
        s.records_revision().await.unwrap() > before,
        "grants follow a role"
    );
    assert_eq!(
        s.person(&n("ada")).await.unwrap().unwrap().role,
        Some(Role::Operator)
    );
    // Replacing the tools keeps the role.
    s.put_person(&n("ada"), &ToolAccess::All).await.unwrap();
    assert_eq!(s.persons().await.unwrap()[0].role, Some(Role::Operator));
    assert!(s.set_person_role(&n("ada"), None).await.unwrap());
    assert_eq!(s.person(&n("ada")).await.unwrap().unwrap().role, None);
    assert!(
        !s.set_person_role(&n("nobody"), Some(Role::Admin))
            .await
            .unwrap()
    );
    // A role the store cannot read is named with its person.
    fx.raw_execute("UPDATE persons SET role = 'root' WHERE name = 'ada'")
        .await;
    let e = s.persons().await.unwrap_err();
    assert!(
        format!("{e:?}").contains("ada") && e.to_string().contains("person"),
        "{e:?}"
    );
}

conformance!(
    audit_rows_are_appended_listed_and_never_changed,
    a_persons_role_is_recorded_and_moves_the_revision,
);
