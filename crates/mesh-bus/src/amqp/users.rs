//! Carries out [`mesh_core::authority::amqp_users::plan`]: reads the users as
//! the management API lists them, and makes each step, in order. Decides
//! nothing.

use std::collections::BTreeMap;

use mesh_core::authority::amqp::EXCHANGE;
use mesh_core::authority::amqp_users::{ObservedUser, UserStep};
use serde::Deserialize;

use super::{Management, ManagementError};

#[derive(Deserialize)]
struct User {
    name: String,
    password_hash: String,
    tags: Tags,
}

/// 3.10 lists tags as an array; older servers as one comma-separated string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Tags {
    List(Vec<String>),
    Text(String),
}

impl Tags {
    fn administrator(&self) -> bool {
        match self {
            Tags::List(v) => v.iter().any(|t| t == "administrator"),
            Tags::Text(t) => t.split(',').any(|t| t.trim() == "administrator"),
        }
    }
}

#[derive(Deserialize)]
struct Permission {
    user: String,
    vhost: String,
    configure: String,
    write: String,
    read: String,
}

#[derive(Deserialize)]
struct TopicPermission {
    user: String,
    vhost: String,
    exchange: String,
    write: String,
    read: String,
}

/// Every user, with its permissions on the mesh's vhost and exchange.
pub fn observe(m: &Management) -> Result<Vec<ObservedUser>, ManagementError> {
    let users: Vec<User> = m.get("users", "list the users")?;
    let perms: Vec<Permission> = m.get("permissions", "list the permissions")?;
    let topics: Vec<TopicPermission> = m.get("topic-permissions", "list the topic permissions")?;
    let mut by_user: BTreeMap<String, ObservedUser> = users
        .into_iter()
        .map(|u| {
            let administrator = u.tags.administrator();
            (
                u.name.clone(),
                ObservedUser {
                    name: u.name,
                    password_hash: u.password_hash,
                    administrator,
                    permissions: None,
                    topic: None,
                },
            )
        })
        .collect();
    for p in perms.into_iter().filter(|p| p.vhost == "/") {
        if let Some(u) = by_user.get_mut(&p.user) {
            u.permissions = Some([p.configure, p.write, p.read]);
        }
    }
    for t in topics
        .into_iter()
        .filter(|t| t.vhost == "/" && t.exchange == EXCHANGE)
    {
        if let Some(u) = by_user.get_mut(&t.user) {
            u.topic = Some([t.write, t.read]);
        }
    }
    Ok(by_user.into_values().collect())
}

/// How [`apply`] made the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The users and permissions in one definitions import, then the
    /// deletions.
    Imported,
    /// Each step its own request: a plan of one step, or an import the
    /// API refused (its answer, for the log: a thousand users made one by
    /// one take minutes).
    OneByOne { import_refused: Option<String> },
}

/// Makes the steps: the users and permissions in one import, then the
/// deletions (last, as planned). An import the broker refuses is made again
/// step by step, so the refusal names the user and the permission.
pub fn apply(m: &Management, steps: &[UserStep]) -> Result<Applied, ManagementError> {
    let users: Vec<(&str, &str, bool)> = steps
        .iter()
        .filter_map(|s| match s {
            UserStep::PutUser {
                name,
                password_hash,
                administrator,
            } => Some((name.as_str(), password_hash.as_str(), *administrator)),
            _ => None,
        })
        .collect();
    let permissions: Vec<_> = steps
        .iter()
        .filter_map(|s| match s {
            UserStep::SetPermissions { permissions } => Some(permissions),
            _ => None,
        })
        .collect();
    let mut import_refused = None;
    if (users.len() + permissions.len()) > 1 {
        match m.import(&users, &permissions) {
            Ok(()) => return delete(m, steps).map(|()| Applied::Imported),
            Err(e @ ManagementError::Refused { .. }) => import_refused = Some(e.to_string()),
            Err(e) => return Err(e),
        }
    }
    one_by_one(m, steps).map(|()| Applied::OneByOne { import_refused })
}

fn delete(m: &Management, steps: &[UserStep]) -> Result<(), ManagementError> {
    for step in steps {
        if let UserStep::DeleteUser { name } = step {
            m.delete_user(name)?;
        }
    }
    Ok(())
}

/// Each step in order, each its own request.
fn one_by_one(m: &Management, steps: &[UserStep]) -> Result<(), ManagementError> {
    for step in steps {
        match step {
            UserStep::PutUser {
                name,
                password_hash,
                administrator,
            } => m.put_user(name, password_hash, *administrator)?,
            UserStep::SetPermissions { permissions } => m.set_permissions(permissions)?,
            // The broker closes a deleted user's open connections itself
            // (amqp_users_live watches one close).
            UserStep::DeleteUser { name } => m.delete_user(name)?,
        }
    }
    Ok(())
}
