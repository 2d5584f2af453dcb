//! The composer on a mesh whose bus is RabbitMQ: the broker's users made
//! exactly the derived principals, each from the hash its recorded key
//! announced (`mesh_core::authority::amqp_users`), through the management
//! API, whose answer is the confirmation (RabbitMQ applies a user and its
//! permissions before it answers; no reload, no canary). The mesh's queues
//! and exchange are declared with each composition, after the users: the
//! controller binds a new node's queue by keys only its new rendering
//! allows, and a user's read permission naming a queue not there yet is
//! harmless for the moment until it is.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mesh_bus::amqp::Management;
use mesh_core::authority::Principal;
use mesh_core::authority::amqp_users::{self, Wanted};
use mesh_core::jetstream::Objects;
use mesh_core::users_file::UserCredential;

use super::{ComposeError, Composition, Outcome, SourceError, Timing, publish::Done};

/// What an AMQP composition is made of: the derived principals, the
/// credentials recorded for them, the hashes recorded by public key, and
/// the bus objects (which queues a principal reads).
pub struct AmqpSnapshot {
    pub principals: Vec<Principal>,
    pub credentials: BTreeMap<String, UserCredential>,
    pub hashes: BTreeMap<String, String>,
    pub objects: Objects,
}

/// Reads each composition's records.
pub type AmqpSource = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<AmqpSnapshot, SourceError>> + Send>>
        + Send
        + Sync,
>;

/// Declares the mesh's exchange and queues for `objects`.
pub type Declare = Arc<
    dyn Fn(Objects) -> Pin<Box<dyn Future<Output = Result<(), SourceError>> + Send>> + Send + Sync,
>;

pub struct AmqpUsers {
    pub management: Management,
    pub source: AmqpSource,
    pub declare: Declare,
    pub timing: Timing,
    pub retry_after: Duration,
}

impl AmqpUsers {
    pub fn new(management: Management, source: AmqpSource, declare: Declare) -> AmqpUsers {
        AmqpUsers {
            management,
            source,
            declare,
            timing: Timing::default(),
            retry_after: Duration::from_secs(10),
        }
    }
}

impl Composition for AmqpUsers {
    async fn once(&mut self, generation: u64) -> (Outcome, Done) {
        let mut done = Done::default();
        let not_live = |error: ComposeError| Outcome::NotLive {
            generation,
            error: Arc::new(error),
        };
        let snap = match (self.source)().await {
            Ok(s) => s,
            Err(e) => return (not_live(ComposeError::Source(e)), done),
        };
        // A bcrypt password (a person's) admits nobody on RabbitMQ.
        let keys: BTreeMap<String, String> = snap
            .credentials
            .iter()
            .filter_map(|(name, c)| match c {
                UserCredential::NKey(k) => Some((name.clone(), k.clone())),
                UserCredential::Password(_) => None,
            })
            .collect();
        let (wanted, omitted) =
            amqp_users::wanted(&snap.principals, &keys, &snap.hashes, &snap.objects);
        let management = self.management.clone();
        // The management API is a blocking client: off the runtime's threads.
        let applied = tokio::task::spawn_blocking(move || {
            let observed = mesh_bus::amqp::users::observe(&management)?;
            let refs: Vec<Wanted<'_>> = wanted
                .iter()
                .map(|(permissions, password_hash)| Wanted {
                    permissions,
                    password_hash,
                })
                .collect();
            let steps = amqp_users::plan(&refs, &observed);
            for step in &steps {
                tracing::debug!(step = ?step_name(step), "users on RabbitMQ");
            }
            let applied = mesh_bus::amqp::users::apply(&management, &steps)?;
            if let mesh_bus::amqp::users::Applied::OneByOne {
                import_refused: Some(why),
            } = applied
            {
                tracing::warn!(
                    steps = steps.len(),
                    error = %why,
                    "users on RabbitMQ made one by one: the definitions import was refused"
                );
            }
            Ok::<usize, mesh_bus::amqp::ManagementError>(steps.len())
        })
        .await;
        // After the users: the controller binds each queue by exactly its
        // keys, which its own rendering (just made so) must already allow.
        if matches!(applied, Ok(Ok(_)))
            && let Err(e) = (self.declare)(snap.objects.clone()).await
        {
            return (not_live(ComposeError::Declare(e)), done);
        }
        match applied {
            Ok(Ok(0)) => (
                Outcome::Unchanged {
                    generation,
                    omitted,
                },
                done,
            ),
            Ok(Ok(_)) => {
                done.written = true;
                done.confirmed = true;
                (
                    Outcome::Live {
                        generation,
                        canary: String::new(),
                        omitted,
                    },
                    done,
                )
            }
            Ok(Err(e)) => (not_live(e.into()), done),
            Err(joined) => (not_live(ComposeError::Source(Box::new(joined))), done),
        }
    }

    fn timing(&self) -> Timing {
        self.timing
    }

    fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

/// A step as a log names it (never a hash).
fn step_name(step: &amqp_users::UserStep) -> String {
    match step {
        amqp_users::UserStep::PutUser { name, .. } => format!("put user {name}"),
        amqp_users::UserStep::SetPermissions { permissions } => {
            format!("set the permissions of {}", permissions.user)
        }
        amqp_users::UserStep::DeleteUser { name } => format!("delete user {name}"),
    }
}
