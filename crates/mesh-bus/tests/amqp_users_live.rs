//! The controller's side of authority on RabbitMQ, against a real one: the
//! users planned from the records are made through the management API, a
//! second plan from what it then lists is empty, a forgotten node's user is
//! deleted and its open connection closed, a new node's user admitted, a
//! rotated hash replaces the old password alone, and a refusal of the API
//! names the user and the permission.

use std::path::Path;
use std::time::Duration;

use mesh_bus::Secret;
use mesh_bus::amqp::{AmqpConfig, ManagementError, Trust, users};
use mesh_core::authority::amqp::{self, AmqpPermissions};
use mesh_core::authority::amqp_users::{UserStep, Wanted, plan};
use mesh_core::authority::{self, CONTROLLER};
use mesh_core::jetstream;
use mesh_core::names::Name;
use mesh_core::records::{ControllerSpec, Records};
use mesh_testkit::RabbitMq;
use mesh_testkit::amqp_mesh::management;

const WAIT: Duration = Duration::from_secs(10);

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn rendered(nodes: &[&str]) -> Vec<AmqpPermissions> {
    let catalogue =
        mesh_state::load(&[Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue")])
            .unwrap()
            .catalogue;
    let records = Records {
        nodes: nodes.iter().map(|s| n(s)).collect(),
        ..Records::default()
    };
    let spec = ControllerSpec::default();
    let objects = jetstream::derive(&catalogue, &records, &spec).unwrap();
    authority::derive(&catalogue, &records, &spec)
        .unwrap()
        .iter()
        .map(|p| amqp::render(p, &objects))
        .collect()
}

/// Each user's password is its name backwards plus a round: a test's, never
/// a mesh secret.
fn password(user: &str, round: u8) -> String {
    format!("{}-{round}", user.chars().rev().collect::<String>())
}

fn hash(user: &str, round: u8) -> String {
    amqp::password_hash([round, 1, 2, 3], password(user, round).as_bytes())
}

fn config(rmq: &RabbitMq, user: &str, password: &str) -> AmqpConfig {
    AmqpConfig {
        host: "127.0.0.1".into(),
        port: rmq.amqp_port(),
        user: user.into(),
        password: Secret::new(password),
        trust: Trust::Ca(rmq.ca_pem().to_path_buf()),
    }
}

/// Plans from what the API lists now, applies, and returns the steps.
async fn converge(
    m: &mesh_bus::amqp::Management,
    wanted: Vec<(AmqpPermissions, String)>,
) -> Vec<UserStep> {
    let m = m.clone();
    tokio::task::spawn_blocking(move || {
        let w: Vec<Wanted<'_>> = wanted
            .iter()
            .map(|(p, h)| Wanted {
                permissions: p,
                password_hash: h,
            })
            .collect();
        let steps = plan(&w, &users::observe(&m).unwrap());
        let applied = users::apply(&m, &steps).unwrap();
        // More than one user or permission is one request, never refused
        // into one request each (minutes at a thousand hosts).
        let puts = steps
            .iter()
            .filter(|s| !matches!(s, UserStep::DeleteUser { .. }))
            .count();
        if puts > 1 {
            assert_eq!(applied, users::Applied::Imported, "{:?}", names(&steps));
        }
        steps
    })
    .await
    .unwrap()
}

fn with_hashes(
    r: Vec<AmqpPermissions>,
    round_of: impl Fn(&str) -> u8,
) -> Vec<(AmqpPermissions, String)> {
    r.into_iter()
        .map(|p| {
            let h = hash(&p.user, round_of(&p.user));
            (p, h)
        })
        .collect()
}

fn names(steps: &[UserStep]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            UserStep::PutUser { name, .. } => format!("put {name}"),
            UserStep::SetPermissions { permissions } => format!("set {}", permissions.user),
            UserStep::DeleteUser { name } => format!("delete {name}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_users_follow_the_records() {
    let rmq = RabbitMq::start().unwrap();
    let m = management(&rmq);

    let first = converge(&m, with_hashes(rendered(&["n1", "n2"]), |_| 1)).await;
    assert_eq!(
        names(&first),
        [
            "put controller",
            "set controller",
            "put host_n1",
            "set host_n1",
            "put host_n2",
            "set host_n2"
        ]
    );
    // What the API lists afterwards is what was planned: nothing to do.
    assert_eq!(
        converge(&m, with_hashes(rendered(&["n1", "n2"]), |_| 1)).await,
        []
    );

    let n2 = mesh_bus::amqp::connect(&config(&rmq, "host_n2", &password("host_n2", 1)))
        .await
        .unwrap();
    assert!(n2.status().connected());

    // n2 forgotten, n3 added, host_n1's hash rotated.
    let round = |u: &str| if u == "host_n1" { 2 } else { 1 };
    let second = converge(&m, with_hashes(rendered(&["n1", "n3"]), round)).await;
    // The controller's stays as it was: one shape of key binds every
    // node's queue, whichever nodes there are.
    assert_eq!(
        names(&second),
        [
            "put host_n1",
            "put host_n3",
            "set host_n3",
            "delete host_n2"
        ]
    );
    // The forgotten node's open connection is closed, and it cannot come back.
    let deadline = tokio::time::Instant::now() + WAIT;
    while n2.status().connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "host_n2 still connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = mesh_bus::amqp::connect(&config(&rmq, "host_n2", &password("host_n2", 1)))
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("ACCESS_REFUSED"),
        "{refused:?}"
    );
    for (user, pw, ok) in [
        ("host_n3", password("host_n3", 1), true),
        ("host_n1", password("host_n1", 2), true),
        ("host_n1", password("host_n1", 1), false),
        (CONTROLLER, password(CONTROLLER, 1), true),
    ] {
        let c = mesh_bus::amqp::connect(&config(&rmq, user, &pw)).await;
        assert_eq!(c.is_ok(), ok, "{user} with round {pw}: {:?}", c.err());
    }

    // A refusal names the user and what was being set.
    let mut bad = rendered(&["n1"]).remove(1);
    bad.configure = "(".into();
    let m2 = m.clone();
    let err = tokio::task::spawn_blocking(move || m2.set_permissions(&bad))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, ManagementError::Refused { status: 400, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("set the permissions of user host_n1 (configure (,"),
        "{text}"
    );
}
