//! Genesis as data: names, URLs, the bus file; the configurations are
//! `broker_conf`'s.

use super::*;

#[test]
fn addresses_become_sans_once_each_after_the_local_ones() {
    let sans = subject_alt_names(&[
        "10.0.0.7".into(),
        "Ctl.Example".into(),
        "ctl.example".into(),
        "localhost".into(),
        "::1".into(),
    ])
    .unwrap();
    assert_eq!(
        sans,
        vec![
            SanType::IpAddress([127, 0, 0, 1].into()),
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress([10, 0, 0, 7].into()),
            SanType::DnsName("ctl.example".try_into().unwrap()),
            SanType::IpAddress("::1".parse().unwrap()),
        ]
    );
}

fn g(addresses: &[&str]) -> Genesis {
    Genesis {
        dir: "/s".into(),
        controller_nkey: String::new(),
        signing_key: String::new(),
        xkey: String::new(),
        cert_sha256: String::new(),
        port: 4222,
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
        replicas: 1,
        bus: BusKind::Nats,
        amqp_ports: None,
    }
}

#[test]
fn a_token_names_the_given_addresses_or_loopback_alone() {
    assert_eq!(g(&[]).bus_urls(), ["tls://127.0.0.1:4222"]);
    assert_eq!(g(&["10.0.0.5"]).local_url(), "tls://127.0.0.1:4222");
    assert_eq!(
        g(&["10.0.0.5", "ctl.example", "::1"]).bus_urls(),
        [
            "tls://10.0.0.5:4222",
            "tls://ctl.example:4222",
            "tls://[::1]:4222"
        ]
    );
    assert_eq!(
        unique_addresses(&[
            "Ctl.Example".into(),
            "ctl.example".into(),
            "localhost".into(),
            "127.0.0.1".into()
        ]),
        ["ctl.example"]
    );
}

#[test]
fn an_address_that_is_no_host_is_refused_naming_it() {
    for (a, why) in [
        ("tls://10.0.0.1", "scheme"),
        ("10.0.0.1:4222", "port"),
        ("ctl.example:4222", "port"),
        ("", "1 to 253"),
        ("a..b", "label"),
        ("ctl example", "only letters"),
        ("-ctl.example", "start or end"),
        ("10.0.0.256", "IP address"),
    ] {
        let err = subject_alt_names(&[a.to_string()]).unwrap_err();
        assert!(matches!(err, GenesisError::BadAddress { .. }), "{a}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("{a:?}")) && msg.contains(why),
            "{a}: {msg}"
        );
    }
}

#[test]
fn a_cluster_names_every_server_and_a_single_server_what_it_always_did() {
    let one = g(&["10.0.0.5"]);
    assert_eq!(one.local_urls(), ["tls://127.0.0.1:4222"]);
    assert_eq!(one.broker_configs(), [PathBuf::from("/s/broker/nats.conf")]);
    assert_eq!(
        one.broker_pid_files(),
        [PathBuf::from("/s/broker/nats.pid")]
    );

    let here = Genesis {
        replicas: 3,
        ..g(&[])
    };
    let loopback = [
        "tls://127.0.0.1:4222",
        "tls://127.0.0.1:4223",
        "tls://127.0.0.1:4224",
    ];
    assert_eq!(here.bus_urls(), loopback);
    assert_eq!(here.local_urls(), loopback);
    assert_eq!(here.local_url(), loopback[0]);
    assert_eq!(
        here.broker_configs(),
        [
            "/s/broker/nats-1.conf",
            "/s/broker/nats-2.conf",
            "/s/broker/nats-3.conf"
        ]
        .map(PathBuf::from)
    );
    assert_eq!(
        here.broker_pid_files(),
        [
            "/s/broker/nats-1.pid",
            "/s/broker/nats-2.pid",
            "/s/broker/nats-3.pid"
        ]
        .map(PathBuf::from)
    );

    let spread = Genesis {
        replicas: 3,
        ..g(&["10.0.0.1", "b.example", "fd00::3"])
    };
    let remote = [
        "tls://10.0.0.1:4222",
        "tls://b.example:4222",
        "tls://[fd00::3]:4222",
    ];
    assert_eq!(spread.bus_urls(), remote);
    assert_eq!(spread.local_urls(), remote);
}

#[test]
fn a_bus_file_of_a_single_server_is_written_and_read_as_before_clusters() {
    let old = "{\n  \"port\": 4222,\n  \"addresses\": []\n}";
    let bus: BusFile = serde_json::from_str(old).unwrap();
    assert_eq!(bus.replicas, 1);
    assert_eq!(serde_json::to_string_pretty(&bus).unwrap(), old);
    let three = BusFile { replicas: 3, ..bus };
    let text = serde_json::to_string(&three).unwrap();
    assert_eq!(text, r#"{"port":4222,"addresses":[],"replicas":3}"#);
    assert_eq!(serde_json::from_str::<BusFile>(&text).unwrap().replicas, 3);
}

#[test]
fn a_cluster_is_not_moved() {
    let err = Genesis {
        replicas: 3,
        ..g(&[])
    }
    .move_broker(4333, None)
    .unwrap_err();
    assert!(
        matches!(err, GenesisError::ClusterMove { replicas: 3 }),
        "{err}"
    );
    assert!(err.to_string().contains("not supported yet"), "{err}");
}

#[test]
fn a_mesh_on_rabbitmq_is_reached_at_amqps_addresses() {
    let mut on_amqp = g(&["10.0.0.5", "::1"]);
    on_amqp.bus = BusKind::Amqp;
    on_amqp.port = 5671;
    assert_eq!(on_amqp.local_url(), "amqps://127.0.0.1:5671");
    assert_eq!(
        on_amqp.bus_urls(),
        ["amqps://10.0.0.5:5671", "amqps://[::1]:5671"]
    );
    assert_eq!(on_amqp.local_urls(), ["amqps://127.0.0.1:5671"]);
}

#[test]
fn rabbitmqs_ports_follow_its_amqp_port_and_meet_nothing() {
    let p = AmqpPorts::after(5671).unwrap();
    assert_eq!((p.management, p.dist, p.epmd), (15671, 25671, 35671));
    p.check(5671).unwrap();
    let e = AmqpPorts::after(35536).unwrap_err().to_string();
    assert!(e.contains("35535 or less"), "{e}");
    assert!(AmqpPorts::after(35535).is_ok());
    let same = AmqpPorts {
        management: 5671,
        ..p
    };
    let e = same.check(5671).unwrap_err().to_string();
    assert!(e.contains("four different ones"), "{e}");
    let zero = AmqpPorts { epmd: 0, ..p };
    assert!(zero.check(5671).is_err());
    let twice = AmqpPorts { dist: p.epmd, ..p };
    assert!(twice.check(5671).is_err());
}

#[test]
fn a_genesis_on_rabbitmq_writes_its_broker_and_records_the_bus() {
    let dir = tempfile::tempdir().unwrap();
    let opts = GenesisOptions {
        port: 5671,
        bus: BusKind::Amqp,
        ..GenesisOptions::default()
    };
    let made = Genesis::create_with(dir.path(), &[], &opts).unwrap();
    assert_eq!(made.bus, BusKind::Amqp);
    assert_eq!(made.amqp_ports, Some(AmqpPorts::after(5671).unwrap()));
    assert_eq!(Genesis::open(dir.path()).unwrap(), made);
    let conf = std::fs::read_to_string(made.path(RABBITMQ_CONF)).unwrap();
    assert!(conf.contains("listeners.tcp = none"), "{conf}");
    assert!(
        conf.contains("listeners.ssl.default = 127.0.0.1:5671"),
        "{conf}"
    );
    assert!(conf.contains("management.ssl.ip = 127.0.0.1"), "{conf}");
    assert!(!made.path(BROKER_CONF).exists(), "no NATS configuration");
    let defs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(made.path(RABBITMQ_DEFINITIONS)).unwrap())
            .unwrap();
    let seed = std::fs::read_to_string(made.path(NKEY_SEED)).unwrap();
    let user = &defs["users"][0];
    assert_eq!(user["name"], "controller");
    assert_eq!(user["tags"][0], "administrator");
    // The hash is of the password the controller's seed makes, salted.
    use base64::Engine as _;
    let hash = base64::engine::general_purpose::STANDARD
        .decode(user["password_hash"].as_str().unwrap())
        .unwrap();
    let salt: [u8; 4] = hash[..4].try_into().unwrap();
    assert_eq!(
        user["password_hash"],
        mesh_core::authority::amqp::password_hash(
            salt,
            mesh_core::authority::amqp::password_of(&seed).as_bytes()
        )
    );
    assert_eq!(
        made.path(RABBITMQ_DEFINITIONS)
            .metadata()
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let bus: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(made.path(BUS_FILE)).unwrap()).unwrap();
    assert_eq!(bus["bus"], "amqp");
    let e = made.move_broker(5672, None).unwrap_err().to_string();
    assert!(e.contains("not supported yet"), "{e}");

    let again = Genesis::create_with(dir.path(), &[], &opts).unwrap_err();
    assert!(
        matches!(again, GenesisError::AlreadyExists { .. }),
        "{again}"
    );
}

#[test]
fn a_rabbitmq_broker_is_one_server() {
    let dir = tempfile::tempdir().unwrap();
    let opts = GenesisOptions {
        port: 5671,
        replicas: 3,
        bus: BusKind::Amqp,
        ..GenesisOptions::default()
    };
    let e = Genesis::create_with(dir.path(), &[], &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("one broker server"), "{e}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn a_nats_bus_file_stays_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let made = Genesis::create_with(dir.path(), &[], &GenesisOptions::default()).unwrap();
    let text = std::fs::read_to_string(made.path(BUS_FILE)).unwrap();
    assert!(!text.contains("bus"), "{text}");
    assert_eq!(made.bus, BusKind::Nats);
    assert!(made.rabbitmq_env().is_none());
}
