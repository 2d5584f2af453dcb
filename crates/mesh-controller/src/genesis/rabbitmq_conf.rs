//! The broker's own configuration on a mesh whose bus is RabbitMQ (DESIGN
//! "the bus seam"): one server, TLS only with the genesis's certificate, the
//! management API on loopback for the controller alone, and at boot one user
//! — the controller, an administrator made from the hash of the password its
//! NKey seed makes. No `guest`: a definitions file given at boot replaces
//! the default user. Ports of its own for the Erlang port mapper and its
//! distribution, so two meshes (or a system RabbitMQ) on one machine meet
//! nowhere.

use std::path::Path;

use mesh_bus::amqp::broker;
use mesh_core::authority::{CONTROLLER, amqp};
use serde::{Deserialize, Serialize};

use super::{BROKER_CERT, BROKER_KEY, CA_CERT, GenesisError};

/// RabbitMQ's configuration (sysctl format).
pub const RABBITMQ_CONF: &str = "broker/rabbitmq.conf";
/// What RabbitMQ loads at every boot: the controller's user.
pub const RABBITMQ_DEFINITIONS: &str = "broker/definitions.json";
/// The plugins it runs: the management API.
pub const RABBITMQ_PLUGINS: &str = "broker/enabled_plugins";
/// Its data (Mnesia, message store), logs and Erlang cookie.
pub const RABBITMQ_DIR: &str = "rabbitmq";

/// How long a delivery may stay unacknowledged before RabbitMQ closes its
/// channel: above the store window's default bound (an hour), for which the
/// controller holds a report it retries. RabbitMQ's own default is 30 min.
pub const CONSUMER_TIMEOUT_MS: u64 = 2 * 3600 * 1000;

/// A RabbitMQ broker's ports beside its AMQP port: the management API
/// (loopback only), the Erlang port mapper and the node's distribution port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpPorts {
    pub management: u16,
    pub epmd: u16,
    pub dist: u16,
}

impl AmqpPorts {
    /// RabbitMQ's convention from the AMQP port (5671 → 15671), and the
    /// mapper and distribution ports above it; refused when they do not fit.
    pub fn after(port: u16) -> Result<AmqpPorts, GenesisError> {
        let at = |offset: u32| {
            u16::try_from(u32::from(port) + offset).map_err(|_| GenesisError::AmqpPorts {
                port,
                why: format!(
                    "the ports RabbitMQ needs beside it ({}…) pass 65535; give a --port of 35535 or less, or --management-port, --epmd-port and --dist-port",
                    u32::from(port) + 10000
                ),
            })
        };
        Ok(AmqpPorts {
            management: at(10000)?,
            epmd: at(30000)?,
            dist: at(20000)?,
        })
    }

    /// Refuses ports that meet each other or the AMQP port.
    pub fn check(&self, port: u16) -> Result<(), GenesisError> {
        let all = [port, self.management, self.epmd, self.dist];
        for (i, a) in all.iter().enumerate() {
            if *a == 0 || all[i + 1..].contains(a) {
                return Err(GenesisError::AmqpPorts {
                    port,
                    why: format!(
                        "RabbitMQ's ports must be four different ones, none 0 (AMQP {port}, management {}, port mapper {}, distribution {})",
                        self.management, self.epmd, self.dist
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The files of a RabbitMQ broker, by path relative to the state directory
/// `dir` (absolute inside: RabbitMQ resolves paths against its working
/// directory). `listen_all`: nodes on other machines reach it.
pub(super) fn files(
    dir: &Path,
    port: u16,
    ports: &AmqpPorts,
    listen_all: bool,
    controller_seed: &str,
) -> Vec<(&'static str, String)> {
    let listen = if listen_all {
        port.to_string()
    } else {
        format!("127.0.0.1:{port}")
    };
    let conf = format!(
        "# Written by mesh init. TLS only, the genesis's certificate; no guest.\n{}",
        broker::config(&broker::BrokerFiles {
            listen,
            ca: &dir.join(CA_CERT),
            cert: &dir.join(BROKER_CERT),
            key: &dir.join(BROKER_KEY),
            management_port: ports.management,
            definitions: &dir.join(RABBITMQ_DEFINITIONS),
            consumer_timeout_ms: CONSUMER_TIMEOUT_MS,
        })
    );
    // The hash the controller records for itself at start: the same, so its
    // first composition leaves its user as the broker made it.
    let definitions = broker::definitions(CONTROLLER, &amqp::announced_hash(controller_seed));
    vec![
        (RABBITMQ_CONF, conf),
        (
            RABBITMQ_DEFINITIONS,
            format!(
                "{}\n",
                serde_json::to_string_pretty(&definitions).expect("JSON")
            ),
        ),
        (RABBITMQ_PLUGINS, broker::ENABLED_PLUGINS.to_string()),
    ]
}

/// The environment `rabbitmq-server` runs in for the genesis in `dir`:
/// every path inside the state directory, the node's own name and ports.
pub fn env(dir: &Path, ports: &AmqpPorts) -> Vec<(&'static str, std::ffi::OsString)> {
    let data = dir.join(RABBITMQ_DIR);
    let os = |p: std::path::PathBuf| p.into_os_string();
    vec![
        // Its own mapper's port, so the name meets no other node's.
        ("RABBITMQ_NODENAME", "mesh@localhost".into()),
        ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".into()),
        ("RABBITMQ_CONFIG_FILE", os(dir.join(RABBITMQ_CONF))),
        (
            "RABBITMQ_ENABLED_PLUGINS_FILE",
            os(dir.join(RABBITMQ_PLUGINS)),
        ),
        ("RABBITMQ_MNESIA_BASE", os(data.join("mnesia"))),
        ("RABBITMQ_LOG_BASE", os(data.join("log"))),
        (
            "RABBITMQ_FEATURE_FLAGS_FILE",
            os(data.join("feature_flags")),
        ),
        ("RABBITMQ_PLUGINS_EXPAND_DIR", os(data.join("plugins"))),
        ("RABBITMQ_PID_FILE", os(data.join("pid"))),
        ("RABBITMQ_DIST_PORT", ports.dist.to_string().into()),
        // Its distribution and its port mapper on loopback: nothing of the
        // Erlang VM is reachable from another machine (its cookie alone
        // would guard it there).
        (
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}".into(),
        ),
        ("ERL_EPMD_ADDRESS", "127.0.0.1".into()),
        ("ERL_EPMD_PORT", ports.epmd.to_string().into()),
        // The Erlang cookie is written to $HOME.
        ("HOME", os(data)),
    ]
}
