//! The grants of [`super::derive`] rendered for RabbitMQ (DESIGN "the bus
//! seam"): one user per principal, its vhost permissions (regexes over
//! exchange and queue names) and its topic permissions (regexes over routing
//! and binding keys) on the mesh's one topic exchange. Nothing here is a
//! second account of anyone's power: every regex comes from a grant the users
//! file is rendered from too, through one routing key per subject (the
//! subject itself, `>` written `*.#`).
//!
//! What RabbitMQ does, checked against 3.10 (the tests in `amqp_authority_live`
//! prove each line):
//! - publishing needs `write` on the exchange, then topic `write` on the
//!   routing key; binding a queue needs `write` on the queue, `read` on the
//!   exchange and topic `read` on the binding key; consuming needs `read` on
//!   the queue; declaring needs `configure`.
//! - a user with no topic permissions on an exchange may use every routing
//!   key: every user gets both regexes on [`EXCHANGE`], `^$` when it has none.
//! - `write` on the default exchange (`amq.default`) reaches every queue by
//!   name, so no principal gets it. Direct reply-to needs it, so answers go
//!   through [`EXCHANGE`] to the asker's inbox instead (see [`Rendered`]).
//! - a client cannot name a queue `amq.*`; a server-named queue is
//!   `amq.gen-…`. Configuring those alone is what a principal's own
//!   subscriptions need, as a NATS client subscribes without asking anyone.

use std::collections::BTreeSet;

use serde::Serialize;

use super::Principal;
use crate::jetstream::{ConsumerSpec, Objects};

/// The mesh's one topic exchange: every routing key is a subject of
/// [`crate::subjects`].
pub const EXCHANGE: &str = "mesh";

/// The durable queues the controller makes, one per consumer of
/// [`crate::jetstream::derive`]: `mesh.queue.<consumer>`.
pub const QUEUE_PREFIX: &str = "mesh.queue.";

/// Server-named queues: a principal's own subscriptions.
const OWN_QUEUES: &str = r"amq\.gen-.+";

/// The exchange and the mesh's queues, which only the controller configures.
const MESH_OBJECTS: &str = r"mesh(\..+)?";

/// The queue a consumer's deliveries wait in.
pub fn queue(consumer: &ConsumerSpec) -> String {
    format!("{QUEUE_PREFIX}{}", consumer.name)
}

/// A subject as an AMQP binding key: the same tokens, NATS's `>` (one or
/// more tokens) written `*.#` (one, then zero or more: `#` alone would match
/// the subject without its last token too).
pub fn binding_key(subject: &str) -> String {
    subject
        .split('.')
        .map(|t| if t == ">" { "*.#" } else { t })
        .collect::<Vec<_>>()
        .join(".")
}

/// What one grant became on RabbitMQ.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "as", rename_all = "kebab-case")]
pub enum Rendered {
    /// Publishing to [`EXCHANGE`] with routing keys the regex matches.
    TopicWrite { regex: String },
    /// Binding an own (server-named) queue to [`EXCHANGE`] with binding keys
    /// the regex matches.
    TopicRead { regex: String },
    /// Consuming from the queue of a consumer of the mesh.
    ReadQueue { queue: String },
    /// A NATS mechanism with no AMQP counterpart, and why nothing is lost.
    NatsOnly { why: &'static str },
}

/// A grant of the principal (by subject) and what it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rendering {
    /// `publish`, `subscribe` or `allow_responses`.
    pub grant: &'static str,
    pub subject: String,
    pub rendered: Rendered,
}

/// A RabbitMQ user's permissions: what the controller sets through the
/// management API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmqpPermissions {
    pub user: String,
    pub configure: String,
    pub write: String,
    pub read: String,
    /// On [`EXCHANGE`].
    pub topic_write: String,
    pub topic_read: String,
    pub renderings: Vec<Rendering>,
}

/// A JetStream API, acknowledgement or object-store subject: these exist on
/// NATS only.
fn nats_only(subject: &str) -> Option<&'static str> {
    if subject.starts_with("$JS.ACK.") {
        Some("AMQP acknowledges a delivery on the channel it came on")
    } else if subject.starts_with("$JS.API.CONSUMER.INFO.") {
        Some("binding a queue asks no permission (a passive declare)")
    } else if subject.starts_with("$JS.") || subject.starts_with("$O.") {
        Some("JetStream's API and object store; on AMQP the controller configures every object")
    } else {
        None
    }
}

/// A token of a subject (no wildcard) as a regex matching only itself.
fn literal(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for c in token.chars() {
        if !(c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The routing keys a publish grant on `subject` allows: a routing key is
/// literal, so a wildcard token stands for any word.
pub fn routing_key_regex(subject: &str) -> String {
    tokens_regex(subject, "[^.]+")
}

/// The binding keys a subscribe grant on `subject` allows: `*` in a binding
/// key is one word, as in the grant, but `#` is zero or more, so it may not
/// stand where the grant has one word (`mesh.control.heartbeat.#` would hear
/// more than `mesh.control.heartbeat.*`), nor first under a `>`.
pub fn binding_key_regex(subject: &str) -> String {
    tokens_regex(subject, "[^.#]+")
}

fn tokens_regex(subject: &str, word: &str) -> String {
    subject
        .split('.')
        .map(|t| match t {
            "*" => word.to_string(),
            ">" => format!(r"{word}(\.[^.]+)*"),
            t => literal(t),
        })
        .collect::<Vec<_>>()
        .join(r"\.")
}

/// `^(a|b)$`, or `^$` (nothing) for no alternative.
fn any_of(alternatives: &BTreeSet<String>) -> String {
    if alternatives.is_empty() {
        "^$".to_string()
    } else {
        let v: Vec<&str> = alternatives.iter().map(String::as_str).collect();
        format!("^({})$", v.join("|"))
    }
}

/// A principal's grants rendered for RabbitMQ. `objects` are the mesh's
/// consumers: a subscribe grant on a consumer's deliver subject becomes
/// reading its queue.
pub fn render(p: &Principal, objects: &Objects) -> AmqpPermissions {
    let mut renderings = Vec::new();
    let (mut topic_write, mut topic_read) = (BTreeSet::new(), BTreeSet::new());
    let mut queues = BTreeSet::new();
    for subject in p.permissions.publish_subjects() {
        let rendered = match nats_only(subject) {
            Some(why) => Rendered::NatsOnly { why },
            None => {
                let regex = routing_key_regex(subject);
                topic_write.insert(regex.clone());
                Rendered::TopicWrite { regex }
            }
        };
        renderings.push(Rendering {
            grant: "publish",
            subject: subject.to_string(),
            rendered,
        });
    }
    for subject in p.permissions.subscribe_subjects() {
        let consumer = objects
            .consumers
            .iter()
            .find(|c| c.deliver_subject == subject);
        let rendered = if let Some(c) = consumer {
            let q = queue(c);
            queues.insert(literal_name(&q));
            Rendered::ReadQueue { queue: q }
        } else if let Some(why) = nats_only(subject) {
            Rendered::NatsOnly { why }
        } else {
            let regex = binding_key_regex(subject);
            topic_read.insert(regex.clone());
            Rendered::TopicRead { regex }
        };
        renderings.push(Rendering {
            grant: "subscribe",
            subject: subject.to_string(),
            rendered,
        });
    }
    if p.permissions.allow_responses.is_some() {
        // AMQP cannot tie an answer to the request it answers (direct
        // reply-to could, but needs `amq.default`, which reaches every
        // queue): a server of tools may write into inboxes, and an asker
        // takes only the answer carrying the unguessable id it sent.
        let regex = routing_key_regex(&format!("{INBOXES}.>"));
        topic_write.insert(regex.clone());
        renderings.push(Rendering {
            grant: "allow_responses",
            subject: format!("{INBOXES}.>"),
            rendered: Rendered::TopicWrite { regex },
        });
    }

    let controller = matches!(p.kind, super::PrincipalKind::Controller);
    if controller {
        // Binding is checked against topic read even for the one who
        // configures: the controller binds each queue by exactly its keys
        // (as on NATS it alone creates consumers).
        // Every node's declaration queue is bound by one shape of key: one
        // alternative for them all (a thousand literal ones make a regex
        // RabbitMQ refuses), matching literal names only, never a wildcard.
        let nodes = crate::subjects::ALL_DECLARATIONS;
        let mut nodes_rendered = false;
        for q in topology(objects) {
            for key in q.bindings {
                if fits(nodes, &key) {
                    if !std::mem::replace(&mut nodes_rendered, true) {
                        let regex = literal_words(nodes);
                        topic_read.insert(regex.clone());
                        renderings.push(Rendering {
                            grant: "binds",
                            subject: format!("{nodes} (each node's queue, by its own name)"),
                            rendered: Rendered::TopicRead { regex },
                        });
                    }
                    continue;
                }
                let regex = literal_name(&key);
                topic_read.insert(regex.clone());
                renderings.push(Rendering {
                    grant: "binds",
                    subject: format!("{key} (queue {})", q.name),
                    rendered: Rendered::TopicRead { regex },
                });
            }
        }
    }
    let own_queues = !topic_read.is_empty();
    let pick = |parts: &[(bool, &str)]| -> BTreeSet<String> {
        parts
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, s)| s.to_string())
            .collect()
    };
    let (configure, write, mut read) = if controller {
        let all = pick(&[(true, MESH_OBJECTS), (true, OWN_QUEUES)]);
        (all.clone(), all.clone(), all)
    } else {
        (
            pick(&[(own_queues, OWN_QUEUES)]),
            // Binding an own queue is a write on it.
            pick(&[
                (!topic_write.is_empty(), EXCHANGE),
                (own_queues, OWN_QUEUES),
            ]),
            // Binding reads the exchange; consuming reads the queue.
            pick(&[(own_queues, EXCHANGE), (own_queues, OWN_QUEUES)]),
        )
    };
    if !controller {
        read.extend(queues);
    }
    AmqpPermissions {
        user: p.name.clone(),
        configure: any_of(&configure),
        write: any_of(&write),
        read: any_of(&read),
        topic_write: any_of(&topic_write),
        topic_read: any_of(&topic_read),
        renderings,
    }
}

/// Every principal's inbox, the prefix of [`crate::subjects::inbox`].
const INBOXES: &str = "_INBOX";

/// Whether the literal `key` is one `pattern` (with `*` for one word)
/// names.
pub(crate) fn fits(pattern: &str, key: &str) -> bool {
    let (p, k): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), key.split('.').collect());
    p.len() == k.len()
        && p.iter().zip(&k).all(|(p, k)| match *p {
            // A literal word only: a wildcard key keeps a grant of its own.
            "*" => !k.is_empty() && *k != "*" && *k != "#",
            p => p == *k,
        })
}

/// A subject pattern as a regex over literal keys: `*` any one literal word
/// (no `*` or `#` in it), every other token itself.
fn literal_words(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|t| match t {
            "*" => "[^.*#]+".to_string(),
            t => literal(t),
        })
        .collect::<Vec<_>>()
        .join(r"\.")
}

/// A queue name as a regex matching only itself.
fn literal_name(name: &str) -> String {
    name.split('.').map(literal).collect::<Vec<_>>().join(r"\.")
}

/// RabbitMQ's name for the hashing [`password_hash`] does.
pub const PASSWORD_HASHING: &str = "rabbit_password_hashing_sha256";

/// What a principal announces instead of its password, as NATS principals
/// announce a public key: RabbitMQ's salted SHA-256
/// (`base64(salt ++ sha256(salt ++ password))`, [`PASSWORD_HASHING`]), which
/// the management API takes as `password_hash`. The salt is the caller's
/// (random), so this stays pure.
pub fn password_hash(salt: [u8; 4], password: &[u8]) -> String {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password);
    let mut out = salt.to_vec();
    out.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// A principal's password on RabbitMQ, made from its NKey seed: the one
/// secret a principal keeps stays the one secret (the same file, the same
/// 0600, the same rotation), and the broker, which sees the password, learns
/// nothing of the seed (HMAC-SHA-256 keyed by the seed, over a label naming
/// this use). URL-safe base64 so it is one word in any configuration.
pub fn password_of(seed: &str) -> String {
    use base64::Engine as _;
    use hmac::{Hmac, Mac as _};
    let mut mac = <Hmac<sha2::Sha256>>::new_from_slice(seed.trim().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(PASSWORD_LABEL);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// What [`password_of`] is keyed for: a seed's MAC for anything else is
/// another value.
const PASSWORD_LABEL: &[u8] = b"mesh amqp password v1";

/// The hash a principal announces for its seed: [`password_hash`] of
/// [`password_of`], salted by the seed too, so the same key always announces
/// the same hash (a fresh salt each report would change the user at every
/// composition). The salt guards nothing here: the password is 256 random
/// bits, not a word a table could hold.
pub fn announced_hash(seed: &str) -> String {
    use hmac::{Hmac, Mac as _};
    let mut mac = <Hmac<sha2::Sha256>>::new_from_slice(seed.trim().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(SALT_LABEL);
    let salt: [u8; 4] = mac.finalize().into_bytes()[..4]
        .try_into()
        .expect("a MAC is longer than four bytes");
    password_hash(salt, password_of(seed).as_bytes())
}

const SALT_LABEL: &[u8] = b"mesh amqp salt v1";

/// Whether `s` is a hash [`password_hash`] could have made: base64 of a
/// 4-byte salt and a SHA-256.
pub fn is_password_hash(s: &str) -> bool {
    use base64::Engine as _;
    s.len() == 48
        && base64::engine::general_purpose::STANDARD
            .decode(s)
            .is_ok_and(|b| b.len() == 36)
}

/// The hashes a message announces, by the public key each is for: at most
/// one per key the message itself names (`keys`), each a hash. Why not,
/// when not.
pub fn check_announced(
    hashes: &std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> Result<(), &'static str> {
    if hashes.keys().any(|k| !keys.contains(&k.as_str())) {
        return Err("a hash is for a key the message does not announce");
    }
    if hashes.values().any(|h| !is_password_hash(h)) {
        return Err("a hash is not base64 of a 4-byte salt and a SHA-256");
    }
    Ok(())
}

/// A durable queue the controller makes, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueSpec {
    pub name: String,
    /// Binding keys on [`EXCHANGE`].
    pub bindings: Vec<String>,
    /// `x-max-length` with `drop-head`: only the newest messages are kept
    /// (a node's declaration queue keeps one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<i64>,
    /// `x-message-ttl`, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age_secs: Option<u64>,
}

/// The durable queues of a mesh on AMQP: one per consumer, bound by its
/// filters (or its stream's subjects when it has none). A stream keeping one
/// message per subject keeps one in a queue bound to one subject.
pub fn topology(objects: &Objects) -> Vec<QueueSpec> {
    objects
        .consumers
        .iter()
        .map(|c| {
            let stream = objects.streams.iter().find(|s| s.name == c.stream);
            let subjects = if c.filter_subjects.is_empty() {
                stream.map(|s| s.subjects.clone()).unwrap_or_default()
            } else {
                c.filter_subjects.clone()
            };
            let single_subject =
                subjects.len() == 1 && !subjects[0].split('.').any(|t| t == "*" || t == ">");
            QueueSpec {
                name: queue(c),
                bindings: subjects.iter().map(|s| binding_key(s)).collect(),
                max_length: stream
                    .and_then(|s| s.max_msgs_per_subject)
                    .filter(|_| single_subject),
                max_age_secs: stream.and_then(|s| s.max_age_secs),
            }
        })
        .collect()
}
