//! The users file composed from derived principals: deterministic, only
//! users and their permissions, machines by NKey and persons by password,
//! and refused when it would admit nobody or not its own writer.

use std::collections::BTreeMap;

use super::*;

/// A credential per principal: an NKey for machines, a bcrypt hash for
/// persons (who may use a password; machines never do).
pub(super) fn hashes(ps: &[Principal]) -> BTreeMap<String, UserCredential> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| {
            let c = if matches!(p.kind, PrincipalKind::Person { .. }) {
                UserCredential::Password(format!("$2b$11$hash{i:0>49}"))
            } else {
                UserCredential::NKey(nkey(i as u8))
            };
            (p.name.clone(), c)
        })
        .collect()
}

/// A valid NKey user public key, different for each `i`.
fn nkey(i: u8) -> String {
    nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [i; 32])
        .unwrap()
        .public_key()
}

#[test]
fn users_file_is_deterministic_and_holds_only_users() {
    let ps = principals();
    let h = hashes(&ps);
    let a = users_file::compose(&ps, &h).unwrap();
    // Same records in another order: same bytes.
    let mut r = records();
    r.nodes.reverse();
    r.assignments.reverse();
    r.persons.reverse();
    let ps2 = derive(&catalogue(), &r, &ControllerSpec::default()).unwrap();
    let b = users_file::compose(&ps2, &h).unwrap();
    assert_eq!(a.text, b.text);
    assert!(a.omitted.is_empty());
    // Keys, not substrings: "reports" contains "port".
    for line in a.text.lines() {
        let key = line
            .trim()
            .split(|c: char| c == ':' || c == '=' || c.is_whitespace())
            .next()
            .unwrap_or("");
        for word in [
            "listen",
            "port",
            "tls",
            "store_dir",
            "jetstream_dir",
            "http",
        ] {
            assert_ne!(key, word, "users file sets {word}: {line}");
        }
    }
    // Every hash quoted: unquoted, `$2b$...` is read as a variable.
    for line in a.text.lines().filter(|l| l.contains("password")) {
        assert!(line.trim().starts_with("password: \"$2b$"), "{line}");
    }
    assert!(a.text.find("# controller\n").unwrap() < a.text.find("# host_n1\n").unwrap());
}

#[test]
fn machines_are_named_by_nkey_and_a_bad_key_is_refused() {
    let ps = principals();
    let f = users_file::compose(&ps, &hashes(&ps)).unwrap();
    // Passwords only for the two persons; every machine by its public key.
    assert_eq!(f.text.matches("password:").count(), 2);
    assert_eq!(f.text.matches("nkey:").count(), ps.len() - 2);
    assert!(f.text.contains(&format!(
        "# controller\n      {{\n        nkey: \"{}\"",
        nkey(0)
    )));
    for bad in [
        "Unot-a-key".to_string(),
        nkeys::KeyPair::new_account().public_key(),
        nkeys::KeyPair::new_user().seed().unwrap(),
    ] {
        let mut h = hashes(&ps);
        h.insert("host_n1".into(), UserCredential::NKey(bad.clone()));
        let e = users_file::compose(&ps, &h).unwrap_err();
        assert_eq!(
            e,
            users_file::UsersFileError::NotAnNKey {
                principal: "host_n1".into()
            }
        );
        assert!(!e.to_string().contains(&bad), "{e}");
    }
    let mut h = hashes(&ps);
    h.insert(
        "person_bob".into(),
        UserCredential::Password("plaintext".into()),
    );
    assert!(matches!(
        users_file::compose(&ps, &h),
        Err(users_file::UsersFileError::NotAHash { principal }) if principal == "person_bob"
    ));
}

#[test]
fn a_principal_without_credential_is_named_and_left_out() {
    let ps = principals();
    let mut h = hashes(&ps);
    h.remove("module_n2_builder");
    let f = users_file::compose(&ps, &h).unwrap();
    assert_eq!(f.omitted, ["module_n2_builder"]);
    assert_eq!(f.users, ps.len() - 1);
    assert!(!f.text.contains("module_n2_builder"));
}

#[test]
fn a_users_file_with_no_users_is_refused() {
    let ps = principals();
    match users_file::compose(&ps, &BTreeMap::new()).unwrap_err() {
        users_file::UsersFileError::Empty { omitted } => assert_eq!(omitted.len(), ps.len()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_users_file_without_the_controller_is_refused() {
    let ps = principals();
    // The controller derived but holding no credential.
    let mut h = hashes(&ps);
    h.remove(CONTROLLER);
    h.remove("module_n2_builder");
    match users_file::compose(&ps, &h).unwrap_err() {
        users_file::UsersFileError::NoController { omitted } => {
            assert_eq!(omitted, ["module_n2_builder"])
        }
        other => panic!("{other:?}"),
    }
    // The controller not among the principals at all.
    let without: Vec<Principal> = ps
        .iter()
        .filter(|p| p.name != CONTROLLER)
        .cloned()
        .collect();
    let e = users_file::compose(&without, &hashes(&ps)).unwrap_err();
    assert!(
        matches!(e, users_file::UsersFileError::NoController { ref omitted } if omitted.is_empty()),
        "{e:?}"
    );
    assert!(e.to_string().contains("its own writer"), "{e}");
}
