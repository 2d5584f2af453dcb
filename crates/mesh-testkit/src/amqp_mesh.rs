//! A mesh's authority on a real RabbitMQ: every principal a user with a
//! password of its own and the permissions `mesh-core` renders, made through
//! the management API the controller uses (the controller an
//! administrator), then the exchange and queues declared by the controller,
//! the one principal that configures.

use std::collections::BTreeMap;

use mesh_bus::Secret;
use mesh_bus::amqp::{AmqpConfig, Management, Trust, topology};
use mesh_core::authority::{self, Principal, amqp};
use mesh_core::jetstream::Objects;
use rand::Rng as _;

use crate::RabbitMq;
use crate::rabbitmq::ADMIN;

pub struct AmqpMesh {
    pub rmq: RabbitMq,
    pub principals: Vec<Principal>,
    pub objects: Objects,
    passwords: BTreeMap<String, Secret>,
}

impl AmqpMesh {
    pub async fn start(principals: Vec<Principal>, objects: Objects) -> AmqpMesh {
        AmqpMesh::start_announced(principals, objects, BTreeMap::new()).await
    }

    /// [`AmqpMesh::start`], the users named in `announced` made with the
    /// password hash given there (what a principal announces:
    /// `mesh_bus::seam::announce` of its seed), the rest with a password
    /// of the test's. An announced user connects with its own seed; the
    /// mesh knows no password of it ([`AmqpMesh::config`] panics).
    pub async fn start_announced(
        principals: Vec<Principal>,
        objects: Objects,
        announced: BTreeMap<String, String>,
    ) -> AmqpMesh {
        let rmq = RabbitMq::start().expect("rabbitmq starts");
        let mgmt = management(&rmq);
        let rendered: Vec<_> = principals
            .iter()
            .map(|p| amqp::render(p, &objects))
            .collect();
        let passwords = tokio::task::spawn_blocking(move || {
            let mut rng = rand::rng();
            let mut out = BTreeMap::new();
            for r in &rendered {
                let hash = match announced.get(&r.user) {
                    Some(hash) => hash.clone(),
                    None => {
                        let password: String = (0..20)
                            .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
                            .collect();
                        out.insert(r.user.clone(), Secret::new(password.clone()));
                        amqp::password_hash(rng.random(), password.as_bytes())
                    }
                };
                mgmt.apply(r, &hash, r.user == authority::CONTROLLER)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            out
        })
        .await
        .expect("the users are made");
        let mesh = AmqpMesh {
            rmq,
            principals,
            objects,
            passwords,
        };
        let controller = mesh.connect(authority::CONTROLLER).await;
        let ch = controller.create_channel().await.expect("a channel");
        topology::declare(&ch, &amqp::topology(&mesh.objects))
            .await
            .unwrap_or_else(|e| panic!("the controller declares the queues: {e:?}"));
        let _ = controller.close(200, "done".into()).await;
        mesh
    }

    /// How `user` (a principal, or the test's administrator [`ADMIN`])
    /// connects.
    pub fn config(&self, user: &str) -> AmqpConfig {
        let password = match user {
            ADMIN => Secret::new(self.rmq.admin_password()),
            _ => self.passwords.get(user).cloned().unwrap_or_else(|| {
                panic!("{user} announced its own hash: it connects with its seed")
            }),
        };
        AmqpConfig {
            host: "127.0.0.1".into(),
            port: self.rmq.amqp_port(),
            user: user.into(),
            password,
            trust: Trust::Ca(self.rmq.ca_pem().to_path_buf()),
        }
    }

    pub async fn connect(&self, user: &str) -> lapin::Connection {
        mesh_bus::amqp::connect(&self.config(user))
            .await
            .unwrap_or_else(|e| panic!("{user} connects: {e:?}"))
    }
}

/// The management API as the test's administrator.
pub fn management(rmq: &RabbitMq) -> Management {
    Management::new(
        &rmq.management_url(),
        ADMIN,
        &Secret::new(rmq.admin_password()),
        rmq.ca_pem(),
    )
    .expect("the management API's client")
}
