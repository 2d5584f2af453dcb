//! The hosts' logs tool: served by each host for its own node only,
//! called by the controller and by persons granted every tool, by no
//! module, and stored by no stream.

use super::*;

#[test]
fn each_host_serves_only_its_own_nodes_logs() {
    let ps = principals();
    let (h1, h2) = (find(&ps, "host_n1"), find(&ps, "host_n2"));
    let (logs1, logs2) = (subjects::host_logs(&n("n1")), subjects::host_logs(&n("n2")));
    assert!(can_subscribe(h1, &logs1));
    assert!(!can_subscribe(h1, &logs2));
    assert!(can_subscribe(h2, &logs2));
    assert!(!can_subscribe(h2, &logs1));
    // Serving is hearing requests and answering each once; never calling
    // another host's logs tool, nor writing into anyone's inbox.
    for h in [h1, h2] {
        assert!(!can_publish(h, &logs1) && !can_publish(h, &logs2));
        assert!(!can_publish(h, "_INBOX.controller.r1"));
        let why = h.permissions.allow_responses.as_ref().unwrap().to_string();
        assert!(why.contains("answers each log request"), "{why}");
    }
    let grant = h1
        .permissions
        .subscribe
        .iter()
        .find(|g| g.subject == logs1)
        .unwrap();
    assert_eq!(
        grant.cause.to_string(),
        "record: node n1 serves its modules' logs (mesh logs)"
    );
}

#[test]
fn the_controller_and_every_tool_persons_call_it_and_no_module_does() {
    let ps = principals();
    let logs = subjects::host_logs(&n("n2"));
    let c = find(&ps, "controller");
    assert!(can_publish(c, &logs));
    let grant = c
        .permissions
        .publish
        .iter()
        .find(|g| g.subject == subjects::ALL_HOST_LOGS)
        .unwrap();
    assert!(
        grant.cause.to_string().contains("mesh logs"),
        "{}",
        grant.cause
    );
    assert!(can_publish(find(&ps, "person_alice"), &logs), "tools = *");
    assert!(!can_publish(find(&ps, "person_bob"), &logs), "a tool list");
    for p in ps
        .iter()
        .filter(|p| matches!(p.kind, PrincipalKind::Module { .. }))
    {
        assert!(!can_publish(p, &logs), "{}", p.name);
        assert!(!can_subscribe(p, &logs), "{}", p.name);
    }
}

#[test]
fn no_stream_stores_a_log_request() {
    let o = jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap();
    for s in &o.streams {
        for subject in &s.subjects {
            assert!(
                !subjects::pattern::overlap(subject, subjects::ALL_HOST_LOGS),
                "{} captures {subject}",
                s.name
            );
        }
    }
}
