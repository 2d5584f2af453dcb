//! A permissioned, TLS-on bus for tests of authority: a nats-server serving
//! the users file composed by `mesh-core` from the principals a test derives
//! (plus an observer that sees everything), and helpers that assert an
//! operation was allowed (it arrived) or refused (the server's permissions
//! violation, awaited — silence is never taken for a refusal).

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerError};
use futures::StreamExt;
use mesh_core::authority::{self, Permissions, Principal, PrincipalKind};
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_core::users_file::{self, UserCredential};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::NatsServer;

/// How long an allowed delivery or a refusal may take.
pub const WAIT: Duration = Duration::from_secs(5);
/// The test-only user that sees and may send everything.
pub const OBSERVER: &str = "observer";

/// subscriptions. Not a mesh principal; added to the test's file only.
pub fn observer() -> Principal {
    let all = |subject: &str| authority::Grant {
        subject: subject.into(),
        cause: authority::Cause::Rule {
            what: "test observer",
        },
    };
    Principal {
        name: OBSERVER.into(),
        kind: PrincipalKind::Person {
            person: Name::new(OBSERVER).expect("a valid name"),
        },
        source: "the test".into(),
        permissions: Permissions {
            publish: vec![all(">")],
            subscribe: vec![all(">")],
            allow_responses: None,
        },
    }
}

/// A person's password in the test's file (persons may use one; machines
/// never do). Fixed per name so a rewritten file keeps them valid.
pub fn password_for(name: &str) -> String {
    format!("pw-{name}-0123456789abcdef")
}

/// The NKey user seed of a principal in the test's file: derived from its
/// name, so a rewritten file keeps every existing user valid.
pub fn nkey_seed_for(name: &str) -> String {
    let raw: [u8; 32] = Sha256::digest(format!("mesh-test-nkey {name}")).into();
    nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, raw)
        .and_then(|kp| kp.seed())
        .expect("a user seed from 32 bytes")
}

/// Whether the test's file gives `p` a password (a person) or an NKey.
fn uses_password(p: &Principal) -> bool {
    matches!(p.kind, PrincipalKind::Person { .. }) && p.name != OBSERVER
}

/// The users file for `principals`: an NKey for every machine principal and
/// the observer, a bcrypt password for persons.
pub fn compose(principals: &[Principal]) -> String {
    let mut credentials = BTreeMap::new();
    for p in principals {
        let credential = if uses_password(p) {
            // Cost 4: the cost under test is the store's, not this one.
            UserCredential::Password(bcrypt::hash(password_for(&p.name), 4).unwrap())
        } else {
            let kp = nkeys::KeyPair::from_seed(&nkey_seed_for(&p.name)).unwrap();
            UserCredential::NKey(kp.public_key())
        };
        credentials.insert(p.name.clone(), credential);
    }
    let file = users_file::compose(principals, &credentials).unwrap();
    assert!(file.omitted.is_empty());
    file.text
}

/// A running permissioned bus serving the composed users.
pub struct PermissionedBus {
    pub server: NatsServer,
    pub principals: Vec<Principal>,
}

impl PermissionedBus {
    /// Serves `principals` and the observer over TLS; the composed
    /// configuration must pass `nats-server -t` first.
    pub fn start(mut principals: Vec<Principal>) -> PermissionedBus {
        principals.push(observer());
        let text = compose(&principals);
        let server = NatsServer::builder()
            .tls(true)
            // Bare file name: nats-server resolves includes against the
            // including file's directory, even absolute ones.
            .config("include users.conf")
            .file("users.conf", text)
            .start()
            .expect("nats-server starts");
        crate::nats::test_config(&server.config_path())
            .expect("nats-server -t accepts the composed configuration");
        PermissionedBus { server, principals }
    }

    /// Rewrites the users file for `principals` (and the observer); the
    /// caller signals the reload.
    pub fn recompose(&mut self, mut principals: Vec<Principal>) {
        principals.push(observer());
        let text = compose(&principals);
        self.server
            .write_file("users.conf", &text)
            .expect("users file written");
        self.principals = principals;
    }

    /// Whether `name` connects with a password (a person) or its NKey.
    pub fn uses_password(&self, name: &str) -> bool {
        self.principals
            .iter()
            .find(|p| p.name == name)
            .is_some_and(uses_password)
    }

    /// The CA the server's certificate chains to.
    pub fn ca_pem(&self) -> std::path::PathBuf {
        self.server
            .certificates()
            .expect("TLS is on")
            .ca_pem
            .clone()
    }

    /// Connects as `name` over TLS with its own inbox prefix, collecting the
    /// server's errors for this connection.
    pub async fn connect(&self, name: &str) -> Conn {
        let (tx, errors) = mpsc::unbounded_channel();
        let opts = if self.uses_password(name) {
            ConnectOptions::with_user_and_password(name.into(), password_for(name))
        } else {
            ConnectOptions::with_nkey(nkey_seed_for(name))
        };
        let opts = opts
            .add_root_certificates(self.ca_pem())
            .require_tls(true)
            .custom_inbox_prefix(subjects::inbox_prefix(name))
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    if let Event::ServerError(ServerError::Other(e)) = event {
                        let _ = tx.send(e);
                    }
                }
            });
        let client = opts
            .connect(self.server.url().as_str())
            .await
            .unwrap_or_else(|e| panic!("{name} connects: {e}"));
        Conn { client, errors }
    }
}

/// A connection and the server errors reported on it.
pub struct Conn {
    pub client: Client,
    pub errors: mpsc::UnboundedReceiver<String>,
}

/// A concrete subject (or routing key) matched by a grant pattern (or binding key).
pub fn concrete(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|t| match t {
            "*" => "x1",
            // NATS's `>`, or AMQP's `#` in a binding key.
            ">" | "#" => "x2",
            t => t,
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Waits for the server's permissions violation for `op` ("Publish to" or
/// "Subscription to") on `subject`. A timeout fails: silence is not a
/// refusal. Any other server error fails too, so a refusal of something that
/// should have been allowed cannot hide in the queue.
pub async fn expect_violation(conn: &mut Conn, op: &str, subject: &str) {
    let wanted = format!("permissions violation for {op} \"{subject}\"").to_lowercase();
    match tokio::time::timeout(WAIT, conn.errors.recv()).await {
        Ok(Some(e)) if e.to_lowercase().contains(&wanted) => {}
        Ok(Some(other)) => panic!("expected {wanted:?}, the server said {other:?}"),
        Ok(None) | Err(_) => panic!("expected {wanted:?}, got no refusal within {WAIT:?}"),
    }
}

/// No server error has been reported for this connection so far.
pub fn expect_no_violation(conn: &mut Conn) {
    if let Ok(e) = conn.errors.try_recv() {
        panic!("unexpected server error: {e}");
    }
}

/// Publishes `payload` from `sender` until `sub` receives it. Client flush
/// only writes the socket; the server processes two connections in no
/// particular order, so a single publish could pass a subscription the server
/// has not registered yet.
pub async fn deliver(
    sender: &Client,
    subject: &str,
    sub: &mut async_nats::Subscriber,
    payload: &str,
) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        sender
            .publish(subject.to_string(), payload.to_string().into())
            .await
            .unwrap();
        sender.flush().await.unwrap();
        let step = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Ok(Some(m)) = tokio::time::timeout_at(step, sub.next()).await {
            if m.payload.as_ref() == payload.as_bytes() {
                return true;
            }
        }
    }
    false
}

pub async fn allowed_publish(conn: &mut Conn, observer: &Conn, subject: &str, who: &str) {
    let mut watch = observer
        .client
        .subscribe(subject.to_string())
        .await
        .unwrap();
    // The observer's own probe coming back proves its subscription is live.
    assert!(deliver(&observer.client, subject, &mut watch, "probe").await);
    let payload = format!("pub-{subject}");
    assert!(
        deliver(&conn.client, subject, &mut watch, &payload).await,
        "{who}: publish to {subject} did not arrive"
    );
    expect_no_violation(conn);
}

pub async fn allowed_subscribe(conn: &mut Conn, observer: &Conn, subject: &str, who: &str) {
    let mut sub = conn.client.subscribe(subject.to_string()).await.unwrap();
    let payload = format!("sub-{subject}");
    assert!(
        deliver(&observer.client, subject, &mut sub, &payload).await,
        "{who}: subscription to {subject} received nothing"
    );
    expect_no_violation(conn);
}

pub async fn refused_publish(conn: &mut Conn, subject: &str) {
    conn.client
        .publish(subject.to_string(), "forbidden".into())
        .await
        .unwrap();
    conn.client.flush().await.unwrap();
    expect_violation(conn, "publish to", subject).await;
}

pub async fn refused_subscribe(conn: &mut Conn, subject: &str) {
    let _sub = conn.client.subscribe(subject.to_string()).await.unwrap();
    conn.client.flush().await.unwrap();
    expect_violation(conn, "subscription to", subject).await;
}
