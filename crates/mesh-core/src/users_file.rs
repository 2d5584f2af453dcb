//! The users file: NATS configuration text naming who may connect and what
//! each may do — one account with JetStream, nothing else. Listen addresses,
//! TLS and storage belong to the broker module's own configuration, which
//! `include`s this file from the same directory.
//!
//! Same principals and hashes ⇒ same bytes: the broker's watcher reloads on
//! the file's digest, and an order-dependent composer would reload the whole
//! bus on every controller restart.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::authority::{CONTROLLER, Grant, Principal};

/// The account every mesh principal belongs to.
pub const ACCOUNT: &str = "MESH";

/// A composed users file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsersFile {
    pub text: String,
    /// How many users the file admits.
    pub users: usize,
    /// Principals left out because the store holds no credential for them:
    /// an ordinary state with an obvious remedy (mint one), so they are named
    /// rather than written as users without a password.
    pub omitted: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsersFileError {
    #[error(
        "no principal has a credential, so the users file would admit nobody and the broker would refuse every client; {MINT_REMEDY} (left out: {})",
        listed(omitted)
    )]
    Empty { omitted: Vec<String> },
    #[error(
        "the controller has no credential, so the users file would admit everyone but its own writer, and no composition after it could ever be made live; `mesh fleet load FILE` mints it{}",
        if omitted.is_empty() { String::new() } else { format!(" (also left out: {})", listed(omitted)) }
    )]
    NoController { omitted: Vec<String> },
    #[error(
        "the credential of principal {principal:?} is not a bcrypt hash; it must start with $2a$, $2b$ or $2y$"
    )]
    NotAHash { principal: String },
    #[error(
        "the credential of principal {principal:?} is not an NKey user public key; it must be the 56-character key starting with U that `nkeys` prints for a user seed"
    )]
    NotAnNKey { principal: String },
}

/// What a principal proves its identity with. Only public halves: the file
/// holds nothing that would let its reader connect as anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserCredential {
    /// An NKey user public key (`U…`): the client signs the server's nonce
    /// with its seed. Cheap for the broker to check on every reload.
    NKey(String),
    /// A bcrypt hash, for a person who must use a password.
    Password(String),
}

impl UserCredential {
    /// Whether `key` is an NKey *user* public key (an account or server key
    /// in its place would never authenticate anybody).
    pub fn is_user_nkey(key: &str) -> bool {
        nkeys::KeyPair::from_public_key(key)
            .is_ok_and(|kp| matches!(kp.key_pair_type(), nkeys::KeyPairType::User))
    }

    /// Whether `key` reads as an NKey user public key: length, base32,
    /// checksum and the user prefix — not whether its bytes are a point of
    /// the curve ([`Self::is_user_nkey`], checked when a key is recorded).
    pub fn has_user_nkey_form(key: &str) -> bool {
        nkeys::from_public_key(key).is_ok_and(|(prefix, _)| {
            matches!(nkeys::KeyPairType::from(prefix), nkeys::KeyPairType::User)
        })
    }
}

/// What admits a principal left out of the users file.
pub const MINT_REMEDY: &str = "`mesh fleet load FILE` mints one for every node, assignment and \
     person the file lists (a node listed only under [[token]] gets its own when it enrols)";

/// How many names a message lists before counting the rest.
const LISTED: usize = 10;

/// Names, at most ten of them, then how many more: a message about a
/// 2,000-node mesh stays one line.
pub fn listed(names: &[String]) -> String {
    let mut out = names
        .iter()
        .take(LISTED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        out.push_str(&format!(
            " and {} more",
            crate::diagnostic::thousands(names.len() - LISTED)
        ));
    }
    out
}

/// Composes the users file for `principals` (in their derived order, the
/// controller first) with `credentials` (principal name → credential).
pub fn compose(
    principals: &[Principal],
    credentials: &BTreeMap<String, UserCredential>,
) -> Result<UsersFile, UsersFileError> {
    let mut text = String::new();
    let mut omitted = Vec::new();
    let mut users: usize = 0;
    text.push_str("# The mesh's bus users, composed by the controller from its records.\n");
    text.push_str("# Regenerated on every change; edits here are overwritten.\n");
    let _ = writeln!(
        text,
        "accounts {{\n  {ACCOUNT}: {{\n    jetstream: enabled\n    users: ["
    );
    for p in principals {
        let Some(credential) = credentials.get(&p.name) else {
            omitted.push(p.name.clone());
            continue;
        };
        users += 1;
        let perms = &p.permissions;
        match credential {
            UserCredential::NKey(key) => {
                // The form only (prefix, base32, checksum): the key's point
                // was checked once, when it was recorded; decompressing
                // 60,000 of them on every composition was half its time.
                if !UserCredential::has_user_nkey_form(key) {
                    return Err(UsersFileError::NotAnNKey {
                        principal: p.name.clone(),
                    });
                }
                // An NKey user has no name in the file; the comment says whose.
                let _ = writeln!(text, "      # {}", p.name);
                let _ = writeln!(text, "      {{");
                let _ = writeln!(text, "        nkey: {}", quote(key));
            }
            UserCredential::Password(hash) => {
                if !(hash.starts_with("$2a$")
                    || hash.starts_with("$2b$")
                    || hash.starts_with("$2y$"))
                {
                    return Err(UsersFileError::NotAHash {
                        principal: p.name.clone(),
                    });
                }
                let _ = writeln!(text, "      {{");
                let _ = writeln!(text, "        user: {}", quote(&p.name));
                // Always quoted: unquoted, the config parser reads `$2b$...`
                // as a variable reference.
                let _ = writeln!(text, "        password: {}", quote(hash));
            }
        }
        let _ = writeln!(text, "        permissions: {{");
        write_list(&mut text, "publish", &perms.publish);
        write_list(&mut text, "subscribe", &perms.subscribe);
        if perms.allow_responses.is_some() {
            let _ = writeln!(text, "          allow_responses: true");
        }
        let _ = writeln!(text, "        }}");
        let _ = writeln!(text, "      }}");
    }
    text.push_str("    ]\n  }\n}\n");
    if users == 0 {
        return Err(UsersFileError::Empty { omitted });
    }
    // A file without the controller admits every client but the one that
    // writes the file: the next change could never be made live.
    if omitted.iter().any(|p| p == CONTROLLER) || !principals.iter().any(|p| p.name == CONTROLLER) {
        omitted.retain(|p| p != CONTROLLER);
        return Err(UsersFileError::NoController { omitted });
    }
    Ok(UsersFile {
        text,
        users,
        omitted,
    })
}

fn write_list(text: &mut String, key: &str, grants: &[Grant]) {
    let mut subjects: Vec<&str> = grants.iter().map(|g| g.subject.as_str()).collect();
    subjects.sort_unstable();
    subjects.dedup();
    // An empty allow list would be read as "no restriction": say deny-all.
    if subjects.is_empty() {
        let _ = writeln!(text, "          {key}: {{ deny: [\">\"] }}");
        return;
    }
    let _ = writeln!(text, "          {key}: {{ allow: [");
    for s in subjects {
        let _ = writeln!(text, "            {}", quote(s));
    }
    let _ = writeln!(text, "          ] }}");
}

/// A double-quoted NATS config string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The inbox a composition's canary may subscribe to, and nothing else.
pub const CANARY_INBOX: &str = "_INBOX.canary.>";

/// One step of making a composition live on the broker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum PublishStep {
    /// Write the users file (the composition plus this composition's canary).
    Write { text: String },
    /// Ask the broker to reload its configuration.
    Signal,
    /// Count it live only once the canary's key connects: a reload that fails
    /// is only logged by the broker, and the old file stays in force.
    Confirm { canary: String },
}

/// The digest a composition is known by ([`plan_publication`]): the
/// composer keeps this, not a second copy of a file of megabytes.
pub fn digest(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// What making `text` (a composed file) live takes, given the digest of the
/// composition last confirmed live (before its canary). Nothing when it is
/// unchanged: the same records give the same bytes, so a restart or a burst
/// that cancels out reloads nobody. Otherwise the file with a canary user
/// whose public key is `canary` (fresh for each composition, so only this
/// composition admits it), permitted only its own inbox. Takes the text:
/// the plan's write is that very string, not a copy of it.
pub fn plan_publication(text: String, last_live: Option<&str>, canary: &str) -> Vec<PublishStep> {
    if last_live == Some(digest(&text).as_str()) {
        return Vec::new();
    }
    let mut text = text;
    // Inside the account's list: the canary is a user like any other.
    let end = "    ]\n  }\n}\n";
    if let Some(body) = text.strip_suffix(end) {
        let mut t = body.to_string();
        let _ = writeln!(t, "      # canary of this composition");
        let _ = writeln!(t, "      {{");
        let _ = writeln!(t, "        nkey: {}", quote(canary));
        let _ = writeln!(t, "        permissions: {{");
        let _ = writeln!(t, "          publish: {{ deny: [\">\"] }}");
        let _ = writeln!(
            t,
            "          subscribe: {{ allow: [{}] }}",
            quote(CANARY_INBOX)
        );
        let _ = writeln!(t, "        }}");
        let _ = writeln!(t, "      }}");
        t.push_str(end);
        text = t;
    }
    vec![
        PublishStep::Write { text },
        PublishStep::Signal,
        PublishStep::Confirm {
            canary: canary.to_string(),
        },
    ]
}

/// How a users file shared through the store (a clustered bus over
/// machines) starts: which of the store's revisions it is, so a machine's
/// controller tells an older file from the one to write.
const SHARED_HEADER: &str = "# shared revision ";

/// `text` as written on every machine once the store holds it as
/// `revision`.
pub fn with_shared_revision(revision: i64, text: &str) -> String {
    format!("{SHARED_HEADER}{revision}: every server of this mesh serves this file\n{text}")
}

/// The store's revision a users file's first line names; none for a file
/// never shared (genesis's first, a single server's).
pub fn shared_revision(first_line: &str) -> Option<i64> {
    first_line
        .strip_prefix(SHARED_HEADER)?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// Whether a machine whose users file is at revision `local` must write the
/// store's `shared` one: only a newer one, so a controller that read the
/// store before a composition was shared never writes over it.
pub fn mirror_due(local: Option<i64>, shared: Option<i64>) -> bool {
    match (local, shared) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(l), Some(s)) => l < s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::{Permissions, PrincipalKind};

    #[test]
    fn a_shared_file_names_its_revision_on_its_first_line() {
        let text = with_shared_revision(12, "accounts {}\n");
        let (first, rest) = text.split_once('\n').unwrap();
        assert_eq!(shared_revision(first), Some(12));
        assert_eq!(rest, "accounts {}\n");
        assert_eq!(shared_revision("accounts {"), None);
        assert_eq!(shared_revision("# shared revision x: …"), None);
    }

    #[test]
    fn only_a_newer_shared_file_is_written() {
        assert!(!mirror_due(None, None));
        assert!(!mirror_due(Some(3), None));
        assert!(mirror_due(None, Some(1)));
        assert!(mirror_due(Some(2), Some(3)));
        assert!(!mirror_due(Some(3), Some(3)));
        assert!(!mirror_due(Some(4), Some(3)));
    }

    fn file() -> UsersFile {
        let p = Principal {
            name: CONTROLLER.into(),
            kind: PrincipalKind::Controller,
            source: String::new(),
            permissions: Permissions::default(),
        };
        let key = nkeys::KeyPair::new_user().public_key();
        let creds = BTreeMap::from([(CONTROLLER.to_string(), UserCredential::NKey(key))]);
        compose(&[p], &creds).unwrap()
    }

    #[test]
    fn a_list_names_ten_then_counts_the_rest() {
        let names = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
        assert_eq!(listed(&names(2)), "p0, p1");
        assert_eq!(listed(&names(10)), names(10).join(", "));
        assert_eq!(
            listed(&names(11)),
            format!("{} and 1 more", names(10).join(", "))
        );
        assert!(listed(&names(2_010)).ends_with("p9 and 2,000 more"));
    }

    #[test]
    fn an_unchanged_composition_publishes_nothing() {
        let f = file();
        let d = digest(&f.text);
        assert_eq!(plan_publication(f.text, Some(&d), "UCANARY"), vec![]);
    }

    #[test]
    fn a_changed_composition_is_written_signalled_and_confirmed_by_its_canary() {
        let f = file();
        for last in [None, Some(digest("an older composition"))] {
            let steps = plan_publication(f.text.clone(), last.as_deref(), "UCANARY");
            let [
                PublishStep::Write { text },
                PublishStep::Signal,
                PublishStep::Confirm { canary },
            ] = &steps[..]
            else {
                panic!("{steps:?}")
            };
            assert_eq!(canary, "UCANARY");
            assert!(text.starts_with(f.text.strip_suffix("    ]\n  }\n}\n").unwrap()));
            assert!(text.ends_with("    ]\n  }\n}\n"));
            assert!(text.contains(
                "nkey: \"UCANARY\"\n        permissions: {\n          publish: { deny: [\">\"] }\n          subscribe: { allow: [\"_INBOX.canary.>\"] }"
            ));
        }
    }

    #[test]
    fn a_user_key_s_form_is_its_prefix_base32_and_checksum() {
        let user = nkeys::KeyPair::new_user();
        let key = user.public_key();
        assert!(UserCredential::has_user_nkey_form(&key));
        assert!(!UserCredential::has_user_nkey_form(
            &nkeys::KeyPair::new_account().public_key()
        ));
        assert!(!UserCredential::has_user_nkey_form(&user.seed().unwrap()));
        // One character changed: the checksum no longer holds.
        let mut bytes = key.clone().into_bytes();
        bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(bytes).unwrap();
        assert!(!UserCredential::has_user_nkey_form(&edited));
        assert!(!UserCredential::has_user_nkey_form(&key[1..]));
        assert!(!UserCredential::has_user_nkey_form(""));
    }
}
