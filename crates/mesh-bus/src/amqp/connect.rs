//! Connecting to RabbitMQ as one principal: AMQP over TLS with the mesh's
//! own client configuration (its CA, or the pinned broker certificate, as on
//! NATS; never a system root store), the password beside the address and
//! never inside a URL.

use std::path::PathBuf;
use std::sync::Arc;

use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{Connection, ConnectionProperties};
use tcp_stream::{AsyncTcpStream, RustlsConnector};

use crate::Secret;
use crate::tls::CertPin;

/// How the broker's certificate is checked.
#[derive(Debug, Clone)]
pub enum Trust {
    /// It must chain to the CA certificates in this PEM file.
    Ca(PathBuf),
    /// It must be exactly this certificate (an enrolment token's pin).
    Pin(CertPin),
}

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct AmqpConfig {
    pub host: String,
    pub port: u16,
    /// The principal's name: its RabbitMQ user.
    pub user: String,
    pub password: Secret,
    pub trust: Trust,
}

#[derive(Debug, thiserror::Error)]
pub enum AmqpConnectError {
    #[error("could not read the CA certificate {path}")]
    Ca {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a CA certificate the client can trust")]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("could not connect to the AMQP bus at {host}:{port} as {user}")]
    Connect {
        host: String,
        port: u16,
        user: String,
        // Boxed: lapin's error is large, and this one travels up every caller.
        #[source]
        source: Box<lapin::Error>,
    },
}

fn client_config(trust: &Trust) -> Result<rustls::ClientConfig, AmqpConnectError> {
    match trust {
        Trust::Pin(pin) => Ok(pin.client_config()),
        Trust::Ca(path) => {
            let pem = std::fs::read(path).map_err(|source| AmqpConnectError::Ca {
                path: path.clone(),
                source,
            })?;
            crate::tls::ca_client_config(&pem).map_err(|source| AmqpConnectError::BadCa {
                path: path.clone(),
                source,
            })
        }
    }
}

pub async fn connect(cfg: &AmqpConfig) -> Result<Connection, AmqpConnectError> {
    let connector = RustlsConnector::from(Arc::new(client_config(&cfg.trust)?));
    let uri = AMQPUri {
        scheme: AMQPScheme::AMQPS,
        authority: AMQPAuthority {
            userinfo: AMQPUserInfo {
                username: cfg.user.clone(),
                password: cfg.password.expose().to_string(),
            },
            host: cfg.host.clone(),
            port: cfg.port,
        },
        vhost: "/".into(),
        query: AMQPQueryString::default(),
    };
    let err = |source| AmqpConnectError::Connect {
        host: cfg.host.clone(),
        port: cfg.port,
        user: cfg.user.clone(),
        source: Box::new(source),
    };
    let runtime = lapin::runtime::default_runtime().map_err(err)?;
    Connection::connector(
        uri,
        runtime,
        async move |uri, runtime| {
            let host = uri.authority.host.clone();
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), uri.authority.port))
                    .await?
                    .collect();
            let plain = AsyncTcpStream::connect(&runtime, addrs).await?;
            Ok(plain.into_rustls(&connector, &host).await?)
        },
        ConnectionProperties::default(),
    )
    .await
    .map_err(err)
}
