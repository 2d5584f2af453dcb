//! The broker's own configuration: one server, or each server of a cluster.
//!
//! A single server keeps the layout every mesh had before clusters
//! ([`BROKER_CONF`], [`BROKER_PID`], [`JETSTREAM_DIR`]). A cluster of N
//! servers has, per server i, `broker/nats-i.conf`, `broker/nats-i.pid` and
//! the store `jetstream/server-i`; all of them include the one users file
//! beside them, so one composition admits the same principals everywhere.
//!
//! Ports of a cluster:
//! - all servers on this machine (no address given): server i (1-based)
//!   serves clients on 127.0.0.1 at `port + i - 1` and routes at
//!   `port + N + i - 1`, so the route ports follow the client ports and never
//!   meet them;
//! - one server per address: server i listens on every interface at `port`
//!   on machine i and routes at [`CLUSTER_PORT`] there, the port NATS routes
//!   on by convention (what a firewall rule for a NATS cluster opens).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;

use super::{
    BROKER_CERT, BROKER_CONF, BROKER_KEY, BROKER_PID, CA_CERT, GenesisError, JETSTREAM_DIR,
};

/// Where each server of a cluster spread over machines routes.
pub const CLUSTER_PORT: u16 = 6222;
/// The cluster's name: every server must give the same one.
const CLUSTER_NAME: &str = "mesh";
/// The most servers a cluster may have: a cluster acts while a majority is
/// up, and more servers make every write wait for more of them.
pub const MAX_REPLICAS: u8 = 7;

/// One server of the broker, as genesis lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `mesh-<i>` in a cluster (its JetStream peer name); a single server's
    /// configuration names none.
    pub name: Option<String>,
    /// Its configuration, relative to the state directory.
    pub conf: String,
    /// Its pid file, written by the server, relative to the state directory.
    pub pid_file: String,
    /// Its JetStream store, relative to the state directory.
    pub store_dir: String,
    /// The interface it serves clients on (`127.0.0.1` or `0.0.0.0`).
    pub host: &'static str,
    /// Its client port.
    pub port: u16,
    /// Its side of the cluster; `None` for a single server.
    pub route: Option<Route>,
    /// The address of the machine it runs on, in a cluster over machines;
    /// `None` when it runs on this one (or is a single server).
    pub machine: Option<String>,
    /// How this machine reaches it.
    pub local_url: String,
}

/// Where a server of a cluster listens for its peers, and how they reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `host:port` of its route listener.
    pub listen: String,
    /// Its route port.
    pub port: u16,
    /// `nats-route://host:port`: what every other server routes to.
    pub url: String,
}

/// `host:port`, an IPv6 address in brackets.
fn host_port(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// `scheme://host:port`, an IPv6 address in brackets.
pub(super) fn url(scheme: &str, host: &str, port: u16) -> String {
    format!("{scheme}://{}", host_port(host, port))
}

/// The servers of a broker of `replicas` servers at client port `port`;
/// `addresses` are the genesis's (already checked by [`check_cluster`]).
pub(super) fn servers(port: u16, addresses: &[String], replicas: u8) -> Vec<Server> {
    if replicas <= 1 {
        // Every interface once other addresses are named, or the nodes
        // given them would find nothing listening there.
        let host = if addresses.is_empty() {
            "127.0.0.1"
        } else {
            "0.0.0.0"
        };
        return vec![Server {
            name: None,
            conf: BROKER_CONF.into(),
            pid_file: BROKER_PID.into(),
            store_dir: JETSTREAM_DIR.into(),
            host,
            port,
            route: None,
            machine: None,
            local_url: url("tls", "127.0.0.1", port),
        }];
    }
    let n = u16::from(replicas);
    (1..=replicas)
        .map(|i| {
            let k = u16::from(i) - 1;
            let (host, client_port, machine, route_port) = match addresses.get(usize::from(k)) {
                Some(a) => ("0.0.0.0", port, a.as_str(), CLUSTER_PORT),
                // Checked at genesis: `port + 2n - 1` fits in a port.
                None => ("127.0.0.1", port + k, "127.0.0.1", port + n + k),
            };
            Server {
                name: Some(format!("mesh-{i}")),
                conf: format!("broker/nats-{i}.conf"),
                pid_file: format!("broker/nats-{i}.pid"),
                store_dir: format!("{JETSTREAM_DIR}/server-{i}"),
                host,
                port: client_port,
                route: Some(Route {
                    listen: format!("{host}:{route_port}"),
                    port: route_port,
                    url: url("nats-route", machine, route_port),
                }),
                machine: addresses.get(usize::from(k)).cloned(),
                local_url: url("tls", machine, client_port),
            }
        })
        .collect()
}

/// Refuses a cluster genesis cannot lay out, before anything is written.
/// `given` are the addresses as given, `unique` as [`super::unique_addresses`]
/// keeps them.
pub(super) fn check_cluster(
    port: u16,
    replicas: u8,
    given: &[String],
    unique: &[String],
) -> Result<(), GenesisError> {
    if replicas == 0 || replicas > MAX_REPLICAS || replicas.is_multiple_of(2) {
        return Err(GenesisError::BadReplicas(replicas));
    }
    if replicas == 1 {
        return Ok(());
    }
    let bad_port = |why: String| GenesisError::ClusterPort {
        port,
        replicas,
        why,
    };
    if given.is_empty() {
        let last = u32::from(port) + 2 * u32::from(replicas) - 1;
        if port == 0 || last > u32::from(u16::MAX) {
            return Err(bad_port(format!(
                "on this machine its servers take client ports from --port on and route ports after them, {port} to {last}, which must lie within 1 to 65535"
            )));
        }
        return Ok(());
    }
    if given.len() != usize::from(replicas) {
        return Err(GenesisError::ReplicaAddresses {
            replicas,
            given: given.len(),
        });
    }
    if unique.len() != given.len() {
        // The first address unique_addresses dropped: a repeat, or loopback.
        let mut kept = unique.iter();
        let mut next = kept.next();
        for a in given {
            if next.is_some_and(|k| k.eq_ignore_ascii_case(a)) {
                next = kept.next();
            } else {
                return Err(GenesisError::ServerAddress { address: a.clone() });
            }
        }
    }
    if port == 0 || port == CLUSTER_PORT {
        return Err(bad_port(format!(
            "each server serves clients at it and routes at {CLUSTER_PORT} on its machine, so it must be neither 0 nor {CLUSTER_PORT}"
        )));
    }
    Ok(())
}

/// One server's configuration: listen, TLS, JetStream, its pid file, its
/// side of the cluster if any, and the users file by bare name.
/// `all` is every server of the broker, `server` among them.
pub(super) fn broker_config(
    dir: &Path,
    server: &Server,
    all: &[Server],
) -> Result<String, GenesisError> {
    let quoted = |rel: &str| quote(&dir.join(rel));
    let mut c = String::new();
    c.push_str("# The broker's own configuration, written once by genesis.\n");
    c.push_str("# Who may connect is in users.conf, composed by the controller.\n");
    if let Some(name) = &server.name {
        // JetStream in a cluster names its peers by server name.
        let _ = writeln!(c, "server_name: \"{name}\"");
    }
    let _ = writeln!(c, "listen: \"{}:{}\"", server.host, server.port);
    if let Some(m) = &server.machine {
        // What the server tells clients its peers are at: the address the
        // tokens carry, not those of every interface it listens on.
        let _ = writeln!(c, "client_advertise: \"{}\"", host_port(m, server.port));
    }
    let _ = writeln!(c, "pid_file: {}", quoted(&server.pid_file)?);
    // No `verify: true`: it demands a client certificate, and mesh clients
    // authenticate by NKey over server-authenticated TLS. A handshake may
    // take 10 s, not the server's default 2: a broker restarted under
    // thousands of hosts handshakes with all of them at once, and each one
    // timed out backs off and comes again (a storm of 10,000 hosts logged
    // 10,709 timeouts at the default).
    let _ = writeln!(
        c,
        "tls {{\n  cert_file: {}\n  key_file: {}\n  timeout: 10\n}}",
        quoted(BROKER_CERT)?,
        quoted(BROKER_KEY)?
    );
    let _ = writeln!(
        c,
        "jetstream {{\n  store_dir: {}\n}}",
        quoted(&server.store_dir)?
    );
    if let Some(route) = &server.route {
        let _ = writeln!(c, "cluster {{\n  name: \"{CLUSTER_NAME}\"");
        let _ = writeln!(c, "  listen: \"{}\"", route.listen);
        c.push_str("  routes: [\n");
        for peer in all.iter().filter(|s| s.conf != server.conf) {
            if let Some(r) = &peer.route {
                let _ = writeln!(c, "    \"{}\"", r.url);
            }
        }
        c.push_str("  ]\n");
        if let Some(m) = &server.machine {
            // Its peers learn of each other from it: the machine's address.
            let _ = writeln!(c, "  advertise: \"{}\"", host_port(m, route.port));
        }
        // Routes are mutual TLS: a peer must present a certificate of the
        // mesh CA, which signs the broker's alone, so only a holder of the
        // broker's key joins the cluster (and a peer's name is checked
        // against the certificate, as a client does). nats-server demands
        // the peer's certificate on routes even without `verify` (checked
        // live); it is written for whoever reads the file.
        let _ = writeln!(
            c,
            "  tls {{\n    cert_file: {}\n    key_file: {}\n    ca_file: {}\n    verify: true\n    timeout: 10\n  }}\n}}",
            quoted(BROKER_CERT)?,
            quoted(BROKER_KEY)?,
            quoted(CA_CERT)?
        );
    }
    // Bare name: nats-server joins even an absolute include path onto this
    // file's directory.
    c.push_str("include users.conf\n");
    Ok(c)
}

/// A double-quoted config string. Refuses what the config parser would read
/// differently from the path on disk.
fn quote(p: &Path) -> Result<String, GenesisError> {
    let s = p
        .to_str()
        .ok_or_else(|| GenesisError::UnquotablePath(p.to_path_buf()))?;
    if s.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(GenesisError::UnquotablePath(p.to_path_buf()));
    }
    Ok(format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(port: u16, addresses: &[&str], replicas: u8, i: usize) -> String {
        let addresses: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
        let all = servers(port, &addresses, replicas);
        broker_config(Path::new("/s"), &all[i], &all).unwrap()
    }

    #[test]
    fn a_path_the_config_cannot_quote_is_refused() {
        for p in ["/tmp/a\"b", "/tmp/a\\b", "/tmp/a\nb"] {
            assert!(matches!(
                quote(Path::new(p)),
                Err(GenesisError::UnquotablePath(_))
            ));
        }
        assert_eq!(
            quote(Path::new("/var/lib/mesh")).unwrap(),
            "\"/var/lib/mesh\""
        );
    }

    #[test]
    fn a_single_server_config_is_the_one_every_mesh_had_before_clusters() {
        assert_eq!(
            config(4999, &[], 1, 0),
            "# The broker's own configuration, written once by genesis.
# Who may connect is in users.conf, composed by the controller.
listen: \"127.0.0.1:4999\"
pid_file: \"/s/broker/nats.pid\"
tls {
  cert_file: \"/s/broker/cert.pem\"
  key_file: \"/s/broker/key.pem\"
  timeout: 10
}
jetstream {
  store_dir: \"/s/jetstream\"
}
include users.conf
"
        );
        let c = config(4999, &["10.0.0.5"], 1, 0);
        assert!(c.contains("listen: \"0.0.0.0:4999\"\n"), "{c}");
        assert!(!c.contains("cluster") && !c.contains("server_name"), "{c}");
    }

    #[test]
    fn the_broker_config_has_no_client_verification_and_includes_by_bare_name() {
        for c in [
            config(4999, &[], 1, 0),
            config(4999, &["10.0.0.5"], 1, 0),
            config(4999, &[], 3, 1),
        ] {
            // The client block: the one before `jetstream`.
            let client_tls = c.split("jetstream").next().unwrap();
            assert!(!client_tls.contains("verify"), "{c}");
            // A storm of handshakes is given time (the server's default is 2 s).
            assert!(
                client_tls.contains("  key_file: \"/s/broker/key.pem\"\n  timeout: 10\n}"),
                "{c}"
            );
            assert!(c.lines().any(|l| l == "include users.conf"), "{c}");
        }
    }

    #[test]
    fn a_local_cluster_routes_on_the_ports_after_the_client_ports() {
        assert_eq!(
            config(4222, &[], 3, 1),
            "# The broker's own configuration, written once by genesis.
# Who may connect is in users.conf, composed by the controller.
server_name: \"mesh-2\"
listen: \"127.0.0.1:4223\"
pid_file: \"/s/broker/nats-2.pid\"
tls {
  cert_file: \"/s/broker/cert.pem\"
  key_file: \"/s/broker/key.pem\"
  timeout: 10
}
jetstream {
  store_dir: \"/s/jetstream/server-2\"
}
cluster {
  name: \"mesh\"
  listen: \"127.0.0.1:4226\"
  routes: [
    \"nats-route://127.0.0.1:4225\"
    \"nats-route://127.0.0.1:4227\"
  ]
  tls {
    cert_file: \"/s/broker/cert.pem\"
    key_file: \"/s/broker/key.pem\"
    ca_file: \"/s/ca/ca.pem\"
    verify: true
    timeout: 10
  }
}
include users.conf
"
        );
        let all = servers(4222, &[], 3);
        let ports: Vec<u16> = all.iter().map(|s| s.port).collect();
        assert_eq!(ports, [4222, 4223, 4224]);
        let urls: Vec<&str> = all.iter().map(|s| s.local_url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "tls://127.0.0.1:4222",
                "tls://127.0.0.1:4223",
                "tls://127.0.0.1:4224"
            ]
        );
        let files: Vec<(&str, &str, &str)> = all
            .iter()
            .map(|s| (s.conf.as_str(), s.pid_file.as_str(), s.store_dir.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                (
                    "broker/nats-1.conf",
                    "broker/nats-1.pid",
                    "jetstream/server-1"
                ),
                (
                    "broker/nats-2.conf",
                    "broker/nats-2.pid",
                    "jetstream/server-2"
                ),
                (
                    "broker/nats-3.conf",
                    "broker/nats-3.pid",
                    "jetstream/server-3"
                ),
            ]
        );
    }

    #[test]
    fn a_cluster_over_machines_routes_at_6222_on_each_to_the_others() {
        let addresses = ["10.0.0.1", "ctl.example", "fd00::3"];
        let c = config(4222, &addresses, 3, 0);
        assert!(c.contains("server_name: \"mesh-1\"\n"), "{c}");
        assert!(
            c.contains("listen: \"0.0.0.0:4222\"\nclient_advertise: \"10.0.0.1:4222\"\n"),
            "{c}"
        );
        assert!(c.contains("  listen: \"0.0.0.0:6222\"\n"), "{c}");
        assert!(c.contains("  advertise: \"10.0.0.1:6222\"\n"), "{c}");
        let c3 = config(4222, &addresses, 3, 2);
        assert!(
            c3.contains("client_advertise: \"[fd00::3]:4222\"\n"),
            "{c3}"
        );
        assert!(c3.contains("  advertise: \"[fd00::3]:6222\"\n"), "{c3}");
        assert!(
            c.contains(
                "  routes: [\n    \"nats-route://ctl.example:6222\"\n    \"nats-route://[fd00::3]:6222\"\n  ]\n"
            ),
            "{c}"
        );
        assert!(c.contains("store_dir: \"/s/jetstream/server-1\""), "{c}");
        assert!(
            c3.contains("\"nats-route://10.0.0.1:6222\"\n    \"nats-route://ctl.example:6222\"\n"),
            "{c3}"
        );
        let urls: Vec<String> = servers(4222, &addresses.map(String::from), 3)
            .into_iter()
            .map(|s| s.local_url)
            .collect();
        assert_eq!(
            urls,
            [
                "tls://10.0.0.1:4222",
                "tls://ctl.example:4222",
                "tls://[fd00::3]:4222"
            ]
        );
    }

    #[test]
    fn routes_are_mutual_tls_and_clients_are_not() {
        let c = config(4222, &[], 3, 0);
        let (client, cluster) = c.split_once("cluster {").unwrap();
        assert!(!client.contains("verify"), "{c}");
        assert!(!client.contains("ca_file"), "{c}");
        assert!(
            cluster.contains(
                "  tls {\n    cert_file: \"/s/broker/cert.pem\"\n    key_file: \"/s/broker/key.pem\"\n    ca_file: \"/s/ca/ca.pem\"\n    verify: true\n    timeout: 10\n  }\n}\n"
            ),
            "{c}"
        );
    }

    #[test]
    fn a_cluster_genesis_cannot_lay_out_is_refused_saying_what_to_write() {
        let s = |a: &[&str]| a.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let check = |port, replicas, given: &[&str]| {
            let given = s(given);
            check_cluster(
                port,
                replicas,
                &given,
                &super::super::unique_addresses(&given),
            )
        };
        check(4222, 1, &["10.0.0.1", "10.0.0.2"]).unwrap();
        check(4222, 3, &[]).unwrap();
        check(4222, 3, &["10.0.0.1", "b.example", "::3"]).unwrap();
        check(65530, 3, &[]).unwrap();
        check(4222, 7, &[]).unwrap();

        for (replicas, want) in [
            (0, "--replicas 0"),
            (2, "--replicas 2"),
            (4, "3, 5 or 7 for a cluster"),
            (9, "--replicas 9"),
        ] {
            let msg = check(4222, replicas, &[]).unwrap_err().to_string();
            assert!(msg.contains(want), "{msg}");
        }
        let err = check(4222, 3, &["10.0.0.1", "10.0.0.2"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--replicas 3 takes 3 --address (one per server) or none (all on this machine); 2 given"
        );
        for (given, named) in [
            (["10.0.0.1", "A.example", "a.example"], "a.example"),
            (["10.0.0.1", "127.0.0.1", "a.example"], "127.0.0.1"),
            (["localhost", "10.0.0.1", "a.example"], "localhost"),
        ] {
            let err = check(4222, 3, &given).unwrap_err();
            assert!(
                matches!(&err, GenesisError::ServerAddress { address } if address == named),
                "{err}"
            );
        }
        for (port, given, want) in [
            (65531, &[][..], "65531 to 65536"),
            (0, &[][..], "0 to 5"),
            (6222, &["10.0.0.1", "10.0.0.2", "10.0.0.3"][..], "6222"),
        ] {
            let msg = check(port, 3, given).unwrap_err().to_string();
            assert!(
                msg.starts_with(&format!("--port {port} ")) && msg.contains(want),
                "{msg}"
            );
        }
    }
}
