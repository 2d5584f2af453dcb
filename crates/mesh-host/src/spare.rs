//! Module keys made ahead. A host keeps a few spare NKeys (the seeds 0600
//! in `spare/`, named by their public keys) and announces their public
//! halves at enrolment and in every report; the controller gives a module
//! newly declared here one of them, records it, and publishes the
//! declaration only once the broker admits it. The module then starts with
//! a key the broker already knows: no first start refused, no restart.

use std::path::{Path, PathBuf};

use crate::state::{StateError, ensure_dir, write_private};

/// The directory of the spares, in the host's state directory.
pub const SPARE_DIR: &str = "spare";

/// How many spares a host keeps: a burst assigning more modules to one
/// node than this is declared in two steps (the rest wait for the next
/// report's spares rather than start under keys the broker refuses), so it
/// covers a typical node's modules at once (`mesh up` assigns six).
pub const KEEP: usize = 8;

fn dir(state: &Path) -> PathBuf {
    state.join(SPARE_DIR)
}

/// The public keys of the spares there now, sorted. A file whose name is
/// not its seed's public key is left out (and left alone).
pub fn list(state: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir(state)) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let seed = std::fs::read_to_string(e.path()).ok()?;
            let kp = nkeys::KeyPair::from_seed(seed.trim()).ok()?;
            (kp.public_key() == name).then_some(name)
        })
        .collect();
    keys.sort();
    keys
}

/// The RabbitMQ hash each of `keys` announces (DESIGN "the bus seam"), from
/// its seed here; a key with no seed here is left out.
pub fn hashes(state: &Path, keys: &[String]) -> std::collections::BTreeMap<String, String> {
    keys.iter()
        .filter_map(|k| {
            let seed = std::fs::read_to_string(dir(state).join(k)).ok()?;
            Some((k.clone(), mesh_core::authority::amqp::announced_hash(&seed)))
        })
        .collect()
}

/// Makes spares until [`KEEP`] are there; returns their public keys.
pub fn top_up(state: &Path) -> Result<Vec<String>, StateError> {
    let d = dir(state);
    ensure_dir(&d)?;
    let mut keys = list(state);
    while keys.len() < KEEP {
        let kp = nkeys::KeyPair::new_user();
        let seed = kp.seed().expect("a new user key has a seed");
        write_private(&d.join(kp.public_key()), format!("{seed}\n").as_bytes())?;
        keys.push(kp.public_key());
    }
    keys.sort();
    Ok(keys)
}

/// Moves the spare of `key` to `to` (a module's seed file); `false` when
/// this host holds no such spare.
pub fn take(state: &Path, key: &str, to: &Path) -> Result<bool, StateError> {
    // A public key is base32: no path separator can ride in on it.
    if !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(false);
    }
    let from = dir(state).join(key);
    let Ok(seed) = std::fs::read_to_string(&from) else {
        return Ok(false);
    };
    if !nkeys::KeyPair::from_seed(seed.trim()).is_ok_and(|kp| kp.public_key() == key) {
        return Ok(false);
    }
    write_private(to, seed.as_bytes())?;
    std::fs::remove_file(&from).map_err(|source| StateError::Io {
        action: "remove",
        path: from,
        source,
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_are_made_to_keep_taken_once_and_made_again() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("host");
        let keys = top_up(&state).unwrap();
        assert_eq!(keys.len(), KEEP);
        assert_eq!(list(&state), keys);
        assert_eq!(top_up(&state).unwrap(), keys, "kept, not remade");
        let to = tmp.path().join("module.seed");
        assert!(take(&state, &keys[0], &to).unwrap());
        let seed = std::fs::read_to_string(&to).unwrap();
        assert_eq!(
            nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key(),
            keys[0]
        );
        assert!(!take(&state, &keys[0], &to).unwrap(), "taken once");
        assert!(!take(&state, "../x", &to).unwrap());
        assert_eq!(list(&state).len(), KEEP - 1);
        let again = top_up(&state).unwrap();
        assert_eq!(again.len(), KEEP);
        assert!(!again.contains(&keys[0]));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(state.join(SPARE_DIR).join(&again[0]))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
