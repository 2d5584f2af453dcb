//! RabbitMQ's management HTTP API, the one place its users and permissions
//! can be made (AMQP itself has no verb for them). Blocking: the controller
//! calls it from a blocking task, rarely (when the records change).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use mesh_core::authority::amqp::{AmqpPermissions, EXCHANGE, PASSWORD_HASHING};
use ureq::Agent;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

use crate::Secret;

/// The mesh's one virtual host.
const VHOST: &str = "%2F";

/// A management API answer slower than this is the server's failure.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ManagementError {
    #[error("could not read the CA certificate {path}")]
    Ca {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate; give the CA the broker's certificate is signed by")]
    NoCertificate { path: PathBuf },
    #[error(
        "the management API refused to {action} (HTTP {status}: {reason}){}",
        if matches!(status, 401 | 403) { "; the user it is called as needs the administrator tag" } else { "" }
    )]
    Refused {
        action: String,
        status: u16,
        reason: String,
    },
    #[error("could not reach the management API at {url} to {action}")]
    Unreachable {
        url: String,
        action: String,
        #[source]
        source: ureq::Error,
    },
    #[error("{0:?} is not a name the mesh gives a RabbitMQ user")]
    BadName(String),
}

/// A client of one server's management API, as one administrator.
#[derive(Clone)]
pub struct Management {
    url: String,
    authorization: Arc<Secret>,
    agent: Agent,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("url", &self.url)
            .finish()
    }
}

impl Management {
    /// `url` is `https://host:port`; `ca_file` the CA its certificate chains to.
    pub fn new(
        url: &str,
        user: &str,
        password: &Secret,
        ca_file: &Path,
    ) -> Result<Self, ManagementError> {
        let pem = std::fs::read(ca_file).map_err(|source| ManagementError::Ca {
            path: ca_file.to_path_buf(),
            source,
        })?;
        let ca = Certificate::from_pem(&pem).map_err(|_| ManagementError::NoCertificate {
            path: ca_file.to_path_buf(),
        })?;
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::Specific(Arc::new(vec![ca])))
            .build();
        let agent = Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            // A connection per request: the API's server closes an idle
            // one without a word, and a request sent down it fails
            // (requests are few: a composition is four or five).
            .max_idle_connections(0)
            .build()
            .new_agent();
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{user}:{}", password.expose()));
        Ok(Management {
            url: url.trim_end_matches('/').to_string(),
            authorization: Arc::new(Secret::new(format!("Basic {token}"))),
            agent,
        })
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
        action: impl Fn() -> String,
    ) -> Result<String, ManagementError> {
        let url = format!("{}/api/{path}", self.url);
        let unreachable = |source| ManagementError::Unreachable {
            url: self.url.clone(),
            action: action(),
            source,
        };
        let auth = self.authorization.expose();
        let result = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("authorization", auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("authorization", auth).call(),
            // A definitions import is a POST (the API answers a PUT there
            // 405); a user or a permission is a PUT.
            ("POST", Some(body)) => self
                .agent
                .post(&url)
                .header("authorization", auth)
                .send_json(body),
            (_, Some(body)) => self
                .agent
                .put(&url)
                .header("authorization", auth)
                .send_json(body),
            (_, None) => self
                .agent
                .put(&url)
                .header("authorization", auth)
                .send_empty(),
        };
        let mut response = result.map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(unreachable)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        // The API answers {"error": .., "reason": ..}.
        let reason = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(String::from))
            .unwrap_or_else(|| mesh_core::diagnostic::clip(&text, 200).to_string());
        Err(ManagementError::Refused {
            action: action(),
            status,
            reason,
        })
    }

    /// Makes or changes a user: its password hash (never a password) and
    /// whether it may use this API (the controller alone).
    pub fn put_user(
        &self,
        name: &str,
        password_hash: &str,
        administrator: bool,
    ) -> Result<(), ManagementError> {
        let name = checked(name)?;
        let body = serde_json::json!({
            "password_hash": password_hash,
            "hashing_algorithm": PASSWORD_HASHING,
            "tags": if administrator { "administrator" } else { "" },
        });
        self.send("PUT", &format!("users/{name}"), Some(body), || {
            format!("make user {name}")
        })?;
        Ok(())
    }

    /// Sets a user's vhost and topic permissions, as rendered.
    pub fn set_permissions(&self, p: &AmqpPermissions) -> Result<(), ManagementError> {
        let name = checked(&p.user)?;
        let body = serde_json::json!({
            "configure": p.configure, "write": p.write, "read": p.read,
        });
        self.send(
            "PUT",
            &format!("permissions/{VHOST}/{name}"),
            Some(body),
            || {
                format!(
                    "set the permissions of user {name} (configure {}, write {}, read {})",
                    p.configure, p.write, p.read
                )
            },
        )?;
        let body = serde_json::json!({
            "exchange": EXCHANGE, "write": p.topic_write, "read": p.topic_read,
        });
        self.send(
            "PUT",
            &format!("topic-permissions/{VHOST}/{name}"),
            Some(body),
            || {
                format!(
                    "set the topic permissions of user {name} on exchange {EXCHANGE} (write {}, read {})",
                    p.topic_write, p.topic_read
                )
            },
        )?;
        Ok(())
    }

    /// A user made (or changed) with its permissions, in that order: a user
    /// with no permissions yet can do nothing.
    pub fn apply(
        &self,
        p: &AmqpPermissions,
        password_hash: &str,
        administrator: bool,
    ) -> Result<(), ManagementError> {
        self.put_user(&p.user, password_hash, administrator)?;
        self.set_permissions(p)
    }

    /// Many users and their permissions in one request (RabbitMQ's
    /// definitions import): at a thousand hosts, three requests per user
    /// kept every host waiting minutes for its own. Each user is made
    /// before any permission, as one by one.
    pub fn import(
        &self,
        users: &[(&str, &str, bool)],
        permissions: &[&AmqpPermissions],
    ) -> Result<(), ManagementError> {
        for (name, _, _) in users {
            checked(name)?;
        }
        for p in permissions {
            checked(&p.user)?;
        }
        let body = serde_json::json!({
            "users": users.iter().map(|(name, hash, administrator)| serde_json::json!({
                "name": name,
                "password_hash": hash,
                "hashing_algorithm": PASSWORD_HASHING,
                "tags": if *administrator { "administrator" } else { "" },
            })).collect::<Vec<_>>(),
            "permissions": permissions.iter().map(|p| serde_json::json!({
                "user": p.user, "vhost": "/",
                "configure": p.configure, "write": p.write, "read": p.read,
            })).collect::<Vec<_>>(),
            "topic_permissions": permissions.iter().map(|p| serde_json::json!({
                "user": p.user, "vhost": "/", "exchange": EXCHANGE,
                "write": p.topic_write, "read": p.topic_read,
            })).collect::<Vec<_>>(),
        });
        self.send("POST", "definitions", Some(body), || {
            format!(
                "import {} users and {} users' permissions",
                users.len(),
                permissions.len()
            )
        })?;
        Ok(())
    }

    pub fn delete_user(&self, name: &str) -> Result<(), ManagementError> {
        let name = checked(name)?;
        self.send("DELETE", &format!("users/{name}"), None, || {
            format!("delete user {name}")
        })?;
        Ok(())
    }

    /// The user of each open connection, as the management API lists them
    /// (its view lags the server by the statistics interval, 5 s).
    pub fn connection_users(&self) -> Result<Vec<String>, ManagementError> {
        #[derive(serde::Deserialize)]
        struct Connection {
            #[serde(default)]
            user: String,
        }
        let open: Vec<Connection> = self.get("connections?columns=user", "list the connections")?;
        Ok(open.into_iter().map(|c| c.user).collect())
    }

    /// How many consumers each queue has, by name.
    pub fn queue_consumers(
        &self,
    ) -> Result<std::collections::BTreeMap<String, u64>, ManagementError> {
        #[derive(serde::Deserialize)]
        struct Queue {
            name: String,
            #[serde(default)]
            consumers: u64,
        }
        let queues: Vec<Queue> = self.get("queues?columns=name,consumers", "list the queues")?;
        Ok(queues.into_iter().map(|q| (q.name, q.consumers)).collect())
    }

    /// A GET whose answer is JSON of type `T`.
    pub(crate) fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        action: &str,
    ) -> Result<T, ManagementError> {
        let text = self.send("GET", path, None, || action.to_string())?;
        serde_json::from_str(&text).map_err(|e| ManagementError::Refused {
            action: action.into(),
            status: 200,
            reason: format!("an answer not as documented: {e}"),
        })
    }
}

/// Principal names are one token of letters, digits, `-` and `_`: nothing
/// to escape in a path, and anything else is not a mesh user.
fn checked(name: &str) -> Result<&str, ManagementError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(ManagementError::BadName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_could_change_the_path_is_refused() {
        for bad in ["", "a/b", "..", "a%2Fb", "a b", "a?x"] {
            assert!(
                matches!(checked(bad), Err(ManagementError::BadName(_))),
                "{bad}"
            );
        }
        assert_eq!(
            checked("module_n1_audit-log").unwrap(),
            "module_n1_audit-log"
        );
    }
}
