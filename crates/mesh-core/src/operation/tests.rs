use super::*;

#[test]
fn each_role_includes_the_one_before_it() {
    let viewer: Vec<_> = Role::Viewer.operations().collect();
    let operator: Vec<_> = Role::Operator.operations().collect();
    let admin: Vec<_> = Role::Admin.operations().collect();
    assert_eq!(
        viewer,
        [
            Operation::Status,
            Operation::Nodes,
            Operation::Modules,
            Operation::Plan,
            Operation::Logs,
            Operation::Events,
            Operation::Deployments
        ]
    );
    assert!(viewer.iter().all(|o| operator.contains(o)));
    assert!(operator.iter().all(|o| admin.contains(o)));
    assert_eq!(operator.len(), 16);
    assert_eq!(admin, Operation::ALL);
    for op in [
        Operation::Assign,
        Operation::SecretSet,
        Operation::Build,
        Operation::Deploy,
        Operation::DeploymentChange,
    ] {
        assert!(
            !Role::Viewer.allows(op) && Role::Operator.allows(op),
            "{op}"
        );
    }
    for op in [Operation::PersonAdd, Operation::Audit, Operation::Register] {
        assert!(!Role::Operator.allows(op) && Role::Admin.allows(op), "{op}");
    }
}

#[test]
fn names_read_back_and_strangers_are_refused() {
    for op in Operation::ALL {
        assert_eq!(op.as_str().parse::<Operation>(), Ok(op));
        // A subject token: no dot, no wildcard.
        assert!(!op.as_str().contains(['.', '*', '>']), "{op}");
        let json = serde_json::to_string(&op).unwrap();
        assert_eq!(json, format!("\"{op}\""));
    }
    for r in Role::ALL {
        assert_eq!(r.as_str().parse::<Role>(), Ok(r));
    }
    assert_eq!(
        "root".parse::<Role>().unwrap_err().to_string(),
        "\"root\" is not a role: write viewer, operator or admin"
    );
    assert!("node.add".parse::<Operation>().is_err());
}

#[test]
fn reads_change_nothing() {
    let reads: Vec<_> = Operation::ALL
        .into_iter()
        .filter(|o| !o.changes())
        .collect();
    assert_eq!(
        reads,
        [
            Operation::Status,
            Operation::Nodes,
            Operation::Modules,
            Operation::Plan,
            Operation::Logs,
            Operation::Events,
            Operation::Audit,
            Operation::Deployments
        ]
    );
}

#[test]
fn a_refusal_names_the_role_that_would_allow_it() {
    assert_eq!(
        refusal("ada", Some(Role::Viewer), Operation::Assign),
        "person ada is a viewer; `assign` takes the operator role (an admin: mesh person set ada --role operator)"
    );
    assert!(
        refusal("bo", None, Operation::Status)
            .contains("bo has no role; `status` takes the viewer role")
    );
}

#[test]
fn requests_and_arguments_read_strictly() {
    use super::wire::*;
    let r = request(br#"{"id": "r1", "args": {"module": "echo", "node": "n1"}}"#).unwrap();
    let a: AssignArgs = args(Operation::Assign, &r.args).unwrap();
    assert_eq!(
        (a.module.as_str(), a.node.as_str(), a.version),
        ("echo", "n1", None)
    );
    let Err(Reply::Refused { reason }) = request(b"{\"id\": 1}") else {
        panic!("an id that is not text")
    };
    assert!(reason.starts_with("the request does not read"), "{reason}");
    let Err(Reply::Refused { reason }) = request(br#"{"id": "r", "who": "ada"}"#) else {
        panic!("a field of its own")
    };
    assert!(reason.contains("unknown field `who`"), "{reason}");
    let bad = serde_json::json!({"module": "Echo!", "node": "n1"});
    let Err(Reply::Refused { reason }) = args::<AssignArgs>(Operation::Assign, &bad) else {
        panic!("a bad name")
    };
    assert!(
        reason.starts_with("the arguments of `assign` do not read"),
        "{reason}"
    );
    let done = Reply::Done {
        said: "assigned".into(),
        revision: Some(3),
        data: serde_json::Value::Null,
    };
    let text = serde_json::to_string(&done).unwrap();
    assert!(text.starts_with(r#"{"outcome":"done""#), "{text}");
    assert_eq!(serde_json::from_str::<Reply>(&text).unwrap(), done);
}

#[test]
fn the_trail_keeps_a_secrets_name_and_a_catalogues_file_names_only() {
    use super::wire::audited;
    let set = serde_json::json!({"name": "db", "sealed": "c2VhbGVk", "sender": "XAB"});
    for op in [Operation::SecretSet, Operation::SecretRotate] {
        assert_eq!(audited(op, &set), serde_json::json!({"name": "db"}));
    }
    let register = serde_json::json!({
        "manifests": [["cat/a/mesh.toml", "[module]…"], ["cat/b/mesh.toml", "[module]…"]],
        "aliases": [["cat/aliases.toml", "[aliases]…"]],
    });
    assert_eq!(
        audited(Operation::Register, &register),
        serde_json::json!({"files": ["cat/a/mesh.toml", "cat/b/mesh.toml", "cat/aliases.toml"]})
    );
    // Anything else is kept as asked.
    let assign = serde_json::json!({"module": "echo", "node": "n1"});
    assert_eq!(audited(Operation::Assign, &assign), assign);
    assert_eq!(audited(Operation::SecretRemove, &set), set);
}
