//! What the controller changes in RabbitMQ's users so that they are exactly
//! the derived principals (DESIGN "the bus seam"), decided from the rendered
//! permissions, the password hashes the principals announced and what the
//! management API lists — the AMQP counterpart of composing the users file.
//! The executor (`mesh_bus::amqp::users`) carries the steps out in order and
//! decides nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::amqp::AmqpPermissions;
use super::{CONTROLLER, SEPARATOR};
use crate::jetstream::Objects;

/// A user as the management API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObservedUser {
    pub name: String,
    pub password_hash: String,
    pub administrator: bool,
    /// Its vhost permissions, `None` when it has none.
    pub permissions: Option<[String; 3]>,
    /// Its topic permissions on the mesh's exchange: write, read.
    pub topic: Option<[String; 2]>,
}

/// A principal to be a user: its permissions and the hash it announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub permissions: &'a AmqpPermissions,
    pub password_hash: &'a str,
}

/// One change, in the order it must be made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum UserStep {
    /// Make the user, or change its hash or tag. Before its permissions: a
    /// user with no permissions can do nothing.
    PutUser {
        name: String,
        password_hash: String,
        administrator: bool,
    },
    /// Set its vhost and topic permissions as rendered.
    SetPermissions { permissions: AmqpPermissions },
    /// A user no principal is any more (a forgotten node, a spent token).
    DeleteUser { name: String },
}

/// Whether a user name is one the mesh gives (so one it may remove): the
/// controller, or a kind's prefix and the separator. Anyone else (the
/// broker's own administrator) is left alone.
pub fn is_mesh_user(name: &str) -> bool {
    name == CONTROLLER
        || ["host", "module", "enrol", "person", "login"]
            .iter()
            .any(|kind| name.starts_with(&format!("{kind}{SEPARATOR}")))
}

/// The steps that make the broker's users the wanted ones: the controller's
/// first (so the composer never locks itself out), then the others by name;
/// removals last (a principal renamed keeps working until its new user
/// exists). Nothing already so is touched.
pub fn plan(wanted: &[Wanted<'_>], observed: &[ObservedUser]) -> Vec<UserStep> {
    let seen: BTreeMap<&str, &ObservedUser> =
        observed.iter().map(|u| (u.name.as_str(), u)).collect();
    let mut order: Vec<&Wanted<'_>> = wanted.iter().collect();
    order.sort_by_key(|w| {
        (
            w.permissions.user != CONTROLLER,
            w.permissions.user.as_str(),
        )
    });
    let mut steps = Vec::new();
    for w in order {
        let p = w.permissions;
        let administrator = p.user == CONTROLLER;
        let now = seen.get(p.user.as_str());
        let user_same = now.is_some_and(|u| {
            u.password_hash == w.password_hash && u.administrator == administrator
        });
        if !user_same {
            steps.push(UserStep::PutUser {
                name: p.user.clone(),
                password_hash: w.password_hash.to_string(),
                administrator,
            });
        }
        let wanted_perms = [p.configure.clone(), p.write.clone(), p.read.clone()];
        let wanted_topic = [p.topic_write.clone(), p.topic_read.clone()];
        let perms_same = now.is_some_and(|u| {
            u.permissions.as_ref() == Some(&wanted_perms) && u.topic.as_ref() == Some(&wanted_topic)
        });
        if !perms_same {
            steps.push(UserStep::SetPermissions {
                permissions: p.clone(),
            });
        }
    }
    let keep: BTreeSet<&str> = wanted.iter().map(|w| w.permissions.user.as_str()).collect();
    let mut gone: Vec<&str> = observed
        .iter()
        .map(|u| u.name.as_str())
        .filter(|n| is_mesh_user(n) && !keep.contains(n))
        .collect();
    gone.sort();
    steps.extend(gone.into_iter().map(|n| UserStep::DeleteUser {
        name: n.to_string(),
    }));
    steps
}

/// Each derived principal rendered, with the hash its recorded key
/// (`keys`: principal → NKey public key) announced; the others named, left
/// out (no key recorded, a person's password, no hash announced yet: an
/// ordinary state, as a principal with no credential is on NATS).
pub fn wanted(
    principals: &[super::Principal],
    keys: &BTreeMap<String, String>,
    hashes: &BTreeMap<String, String>,
    objects: &Objects,
) -> (Vec<(AmqpPermissions, String)>, Vec<String>) {
    let mut wanted = Vec::new();
    let mut omitted = Vec::new();
    for p in principals {
        let hash = keys.get(&p.name).and_then(|key| hashes.get(key));
        match hash {
            Some(h) => wanted.push((super::amqp::render(p, objects), h.clone())),
            None => omitted.push(p.name.clone()),
        }
    }
    (wanted, omitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(user: &str, topic_write: &str) -> AmqpPermissions {
        AmqpPermissions {
            user: user.into(),
            configure: "^$".into(),
            write: "^(mesh)$".into(),
            read: "^$".into(),
            topic_write: topic_write.into(),
            topic_read: "^$".into(),
            renderings: Vec::new(),
        }
    }

    fn observed(p: &AmqpPermissions, hash: &str) -> ObservedUser {
        ObservedUser {
            name: p.user.clone(),
            password_hash: hash.into(),
            administrator: p.user == CONTROLLER,
            permissions: Some([p.configure.clone(), p.write.clone(), p.read.clone()]),
            topic: Some([p.topic_write.clone(), p.topic_read.clone()]),
        }
    }

    fn w<'a>(p: &'a AmqpPermissions, hash: &'a str) -> Wanted<'a> {
        Wanted {
            permissions: p,
            password_hash: hash,
        }
    }

    #[test]
    fn a_new_mesh_makes_the_controller_first_then_each_user_then_its_permissions() {
        let c = perms(CONTROLLER, "^(a)$");
        let h = perms("host_n1", "^(b)$");
        let steps = plan(&[w(&h, "hh"), w(&c, "ch")], &[]);
        let names: Vec<String> = steps
            .iter()
            .map(|s| match s {
                UserStep::PutUser {
                    name,
                    administrator,
                    ..
                } => format!("put {name} {administrator}"),
                UserStep::SetPermissions { permissions } => format!("perms {}", permissions.user),
                UserStep::DeleteUser { name } => format!("delete {name}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "put controller true",
                "perms controller",
                "put host_n1 false",
                "perms host_n1"
            ]
        );
    }

    #[test]
    fn what_is_already_so_is_not_touched() {
        let c = perms(CONTROLLER, "^(a)$");
        let h = perms("host_n1", "^(b)$");
        let now = [observed(&c, "ch"), observed(&h, "hh")];
        assert_eq!(plan(&[w(&c, "ch"), w(&h, "hh")], &now), []);
    }

    #[test]
    fn a_changed_hash_tag_permission_or_topic_is_set_again_alone() {
        let h = perms("host_n1", "^(b)$");
        let put = UserStep::PutUser {
            name: "host_n1".into(),
            password_hash: "new".into(),
            administrator: false,
        };
        assert_eq!(plan(&[w(&h, "new")], &[observed(&h, "old")]), [put]);
        let mut tagged = observed(&h, "hh");
        tagged.administrator = true;
        assert!(matches!(
            plan(&[w(&h, "hh")], &[tagged]).as_slice(),
            [UserStep::PutUser {
                administrator: false,
                ..
            }]
        ));
        let set = UserStep::SetPermissions {
            permissions: h.clone(),
        };
        let mut wider = observed(&h, "hh");
        wider.permissions = Some(["^$".into(), ".*".into(), "^$".into()]);
        assert_eq!(plan(&[w(&h, "hh")], &[wider]), std::slice::from_ref(&set));
        let mut topic = observed(&h, "hh");
        topic.topic = Some([".*".into(), "^$".into()]);
        assert_eq!(plan(&[w(&h, "hh")], &[topic]), std::slice::from_ref(&set));
        let mut none = observed(&h, "hh");
        none.topic = None;
        assert_eq!(plan(&[w(&h, "hh")], &[none]), [set]);
    }

    #[test]
    fn a_user_no_principal_is_goes_and_the_brokers_own_stay() {
        let c = perms(CONTROLLER, "^(a)$");
        let now = [
            observed(&c, "ch"),
            observed(&perms("host_n9", "^$"), "x"),
            observed(&perms("enrol_n4", "^$"), "x"),
            observed(&perms("observer", "^$"), "x"),
            observed(&perms("hostile", "^$"), "x"),
        ];
        assert_eq!(
            plan(&[w(&c, "ch")], &now),
            [
                UserStep::DeleteUser {
                    name: "enrol_n4".into()
                },
                UserStep::DeleteUser {
                    name: "host_n9".into()
                },
            ]
        );
    }

    #[test]
    fn mesh_users_are_named_by_the_principal_scheme() {
        for yes in [
            "controller",
            "host_n1",
            "module_n1_a",
            "enrol_n1",
            "person_ada",
            "login_ada",
        ] {
            assert!(is_mesh_user(yes), "{yes}");
        }
        for no in [
            "observer",
            "guest",
            "host",
            "hostn1",
            "controllers",
            "admin_x",
        ] {
            assert!(!is_mesh_user(no), "{no}");
        }
    }
}
