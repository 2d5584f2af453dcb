//! Which bus a mesh runs on (DESIGN "the bus seam"), read in one place: from
//! the addresses a daemon or command is given. A mesh half on each bus is one
//! where a declaration goes out on one and its report comes back on the
//! other, so addresses of both kinds together are refused, naming both.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The two buses a mesh can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusKind {
    /// NATS with JetStream: `tls://HOST:PORT`.
    #[default]
    Nats,
    /// AMQP 0-9-1 (RabbitMQ): `amqps://HOST:PORT`.
    Amqp,
}

impl BusKind {
    /// The scheme of its addresses: both buses speak TLS only.
    pub fn scheme(self) -> &'static str {
        match self {
            BusKind::Nats => "tls",
            BusKind::Amqp => "amqps",
        }
    }

    /// `scheme://host:port`.
    pub fn address(self, host: &str, port: u16) -> String {
        format!("{}://{host}:{port}", self.scheme())
    }

    /// The bus an address is of, when it is one: a known scheme, something
    /// after it, and no credentials (a credential in an address leaks into
    /// every line that prints it).
    pub fn of_address(url: &str) -> Option<BusKind> {
        [BusKind::Nats, BusKind::Amqp].into_iter().find(|k| {
            url.strip_prefix(k.scheme())
                .and_then(|rest| rest.strip_prefix("://"))
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('@'))
        })
    }
}

impl fmt::Display for BusKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BusKind::Nats => "nats",
            BusKind::Amqp => "amqp",
        })
    }
}

impl FromStr for BusKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "nats" => Ok(BusKind::Nats),
            "amqp" => Ok(BusKind::Amqp),
            other => Err(format!(
                "{:?} is not a bus: write nats or amqp",
                crate::diagnostic::clip(other, 40)
            )),
        }
    }
}

/// An address and where it was given (a flag, a variable, a file), for
/// messages.
#[derive(Debug, Clone, Copy)]
pub struct Given<'a> {
    pub source: &'a str,
    pub address: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    #[error(
        "{given_by}: {address:?} is not a bus address: write tls://HOST:PORT (NATS) or amqps://HOST:PORT (AMQP); both buses speak TLS only, and a credential never goes in an address"
    )]
    NotAnAddress { given_by: String, address: String },
    #[error(
        "both a NATS address ({nats_source}: {nats}) and an AMQP address ({amqp_source}: {amqp}) are given; a mesh runs on one bus, and half on each would send a declaration on one and hear its report on the other: unset whichever is not this mesh's bus ({nats_source} or {amqp_source})"
    )]
    BothBuses {
        nats_source: String,
        nats: String,
        amqp_source: String,
        amqp: String,
    },
    #[error("no bus address is given")]
    NoAddress,
}

/// The one bus every given address is of.
pub fn bus_of<'a>(given: impl IntoIterator<Item = Given<'a>>) -> Result<BusKind, BusError> {
    let (mut nats, mut amqp) = (None, None);
    for g in given {
        let kind = BusKind::of_address(g.address).ok_or_else(|| BusError::NotAnAddress {
            given_by: g.source.to_string(),
            address: crate::diagnostic::clip(g.address, 100).to_string(),
        })?;
        let slot = match kind {
            BusKind::Nats => &mut nats,
            BusKind::Amqp => &mut amqp,
        };
        slot.get_or_insert(g);
    }
    match (nats, amqp) {
        (Some(n), Some(a)) => Err(BusError::BothBuses {
            nats_source: n.source.to_string(),
            nats: n.address.to_string(),
            amqp_source: a.source.to_string(),
            amqp: a.address.to_string(),
        }),
        (Some(_), None) => Ok(BusKind::Nats),
        (None, Some(_)) => Ok(BusKind::Amqp),
        (None, None) => Err(BusError::NoAddress),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g<'a>(source: &'a str, address: &'a str) -> Given<'a> {
        Given { source, address }
    }

    #[test]
    fn an_address_names_its_bus_by_its_scheme() {
        assert_eq!(
            BusKind::of_address("tls://10.0.0.1:4222"),
            Some(BusKind::Nats)
        );
        assert_eq!(BusKind::of_address("amqps://mq:5671"), Some(BusKind::Amqp));
        for not in [
            "tls://",
            "amqps://",
            "nats://10.0.0.1:4222",
            "amqp://mq:5672",
            "tls://user:pw@h:1",
            "amqps://u:p@mq:5671",
            "tlsx://h:1",
            "tls:/h:1",
            "",
        ] {
            assert_eq!(BusKind::of_address(not), None, "{not}");
        }
        assert_eq!(BusKind::Amqp.address("mq", 5671), "amqps://mq:5671");
        assert_eq!(BusKind::Nats.address("h", 4222), "tls://h:4222");
    }

    #[test]
    fn addresses_of_both_buses_are_refused_naming_both() {
        let err = bus_of([
            g("--broker", "tls://a:4222"),
            g("--broker", "tls://b:4222"),
            g("host.json", "amqps://mq:5671"),
        ])
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--broker: tls://a:4222"), "{text}");
        assert!(text.contains("host.json: amqps://mq:5671"), "{text}");
        assert!(text.contains("unset whichever"), "{text}");
        assert_eq!(
            bus_of([g("a", "amqps://x:1"), g("b", "amqps://y:1")]),
            Ok(BusKind::Amqp)
        );
        assert_eq!(bus_of([g("a", "tls://x:1")]), Ok(BusKind::Nats));
        assert_eq!(bus_of([]), Err(BusError::NoAddress));
    }

    #[test]
    fn a_wrong_address_is_named_with_where_it_came_from() {
        let err = bus_of([g("a", "tls://x:1"), g("MESH_TOKEN", "http://x:1")]).unwrap_err();
        assert_eq!(
            err,
            BusError::NotAnAddress {
                given_by: "MESH_TOKEN".into(),
                address: "http://x:1".into()
            }
        );
        assert!(err.to_string().contains("amqps://HOST:PORT"));
    }

    #[test]
    fn a_bus_is_written_nats_or_amqp() {
        assert_eq!("amqp".parse::<BusKind>(), Ok(BusKind::Amqp));
        assert_eq!("nats".parse::<BusKind>(), Ok(BusKind::Nats));
        assert_eq!(BusKind::default(), BusKind::Nats);
        let e = "rabbit".parse::<BusKind>().unwrap_err();
        assert!(e.contains("write nats or amqp"), "{e}");
        assert_eq!(BusKind::Amqp.to_string(), "amqp");
        assert_eq!(serde_json::to_string(&BusKind::Amqp).unwrap(), "\"amqp\"");
    }
}
