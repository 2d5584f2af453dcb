//! RabbitMQ's own configuration as a mesh runs it: TLS only, the
//! management API on loopback, no `guest` (a definitions file given at boot
//! replaces the default user), and one administrator made from a password
//! hash. Written by genesis for a mesh on AMQP and by the test kit for its
//! brokers, from this one place.

use std::path::Path;

use mesh_core::authority::amqp::PASSWORD_HASHING;

/// The plugins it runs: the management API.
pub const ENABLED_PLUGINS: &str = "[rabbitmq_management].\n";

/// Where its listeners are and which files it reads.
pub struct BrokerFiles<'a> {
    /// `PORT` (every interface) or `127.0.0.1:PORT`.
    pub listen: String,
    pub ca: &'a Path,
    pub cert: &'a Path,
    pub key: &'a Path,
    /// The management API's port, on 127.0.0.1.
    pub management_port: u16,
    pub definitions: &'a Path,
    /// How long a delivery may stay unacknowledged before RabbitMQ closes
    /// its channel.
    pub consumer_timeout_ms: u64,
}

/// `rabbitmq.conf` (sysctl format).
pub fn config(f: &BrokerFiles<'_>) -> String {
    format!(
        "listeners.tcp = none\n\
         listeners.ssl.default = {listen}\n\
         ssl_options.cacertfile = {ca}\n\
         ssl_options.certfile = {cert}\n\
         ssl_options.keyfile = {key}\n\
         ssl_options.verify = verify_none\n\
         ssl_options.fail_if_no_peer_cert = false\n\
         management.ssl.port = {mgmt}\n\
         management.ssl.ip = 127.0.0.1\n\
         management.ssl.cacertfile = {ca}\n\
         management.ssl.certfile = {cert}\n\
         management.ssl.keyfile = {key}\n\
         loopback_users = none\n\
         consumer_timeout = {timeout}\n\
         load_definitions = {defs}\n\
         log.console = true\n\
         log.file = false\n",
        listen = f.listen,
        ca = f.ca.display(),
        cert = f.cert.display(),
        key = f.key.display(),
        mgmt = f.management_port,
        timeout = f.consumer_timeout_ms,
        defs = f.definitions.display(),
    )
}

/// The definitions loaded at every boot: one administrator, `user`, made
/// from `password_hash`, with every permission on `/` (its first
/// composition narrows the controller's to its rendering).
pub fn definitions(user: &str, password_hash: &str) -> serde_json::Value {
    serde_json::json!({
        "users": [{
            "name": user,
            "password_hash": password_hash,
            "hashing_algorithm": PASSWORD_HASHING,
            "tags": ["administrator"],
        }],
        "vhosts": [{ "name": "/" }],
        "permissions": [{
            "user": user, "vhost": "/",
            "configure": ".*", "write": ".*", "read": ".*",
        }],
    })
}
