use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;

use super::*;
use crate::env::read_seed;
use mesh_bus::CertPin;

const PIN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn vars() -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        (
            ENV_BUS_URLS,
            "tls://127.0.0.1:4222, tls://10.0.0.2:4222".into(),
        ),
        (ENV_BUS_PIN, PIN.into()),
        (ENV_NKEY_FILE, "/state/modules/echo.nk".into()),
        (ENV_INBOX_PREFIX, "_INBOX.module_n1_echo".into()),
        (ENV_NODE, "n1".into()),
        (ENV_MODULE, "echo".into()),
    ])
}

fn parse(vars: &BTreeMap<&'static str, String>) -> Result<ModuleEnv, SdkError> {
    ModuleEnv::from_lookup(|v| vars.get(v).cloned())
}

#[test]
fn a_complete_environment_parses() {
    let env = parse(&vars()).unwrap();
    assert_eq!(
        env.bus_urls,
        ["tls://127.0.0.1:4222", "tls://10.0.0.2:4222"]
    );
    assert_eq!(env.pin, CertPin::from_hex(PIN).unwrap());
    assert_eq!(env.node.as_str(), "n1");
    assert_eq!(env.module.as_str(), "echo");
    assert_eq!(env.principal(), "module_n1_echo");
    assert_eq!(env.ack_timeout, DEFAULT_ACK_TIMEOUT);
    // No ready file given: the host checks none.
    assert_eq!(env.ready_file, None);
    let mut v = vars();
    v.insert(ENV_READY_FILE, "/state/work/echo/.mesh-ready".into());
    assert_eq!(
        parse(&v).unwrap().ready_file,
        Some(std::path::PathBuf::from("/state/work/echo/.mesh-ready"))
    );
}

#[test]
fn amqps_addresses_parse() {
    let mut v = vars();
    v.insert(ENV_BUS_URLS, "amqps://127.0.0.1:5671".into());
    assert_eq!(parse(&v).unwrap().bus_urls, ["amqps://127.0.0.1:5671"]);
}

#[test]
fn every_missing_or_empty_variable_is_named_with_what_to_set() {
    for var in [
        ENV_BUS_URLS,
        ENV_BUS_PIN,
        ENV_NKEY_FILE,
        ENV_INBOX_PREFIX,
        ENV_NODE,
        ENV_MODULE,
    ] {
        for value in [None, Some(""), Some("  ")] {
            let mut v = vars();
            match value {
                None => v.remove(var),
                Some(s) => v.insert(var, s.into()),
            };
            let err = parse(&v).unwrap_err();
            assert!(
                matches!(err, SdkError::Missing { var: named, .. } if named == var),
                "{var}: {err}"
            );
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("{var} is not set; set it to")),
                "{text}"
            );
        }
    }
}

#[test]
fn invalid_values_are_refused_naming_the_variable() {
    let cases: &[(&str, &str, &str)] = &[
        (
            ENV_BUS_URLS,
            "nats://127.0.0.1:4222",
            "not a tls:// or amqps:// address",
        ),
        (
            ENV_BUS_URLS,
            "tls://a:1,127.0.0.1:4222",
            "not a tls:// or amqps:// address",
        ),
        (
            ENV_BUS_URLS,
            "amqp://127.0.0.1:5672",
            "not a tls:// or amqps:// address",
        ),
        (
            ENV_BUS_URLS,
            "tls://a:4222,amqps://b:5671",
            "names both buses",
        ),
        (ENV_BUS_URLS, " , ,", "names no address"),
        (ENV_BUS_PIN, "abc", "not 64 lowercase hex"),
        (ENV_BUS_PIN, &PIN.to_uppercase(), "not 64 lowercase hex"),
        (ENV_NODE, "N1", "\"N1\""),
        (ENV_MODULE, "echo.x", "echo.x"),
        (
            ENV_INBOX_PREFIX,
            "_INBOX.module_n2_echo",
            "_INBOX.module_n1_echo",
        ),
        (ENV_INBOX_PREFIX, "_INBOX", "receives only under"),
    ];
    for (var, value, says) in cases {
        let mut v = vars();
        v.insert(var, value.to_string());
        let err = parse(&v).unwrap_err();
        assert!(
            matches!(err, SdkError::Invalid { var: named, .. } if named == *var),
            "{var}={value}: {err}"
        );
        let text = err.to_string();
        assert!(text.starts_with(&format!("{var} is invalid")), "{text}");
        assert!(text.contains(says), "{var}={value}: {text}");
        assert!(text.contains("; set it to"), "{text}");
    }
}

#[test]
fn credentials_in_an_address_are_refused_and_not_echoed() {
    let mut v = vars();
    v.insert(ENV_BUS_URLS, "tls://u:hunter2@127.0.0.1:4222".into());
    let err = parse(&v).unwrap_err();
    assert!(matches!(
        err,
        SdkError::Invalid {
            var: ENV_BUS_URLS,
            ..
        }
    ));
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn the_seed_file_must_be_private_and_hold_a_user_seed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed");
    let seed = nkeys::KeyPair::new_user().seed().unwrap();

    std::fs::write(&path, format!("{seed}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read_seed(&path).unwrap().expose(), seed);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = read_seed(&path).unwrap_err();
    assert!(
        matches!(err, SdkError::SeedMode { mode: 0o644, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("0600"), "{err}");
    assert!(!err.to_string().contains(&seed[2..]), "{err}");

    let account = nkeys::KeyPair::new_account().seed().unwrap();
    for wrong in [account.as_str(), "not a seed"] {
        std::fs::write(&path, wrong).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = read_seed(&path).unwrap_err();
        assert!(matches!(err, SdkError::BadSeed { .. }), "{err}");
        assert!(!err.to_string().contains(wrong), "{err}");
    }

    let err = read_seed(&dir.path().join("absent")).unwrap_err();
    assert!(matches!(err, SdkError::ReadSeed { .. }), "{err}");
    assert!(err.to_string().contains("MESH_NKEY_FILE"), "{err}");
}
