use super::*;

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn request(node: &str) -> EnrolRequest {
    EnrolRequest {
        node: n(node),
        enrolment_key: nkeys::KeyPair::new_user().public_key(),
        host_key: nkeys::KeyPair::new_user().public_key(),
        xkey: nkeys::XKey::new().public_key(),
        reply: format!("_INBOX.enrol.{node}.abc123"),
        spare_keys: Vec::new(),
        amqp_hashes: Default::default(),
    }
}

#[test]
fn a_request_round_trips_and_is_checked_against_its_subject() {
    let r = request("n1");
    assert_eq!(
        EnrolRequest::parse("mesh.control.enrol.n1", &r.to_json()).unwrap(),
        r
    );
    let e = EnrolRequest::parse("mesh.control.enrol.n2", &r.to_json()).unwrap_err();
    assert_eq!(
        e,
        BadMessage::OtherNode {
            subject: "n2".into(),
            payload: "n1".into()
        }
    );
    for s in [
        "mesh.control.report.n1",
        "mesh.control.enrol.N1",
        "x.enrol.n1",
    ] {
        assert!(
            matches!(
                EnrolRequest::parse(s, &r.to_json()),
                Err(BadMessage::Subject { .. })
            ),
            "{s}"
        );
    }
}

#[test]
fn a_bad_request_says_what_is_wrong_and_never_quotes_it() {
    let sub = "mesh.control.enrol.n1";
    let big = vec![b' '; MAX_REQUEST_BYTES + 1];
    assert!(matches!(
        EnrolRequest::parse(sub, &big),
        Err(BadMessage::TooLarge { .. })
    ));
    let e = EnrolRequest::parse(sub, b"{\"node\": \"SUSECRET").unwrap_err();
    assert!(matches!(e, BadMessage::Json { .. }), "{e}");
    assert!(!e.to_string().contains("SUSECRET"), "{e}");
    let mut extra = serde_json::to_value(request("n1")).unwrap();
    extra["seed"] = "SUAAA".into();
    let e = EnrolRequest::parse(sub, &serde_json::to_vec(&extra).unwrap()).unwrap_err();
    assert!(matches!(e, BadMessage::Json { .. }) && !e.to_string().contains("SUAAA"));

    let mut r = request("n1");
    r.host_key = nkeys::KeyPair::new_account().public_key();
    assert_eq!(
        EnrolRequest::parse(sub, &r.to_json()).unwrap_err(),
        BadMessage::Key {
            field: "host_key",
            kind: "user"
        }
    );
    let mut r = request("n1");
    r.enrolment_key = "Unot".into();
    assert!(matches!(
        EnrolRequest::parse(sub, &r.to_json()),
        Err(BadMessage::Key {
            field: "enrolment_key",
            ..
        })
    ));
    let mut r = request("n1");
    r.xkey = nkeys::KeyPair::new_user().public_key();
    assert!(matches!(
        EnrolRequest::parse(sub, &r.to_json()),
        Err(BadMessage::Key { field: "xkey", .. })
    ));
    // An answer sent anywhere but the node's own enrolment inbox would
    // let a token holder make the controller publish for it.
    for reply in [
        "_INBOX.enrol.n2.x",
        "_INBOX.enrol.n1",
        "_INBOX.enrol.n1.",
        "_INBOX.enrol.n1.*",
        "_INBOX.enrol.n1.>",
        "_INBOX.enrol.n1.a b",
        "_INBOX.enrol.n10.x",
        "mesh.node.n1.declaration",
    ] {
        let mut r = request("n1");
        r.reply = reply.into();
        assert!(
            matches!(
                EnrolRequest::parse(sub, &r.to_json()),
                Err(BadMessage::Reply { .. })
            ),
            "{reply}"
        );
    }
}

#[test]
fn the_plan_spends_before_anything_and_answers_before_the_reload() {
    let r = request("n1");
    let p = plan(&r);
    let kinds: Vec<&str> = p
        .steps
        .iter()
        .map(|s| match s {
            EnrolStep::SpendToken { .. } => "spend",
            EnrolStep::AssertConsumer { .. } => "consumer",
            EnrolStep::Compose => "compose",
            EnrolStep::AwaitLive => "live",
            EnrolStep::Answer { .. } => "answer",
        })
        .collect();
    assert_eq!(kinds, ["spend", "consumer", "answer", "compose", "live"]);
    let EnrolStep::SpendToken {
        node,
        enrolment_key,
        host_key,
        xkey,
        ..
    } = &p.steps[0]
    else {
        unreachable!()
    };
    assert_eq!(
        (node, enrolment_key, host_key, xkey),
        (&r.node, &r.enrolment_key, &r.host_key, &r.xkey)
    );
    let EnrolStep::AssertConsumer { consumer } = &p.steps[1] else {
        unreachable!()
    };
    assert_eq!(consumer.name, "n1");
    assert_eq!(consumer.stream, "NODES");
    assert_eq!(consumer.filter_subjects, ["mesh.node.n1.declaration"]);
    assert_eq!(p.to, AnswerTo::of(&r));
    assert_eq!(
        (p.to.reply.as_str(), p.to.host_key.as_str()),
        (r.reply.as_str(), r.host_key.as_str())
    );
    assert_eq!(p.refusal, EnrolAnswer::refused());
    let json = serde_json::to_string(&p.steps[2]).unwrap();
    assert!(json.contains("\"step\":\"answer\""), "{json}");
    let EnrolStep::Answer { to, answer } = &p.steps[2] else {
        unreachable!()
    };
    assert_eq!((to, answer), (&p.to, &EnrolAnswer::enrolled(&r.node)));
}

#[test]
fn answers_round_trip_and_a_refusal_is_one_message() {
    let ok = EnrolAnswer::enrolled(&n("n1"));
    assert_eq!(EnrolAnswer::parse(&ok.to_json()), Some(ok.clone()));
    let EnrolAnswer::Enrolled {
        principal,
        inbox_prefix,
        consumer,
        ..
    } = ok
    else {
        unreachable!()
    };
    assert_eq!(
        (principal.as_str(), inbox_prefix.as_str(), consumer.as_str()),
        ("host_n1", "_INBOX.host_n1", "n1")
    );
    let no = EnrolAnswer::refused();
    assert_eq!(EnrolAnswer::parse(&no.to_json()), Some(no));
    assert_eq!(EnrolAnswer::parse(b"{\"enrolled\": true}"), None);
    assert_eq!(
        EnrolAnswer::parse(b"{\"enrolled\": true, \"message\": \"x\"}"),
        None
    );
}

#[test]
fn a_signed_answer_verifies_only_with_the_controller_key_and_for_its_request() {
    let key = SigningKey::from_bytes(&[9; 32]);
    let other = SigningKey::from_bytes(&[10; 32]);
    let r = request("n1");
    let to = AnswerTo::of(&r);
    for a in [EnrolAnswer::enrolled(&n("n1")), EnrolAnswer::refused()] {
        let wire = a.sign(&to, &key);
        assert_eq!(
            EnrolAnswer::verify(&wire, &key.verifying_key(), &to),
            Ok(a.clone())
        );
        assert_eq!(
            EnrolAnswer::verify(&wire, &other.verifying_key(), &to),
            Err(AnswerError::NotSigned)
        );
        for to in [
            AnswerTo {
                reply: format!("{}x", to.reply),
                ..to.clone()
            },
            AnswerTo {
                host_key: request("n1").host_key,
                ..to.clone()
            },
        ] {
            assert_eq!(
                EnrolAnswer::verify(&wire, &key.verifying_key(), &to),
                Err(AnswerError::OtherRequest)
            );
        }
    }
    // The unsigned answer of old, garbage, a bad signature, too large.
    let vk = key.verifying_key();
    let ok = EnrolAnswer::enrolled(&n("n1"));
    assert_eq!(
        EnrolAnswer::verify(&ok.to_json(), &vk, &to),
        Err(AnswerError::NotAnAnswer)
    );
    let env = |answer: &str, signature: &str| {
        serde_json::json!({"answer": answer, "signature": signature})
            .to_string()
            .into_bytes()
    };
    let body = STANDARD.encode(b"{}");
    assert_eq!(
        EnrolAnswer::verify(&env("%", "AA"), &vk, &to),
        Err(AnswerError::NotAnAnswer)
    );
    assert_eq!(
        EnrolAnswer::verify(&env(&body, "%"), &vk, &to),
        Err(AnswerError::NotSigned)
    );
    assert_eq!(
        EnrolAnswer::verify(&env(&body, "AAAA"), &vk, &to),
        Err(AnswerError::NotSigned)
    );
    // Signed garbage is still not an answer.
    let sig = STANDARD.encode(key.sign(b"{}").to_bytes());
    assert_eq!(
        EnrolAnswer::verify(&env(&body, &sig), &vk, &to),
        Err(AnswerError::NotAnAnswer)
    );
    let wire = ok.sign(&to, &key);
    assert_eq!(
        EnrolAnswer::verify(&padded(wire.clone(), MAX_REQUEST_BYTES), &vk, &to),
        Ok(ok.clone())
    );
    assert_eq!(
        EnrolAnswer::verify(&padded(wire, MAX_REQUEST_BYTES + 1), &vk, &to),
        Err(AnswerError::NotAnAnswer)
    );
}

/// `json` padded with trailing spaces (still valid JSON) to `len` bytes.
fn padded(json: Vec<u8>, len: usize) -> Vec<u8> {
    let mut v = json;
    v.resize(len, b' ');
    v
}

#[test]
fn size_bounds_hold_at_the_byte() {
    let ok = EnrolAnswer::refused();
    assert_eq!(
        EnrolAnswer::parse(&padded(ok.to_json(), MAX_REQUEST_BYTES)),
        Some(ok.clone())
    );
    assert_eq!(
        EnrolAnswer::parse(&padded(ok.to_json(), MAX_REQUEST_BYTES + 1)),
        None
    );
    assert_eq!(
        EnrolAnswer::parse(&padded(ok.to_json(), MAX_REQUEST_BYTES + 2)),
        None
    );

    let r = request("n1");
    let sub = "mesh.control.enrol.n1";
    assert_eq!(
        EnrolRequest::parse(sub, &padded(r.to_json(), MAX_REQUEST_BYTES)).unwrap(),
        r
    );
    for len in [MAX_REQUEST_BYTES + 1, MAX_REQUEST_BYTES + 2] {
        assert!(matches!(
            EnrolRequest::parse(sub, &padded(r.to_json(), len)),
            Err(BadMessage::TooLarge { .. })
        ));
    }

    let hb = Heartbeat {
        node: n("n1"),
        sent_at: 1,
    };
    let sub = "mesh.control.heartbeat.n1";
    assert_eq!(
        Heartbeat::parse(sub, &padded(hb.to_json(), MAX_HEARTBEAT_BYTES)).unwrap(),
        hb
    );
    for len in [MAX_HEARTBEAT_BYTES + 1, MAX_HEARTBEAT_BYTES + 2] {
        assert!(matches!(
            Heartbeat::parse(sub, &padded(hb.to_json(), len)),
            Err(BadMessage::TooLarge { .. })
        ));
    }
}

#[test]
fn a_heartbeat_names_its_own_node() {
    let hb = Heartbeat {
        node: n("n1"),
        sent_at: 5,
    };
    assert_eq!(
        Heartbeat::parse("mesh.control.heartbeat.n1", &hb.to_json()).unwrap(),
        hb
    );
    assert!(matches!(
        Heartbeat::parse("mesh.control.heartbeat.n2", &hb.to_json()),
        Err(BadMessage::OtherNode { .. })
    ));
    assert!(matches!(
        Heartbeat::parse("mesh.control.heartbeat.n1", b"nope"),
        Err(BadMessage::Json { .. })
    ));
}

#[test]
fn a_request_announces_hashes_of_its_own_keys_only() {
    let seed = nkeys::KeyPair::new_user().seed().unwrap();
    let hash = crate::authority::amqp::announced_hash(&seed);
    let mut r = request("n1");
    let spare = nkeys::KeyPair::new_user().public_key();
    r.spare_keys = vec![spare.clone()];
    r.amqp_hashes = [(r.host_key.clone(), hash.clone()), (spare, hash.clone())].into();
    assert_eq!(
        EnrolRequest::parse("mesh.control.enrol.n1", &r.to_json()).unwrap(),
        r
    );
    let refused =
        |r: &EnrolRequest| EnrolRequest::parse("mesh.control.enrol.n1", &r.to_json()).unwrap_err();
    let mut other = request("n1");
    // The enrolment key is no key of the host's.
    other.amqp_hashes = [(other.enrolment_key.clone(), hash)].into();
    assert!(
        matches!(
            refused(&other),
            BadMessage::Key {
                field: "amqp_hashes",
                ..
            }
        ),
        "{:?}",
        refused(&other)
    );
    let mut bad = request("n1");
    bad.amqp_hashes = [(bad.host_key.clone(), "not-a-hash".to_string())].into();
    assert!(matches!(
        refused(&bad),
        BadMessage::Key {
            field: "amqp_hashes",
            ..
        }
    ));
}

#[test]
fn spare_keys_are_distinct_user_keys_and_never_the_hosts_own() {
    let refused = |r: &EnrolRequest| EnrolRequest::parse("mesh.control.enrol.n1", &r.to_json());
    let mut own = request("n1");
    own.spare_keys = vec![own.host_key.clone()];
    assert!(matches!(
        refused(&own),
        Err(BadMessage::Key {
            field: "spare_keys",
            ..
        })
    ));
    let mut twice = request("n1");
    let k = nkeys::KeyPair::new_user().public_key();
    twice.spare_keys = vec![k.clone(), k];
    assert!(matches!(
        refused(&twice),
        Err(BadMessage::Key {
            field: "spare_keys",
            ..
        })
    ));
    let mut fine = request("n1");
    fine.spare_keys = vec![nkeys::KeyPair::new_user().public_key()];
    assert!(refused(&fine).is_ok());
}
