//! The RabbitMQ rendering allows exactly what the NATS grants allow: checked
//! key by key against [`covers`], the matcher the NATS side is tested with,
//! over every subject any principal is granted (made concrete, widened and
//! narrowed), with regexes compiled as RabbitMQ compiles them (anchored).

use std::collections::BTreeSet;

use regex::Regex;

use super::*;
use crate::authority::amqp::{
    self, AmqpPermissions, Rendered, binding_key, binding_key_regex, routing_key_regex,
};

fn objects() -> Objects {
    jetstream::derive(&catalogue(), &records(), &ControllerSpec::default()).unwrap()
}

fn rendered(name: &str) -> AmqpPermissions {
    let ps = principals();
    amqp::render(find(&ps, name), &objects())
}

fn matches(regex: &str, key: &str) -> bool {
    Regex::new(regex).unwrap().is_match(key)
}

/// Keys to try: every granted subject with its wildcards filled in (as a
/// routing key has none), with a token more and a token less.
fn candidate_keys() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in principals() {
        let grants = p.permissions.publish.iter().chain(&p.permissions.subscribe);
        for g in grants {
            for word in ["n1", "n2", "zz"] {
                let filled = g
                    .subject
                    .split('.')
                    .map(|t| match t {
                        "*" => word.to_string(),
                        ">" => format!("{word}.deeper"),
                        t => t.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(".");
                out.insert(format!("{filled}.more"));
                if let Some((shorter, _)) = filled.rsplit_once('.') {
                    out.insert(shorter.to_string());
                }
                out.insert(filled);
            }
        }
    }
    out.insert("_INBOX.person_bob.x".into());
    out.insert("anything".into());
    out
}

#[test]
fn a_subject_is_its_own_binding_key_with_gt_written_star_hash() {
    assert_eq!(binding_key("mesh.mod.*.event.>"), "mesh.mod.*.event.*.#");
    assert_eq!(
        binding_key("mesh.control.report.n1"),
        "mesh.control.report.n1"
    );
    // `>` is a wildcard only as a whole token.
    assert_eq!(binding_key("a.b>.c"), "a.b>.c");
}

#[test]
fn regexes_escape_every_character_that_is_not_a_name_character() {
    assert_eq!(
        routing_key_regex("mesh.mod.audit-log.event.*"),
        r"mesh\.mod\.audit-log\.event\.[^.]+"
    );
    assert_eq!(routing_key_regex("_INBOX.>"), r"_INBOX\.[^.]+(\.[^.]+)*");
    assert_eq!(routing_key_regex("$JS.a+b"), r"\$JS\.a\+b");
    assert_eq!(
        binding_key_regex("mesh.control.heartbeat.*"),
        r"mesh\.control\.heartbeat\.[^.#]+"
    );
    // A regex character in a token matches only itself.
    let re = format!("^{}$", routing_key_regex("a+b.c"));
    assert!(matches(&re, "a+b.c"));
    assert!(!matches(&re, "aab.c"));
    assert!(!matches(&re, "a+bxc"));
}

#[test]
fn every_principal_may_publish_on_amqp_exactly_what_it_may_on_nats() {
    let keys = candidate_keys();
    let o = objects();
    let mut checked = 0;
    for p in principals() {
        let r = amqp::render(&p, &o);
        for key in &keys {
            // Subjects of JetStream's API have no AMQP counterpart.
            if key.starts_with('$') {
                assert!(!matches(&r.topic_write, key), "{}: {key}", p.name);
                continue;
            }
            let nats = can_publish(&p, key);
            // An answer to a request is an inbox write on AMQP (see
            // `amqp::render`); on NATS, allow_responses.
            let answer = p.permissions.allow_responses.is_some()
                && key.starts_with("_INBOX.")
                && key.split('.').count() >= 3;
            assert_eq!(
                matches(&r.topic_write, key),
                nats || answer,
                "{} publishing {key}: topic write {}",
                p.name,
                r.topic_write
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn every_principal_may_bind_on_amqp_exactly_what_it_may_subscribe_to_on_nats() {
    let keys = candidate_keys();
    let o = objects();
    let deliver: BTreeSet<&str> = o
        .consumers
        .iter()
        .map(|c| c.deliver_subject.as_str())
        .collect();
    let bound: BTreeSet<String> = amqp::topology(&o)
        .into_iter()
        .flat_map(|q| q.bindings)
        .collect();
    for p in principals() {
        let r = amqp::render(&p, &o);
        let controller = p.name == CONTROLLER;
        for key in &keys {
            // The controller binds the mesh's queues by their keys; every
            // node's declaration queue by one shape (any node's own name,
            // never a wildcard: a thousand literal keys make a regex
            // RabbitMQ refuses), which it publishes to anyway.
            let node_key = key.starts_with("mesh.node.")
                && key.ends_with(".declaration")
                && key.split('.').count() == 4
                && !key.contains('*')
                && !key.contains('#');
            if controller && (bound.contains(key) || node_key) {
                assert!(matches(&r.topic_read, key), "{key}");
                continue;
            }
            if controller && key.starts_with("mesh.node.") && key.ends_with(".declaration") {
                assert!(!matches(&r.topic_read, key), "a wildcard binding: {key}");
                continue;
            }
            // A consumer's deliveries are its queue's, never a binding.
            let core = p
                .permissions
                .subscribe
                .iter()
                .any(|g| !deliver.contains(g.subject.as_str()) && covers(&g.subject, key));
            assert_eq!(
                matches(&r.topic_read, key),
                core,
                "{} binding {key}: topic read {}",
                p.name,
                r.topic_read
            );
        }
        // Each grant itself (its wildcards kept) may be bound.
        for g in p.permissions.subscribe.iter() {
            if !deliver.contains(g.subject.as_str()) {
                assert!(
                    matches(&r.topic_read, &binding_key(&g.subject)),
                    "{}: {}",
                    p.name,
                    g.subject
                );
            }
        }
    }
}

#[test]
fn the_controller_binds_each_queue_by_exactly_its_keys() {
    let c = rendered("controller");
    for q in amqp::topology(&objects()) {
        for key in &q.bindings {
            assert!(matches(&c.topic_read, key), "{}: {key}", q.name);
        }
    }
    // Exactly: not the wildcard a key is written with, read as a wildcard.
    assert!(matches(&c.topic_read, "mesh.control.report.*"));
    assert!(!matches(&c.topic_read, "mesh.control.report.n1"));
    assert!(!matches(&c.topic_read, "mesh.control.#"));
    assert!(matches(&c.topic_read, "mesh.node.n1.declaration"));
    assert!(!matches(&c.topic_read, "mesh.node.*.declaration"));
}

#[test]
fn a_hash_may_not_widen_a_binding_beyond_its_grant() {
    let host = rendered("host_n1");
    let controller = rendered("controller");
    for (r, key, allowed) in [
        // `*` is one word; `#` would be any number.
        (&controller, "mesh.control.heartbeat.*", true),
        (&controller, "mesh.control.heartbeat.#", false),
        (&controller, "mesh.control.#", false),
        (&controller, "#", false),
        // Under `>`, `#` may follow a word, never stand for the first.
        (&host, "_INBOX.host_n1.#", false),
        (&host, "_INBOX.host_n1.*", true),
        (&host, "_INBOX.host_n1.x.#", true),
        (&host, "_INBOX.host_n2.x", false),
        (&host, "_INBOX.*.x", false),
    ] {
        assert_eq!(matches(&r.topic_read, key), allowed, "{}: {key}", r.user);
    }
}

#[test]
fn a_host_configures_only_its_own_queues_and_reads_its_own_declarations() {
    let r = rendered("host_n1");
    assert_eq!(r.configure, r"^(amq\.gen-.+)$");
    assert_eq!(r.write, r"^(amq\.gen-.+|mesh)$");
    assert_eq!(r.read, r"^(amq\.gen-.+|mesh|mesh\.queue\.n1)$");
    for (re, name, allowed) in [
        (&r.read, "mesh.queue.n1", true),
        (&r.read, "mesh.queue.n2", false),
        (&r.read, "mesh.queue.n10", false),
        (&r.read, "mesh.queue.controller_control", false),
        (&r.configure, "mesh.queue.n1", false),
        (&r.configure, "mesh", false),
        (&r.write, "amq.default", false),
        (&r.write, "amq.topic", false),
        (&r.read, "amq.gen-AbC", true),
    ] {
        assert_eq!(matches(re, name), allowed, "{re} on {name}");
    }
    assert!(r.renderings.iter().any(|x| x.subject == "mesh.deliver.n1"
        && x.rendered
            == Rendered::ReadQueue {
                queue: "mesh.queue.n1".into()
            }));
    // Acknowledging and binding are the channel's on AMQP.
    let ack = r
        .renderings
        .iter()
        .find(|x| x.subject.starts_with("$JS.ACK.NODES.n1"))
        .unwrap();
    assert!(matches!(ack.rendered, Rendered::NatsOnly { .. }));
}

#[test]
fn only_the_controller_configures_the_mesh_objects_and_none_writes_the_default_exchange() {
    let c = rendered("controller");
    assert_eq!(c.configure, r"^(amq\.gen-.+|mesh(\..+)?)$");
    assert_eq!(c.write, c.configure);
    assert_eq!(c.read, c.configure);
    for name in ["mesh", "mesh.queue.n1", "amq.gen-x"] {
        assert!(matches(&c.configure, name), "{name}");
    }
    for name in ["amq.default", "amq.topic", "meshy", "other"] {
        assert!(!matches(&c.write, name), "{name}");
    }
    for p in principals() {
        let r = amqp::render(&p, &objects());
        for re in [&r.configure, &r.write, &r.read] {
            assert!(!matches(re, "amq.default"), "{}: {re}", p.name);
            assert!(!matches(re, ""), "{}: {re}", p.name);
        }
        if p.name != "controller" {
            for name in ["mesh", "mesh.queue.n1", "mesh.queue.controller_control"] {
                assert!(!matches(&r.configure, name), "{} configures {name}", p.name);
            }
        }
    }
}

#[test]
fn a_principal_granted_nothing_gets_regexes_that_match_nothing() {
    let mut p = find(&principals(), "person_bob").clone();
    p.permissions.publish.clear();
    p.permissions.subscribe.clear();
    p.permissions.allow_responses = None;
    let r = amqp::render(&p, &objects());
    // An absent topic permission would allow every key: `^$` is set instead.
    for re in [
        &r.configure,
        &r.write,
        &r.read,
        &r.topic_write,
        &r.topic_read,
    ] {
        assert_eq!(re, "^$");
    }
}

#[test]
fn a_module_reads_its_consumers_queue_and_answers_through_inboxes() {
    let r = rendered("module_n1_notifier");
    assert!(matches(&r.read, "mesh.queue.mod_notifier"), "{}", r.read);
    assert!(!matches(&r.read, "mesh.queue.mod_git-server"));
    // It serves no tool: no inbox but its own.
    assert!(!matches(&r.topic_write, "_INBOX.person_bob.x"));
    let server = rendered("module_n1_git-server");
    assert!(matches(&server.topic_write, "_INBOX.person_bob.x"));
    assert!(!matches(&server.topic_write, "_INBOX"));
    assert!(
        server
            .renderings
            .iter()
            .any(|x| x.grant == "allow_responses")
    );
}

#[test]
fn queues_follow_the_consumers_filters_and_keep_one_declaration() {
    let q = amqp::topology(&objects());
    let find = |name: &str| q.iter().find(|x| x.name == name).unwrap();
    let n1 = find("mesh.queue.n1");
    assert_eq!(n1.bindings, ["mesh.node.n1.declaration"]);
    assert_eq!(n1.max_length, Some(1));
    let control = find("mesh.queue.controller_control");
    assert_eq!(
        control.bindings,
        ["mesh.control.report.*", "mesh.control.enrol.*"]
    );
    assert_eq!(control.max_length, None);
    let notifier = find("mesh.queue.mod_notifier");
    assert!(
        notifier
            .bindings
            .contains(&"mesh.mod.git-server.event.*".to_string())
    );
    assert_eq!(notifier.max_length, None);
    assert_eq!(q.len(), objects().consumers.len());
    let upload = Objects {
        streams: vec![jetstream::StreamSpec {
            name: "UPLOADS".into(),
            subjects: vec!["mesh.upload.>".into()],
            retention: jetstream::Retention::Limits,
            max_msgs_per_subject: Some(1),
            max_age_secs: Some(60),
            replicas: 1,
        }],
        consumers: vec![jetstream::ConsumerSpec {
            stream: "UPLOADS".into(),
            name: "up".into(),
            deliver_subject: "mesh.deliver.up".into(),
            deliver_group: None,
            filter_subjects: vec![],
            ack_wait_secs: 1,
            max_deliver: None,
        }],
    };
    let up = &amqp::topology(&upload)[0];
    assert_eq!(up.bindings, ["mesh.upload.*.#"]);
    // One message per subject cannot be one message per queue of many subjects.
    assert_eq!(up.max_length, None);
    assert_eq!(up.max_age_secs, Some(60));
}

#[test]
fn a_password_hash_is_rabbitmqs_salted_sha256() {
    // The same bytes RabbitMQ's rabbit_password_hashing_sha256 makes for
    // this salt (and the live tests log in with hashes made here).
    assert_eq!(
        amqp::password_hash([1, 2, 3, 4], b"hunter2"),
        "AQIDBHiV8TIeEo9W0LCE9gcH2fR40TPrs4nTzGL5Pu7u6eDF"
    );
    assert_ne!(
        amqp::password_hash([1, 2, 3, 5], b"hunter2"),
        amqp::password_hash([1, 2, 3, 4], b"hunter2")
    );
}

#[test]
fn a_password_is_the_seeds_mac_and_not_the_seed() {
    let seed = "SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM";
    let p = amqp::password_of(seed);
    // Pinned: a host and the controller must make the same password from
    // the same seed in every release.
    assert_eq!(
        p,
        amqp::password_of(&format!("{seed}\n")),
        "the file's newline is not part of it"
    );
    assert_eq!(p.len(), 43, "{p}");
    assert!(!p.contains(&seed[..8]), "{p}");
    assert_ne!(
        p,
        amqp::password_of("SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPN")
    );
    assert_eq!(p, PINNED_PASSWORD);
}

// Computed apart: python3 hmac.new(seed, b"mesh amqp password v1", sha256), URL-safe base64.
const PINNED_PASSWORD: &str = "WqzTo397JMWCBA1IY-Ha8GZzWlhLbcnleJ9xceCiSvA";

#[test]
fn each_principal_is_wanted_with_the_hash_of_its_recorded_key_or_named_left_out() {
    use crate::authority::amqp_users::wanted;
    use std::collections::BTreeMap;
    let ps = principals();
    let objects = objects();
    let names: Vec<&str> = ps.iter().map(|p| p.name.as_str()).collect();
    let (with_hash, no_hash) = (names[0], names[1]);
    // names[2] and on have no key recorded.
    let credentials = BTreeMap::from([
        (with_hash.to_string(), "UKEY1".to_string()),
        (no_hash.to_string(), "UKEY2".to_string()),
    ]);
    let hashes = BTreeMap::from([
        ("UKEY1".to_string(), "HASH1".to_string()),
        // A hash of a key nobody holds is no user.
        ("UKEY9".to_string(), "HASH9".to_string()),
    ]);
    let (w, left) = wanted(&ps, &credentials, &hashes, &objects);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].0, amqp::render(&ps[0], &objects));
    assert_eq!(w[0].1, "HASH1");
    let expected: Vec<String> = names[1..].iter().map(|n| n.to_string()).collect();
    assert_eq!(left, expected);
}

#[test]
fn an_announced_hash_is_stable_for_a_seed_and_rabbitmqs_shape() {
    let seed = "SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM";
    let h = amqp::announced_hash(seed);
    assert_eq!(h, amqp::announced_hash(seed), "the same every time");
    assert!(amqp::is_password_hash(&h), "{h}");
    // Its salt is its first four bytes; the rest is sha256(salt ++ password).
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&h)
        .unwrap();
    let salt: [u8; 4] = raw[..4].try_into().unwrap();
    assert_eq!(
        h,
        amqp::password_hash(salt, amqp::password_of(seed).as_bytes())
    );
    assert_ne!(
        h,
        amqp::announced_hash("SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPN")
    );
    for not in [
        "",
        "short",
        &h[..47],
        &format!("{h}A"),
        &h.replace(&h[..4], "!!!!"),
    ] {
        assert!(!amqp::is_password_hash(not), "{not}");
    }
    // 36 bytes, and only 36: 48 base64 characters of 35 or 37 are not one.
    let e = base64::engine::general_purpose::STANDARD;
    assert!(!amqp::is_password_hash(&e.encode([0u8; 35])));
    assert!(amqp::is_password_hash(&e.encode([0u8; 36])));
}

#[test]
fn announced_hashes_are_for_the_messages_own_keys_each_a_hash() {
    use std::collections::BTreeMap;
    let h = amqp::announced_hash("SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM");
    let ok = BTreeMap::from([("UA".to_string(), h.clone())]);
    assert_eq!(amqp::check_announced(&ok, &["UA", "UB"]), Ok(()));
    assert_eq!(amqp::check_announced(&BTreeMap::new(), &[]), Ok(()));
    let other = BTreeMap::from([("UC".to_string(), h)]);
    assert!(
        amqp::check_announced(&other, &["UA"])
            .unwrap_err()
            .contains("does not announce")
    );
    let bad = BTreeMap::from([("UA".to_string(), "x".to_string())]);
    assert!(
        amqp::check_announced(&bad, &["UA"])
            .unwrap_err()
            .contains("not base64")
    );
}

#[test]
fn the_controller_binds_every_nodes_queue_by_one_shape_said_once() {
    let r = rendered(CONTROLLER);
    let node_binds: Vec<_> = r
        .renderings
        .iter()
        .filter(|g| g.grant == "binds" && g.subject.starts_with("mesh.node.*.declaration"))
        .collect();
    assert_eq!(node_binds.len(), 1, "{node_binds:?}");
    assert!(matches(&r.topic_read, "mesh.node.n1.declaration"));
    assert!(matches(&r.topic_read, "mesh.node.any-node.declaration"));
    assert!(!matches(&r.topic_read, "mesh.node.*.declaration"));
    assert!(!matches(&r.topic_read, "mesh.node.#.declaration"));
    assert!(!matches(&r.topic_read, "mesh.node.n1.n2.declaration"));
}

#[test]
fn a_single_nodes_queue_is_bound_by_the_shape_too() {
    let mut o = objects();
    o.consumers.retain(|c| {
        !c.filter_subjects
            .iter()
            .any(|f| f == "mesh.node.n2.declaration")
    });
    let ps = principals();
    let r = amqp::render(find(&ps, CONTROLLER), &o);
    assert!(
        matches(&r.topic_read, "mesh.node.n1.declaration"),
        "{}",
        r.topic_read
    );
}

#[test]
fn a_key_fits_a_shape_only_as_a_literal_word_in_the_wildcards_place() {
    let shape = "mesh.node.*.declaration";
    assert!(amqp::fits(shape, "mesh.node.n1.declaration"));
    for not in [
        "mesh.node.*.declaration",
        "mesh.node.#.declaration",
        "mesh.node..declaration",
        "mesh.node.n1.n2.declaration",
        "mesh.node.n1.report",
        "mesh.seat.n1.declaration",
    ] {
        assert!(!amqp::fits(shape, not), "{not}");
    }
}
