//! Connecting to the bus as one principal.

use std::path::PathBuf;

use async_nats::{Client, ConnectOptions};

pub use mesh_core::secret::Secret;

use crate::tls::CertPin;

/// What a client proves who it is with.
#[derive(Debug, Clone)]
pub enum ClientCredential {
    /// An NKey user seed (`SU…`): it signs the server's nonce and never
    /// leaves this process. Every machine principal connects this way.
    NKey(Secret),
    /// A user name and password: a person who must use one.
    Password { user: String, password: Secret },
}

/// Where and as whom to connect. The credential travels beside the address,
/// never inside it: a credential in a URL leaks into every line that prints it.
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// `nats://` or `tls://` address, without credentials.
    pub url: String,
    /// The principal's name, for messages (an NKey user has none on the wire).
    pub principal: String,
    pub credential: ClientCredential,
    /// CA certificate (PEM) the server's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// The principal's private inbox prefix (`_INBOX.<principal>`): its grants
    /// allow replies there and nowhere else, so the client must use it.
    pub inbox_prefix: Option<String>,
    /// Trust exactly the broker certificate with this DER SHA-256 (an
    /// enrolment token's pin) instead of a CA. Needs a `tls://` address and
    /// excludes `ca_file`.
    pub pin: Option<CertPin>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the bus address {0:?} carries credentials; give the user and password separately")]
    CredentialsInUrl(String),
    #[error("the NKey seed of {principal} is not a user seed")]
    BadSeed { principal: String },
    #[error("could not connect to the bus at {url} as {principal}")]
    Connect {
        url: String,
        principal: String,
        #[source]
        source: async_nats::ConnectError,
    },
    #[error(
        "the bus address {0:?} is not TLS but a certificate pin is given; use the tls:// address the token names"
    )]
    PlaintextWithPin(String),
    #[error(
        "both a CA file and a certificate pin are given; give one (a token's pin trusts one certificate, a CA any it signed)"
    )]
    PinAndCa,
}

/// How often a client pings its server. A server cut off by the network
/// (a partition, a machine gone without closing its connections) answers
/// nothing: after two unanswered pings the client drops the connection and
/// moves to another server of the cluster — within about three of these,
/// where the client's default (a minute) left a host or a standby
/// controller on a dead connection for minutes. A ping is a few bytes.
pub const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects as `cfg.principal`, requiring TLS when a CA or a pin is given.
pub async fn connect(cfg: &BusConfig) -> Result<Client, ConnectError> {
    connect_with(cfg, |opts| opts).await
}

/// [`connect`], letting the caller add client behaviour (an event callback,
/// reconnect policy) on top of the credential, TLS and inbox settings, which
/// stay decided here.
pub async fn connect_with(
    cfg: &BusConfig,
    tune: impl FnOnce(ConnectOptions) -> ConnectOptions,
) -> Result<Client, ConnectError> {
    if cfg.url.contains('@') {
        // Refused rather than redacted: the caller's copy would leak elsewhere.
        return Err(ConnectError::CredentialsInUrl(redact(&cfg.url)));
    }
    // Several servers of one cluster, comma-separated: the client starts
    // with any of them and fails over to the others.
    let urls: Vec<&str> = cfg
        .url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    if cfg.pin.is_some() {
        // Before any byte is sent: over a plaintext address the credential
        // would go out before the pin could be checked.
        if let Some(plain) = urls
            .iter()
            .find(|u| !u.to_ascii_lowercase().starts_with("tls://"))
        {
            return Err(ConnectError::PlaintextWithPin(plain.to_string()));
        }
        // Silently preferring one would leave the other believed in force.
        if cfg.ca_file.is_some() {
            return Err(ConnectError::PinAndCa);
        }
    }
    // No retry on the first connect (the client's default): a refusal is an
    // answer (wrong credential, not yet in the users file) and the caller
    // decides about backoff.
    let mut opts = match &cfg.credential {
        ClientCredential::NKey(seed) => {
            // Checked here: with_nkey would only fail at connect, blaming
            // the connection instead of the key file.
            if nkeys::KeyPair::from_seed(seed.expose())
                .map(|kp| !matches!(kp.key_pair_type(), nkeys::KeyPairType::User))
                .unwrap_or(true)
            {
                return Err(ConnectError::BadSeed {
                    principal: cfg.principal.clone(),
                });
            }
            ConnectOptions::with_nkey(seed.expose().to_string())
        }
        ClientCredential::Password { user, password } => {
            ConnectOptions::with_user_and_password(user.clone(), password.expose().into())
        }
    };
    if let Some(ca) = &cfg.ca_file {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some(pin) = &cfg.pin {
        // Not `add_root_certificates`: that trusts a CA (every certificate it
        // signed), where the token names one certificate. Our config is built
        // from memory; async-nats 0.51 still reads the platform roots on each
        // TLS connect when given one and discards them (nats.rs #1622, open):
        // a cost per reconnect, and a broken system store fails the connect.
        opts = opts
            .tls_client_config(pin.client_config())
            .require_tls(true);
    }
    if let Some(prefix) = &cfg.inbox_prefix {
        opts = opts.custom_inbox_prefix(prefix.clone());
    }
    opts = opts.ping_interval(PING_INTERVAL);
    tune(opts)
        .connect(urls.as_slice())
        .await
        .map_err(|source| ConnectError::Connect {
            url: cfg.url.clone(),
            principal: cfg.principal.clone(),
            source,
        })
}

/// As [`connect`], hearing the server's refusals: a refused publish is
/// otherwise silent, and the caller learns of it only by a timeout.
pub async fn connect_hearing(cfg: &BusConfig) -> Result<(Client, crate::Refusals), ConnectError> {
    let refusals = crate::Refusals::new();
    let heard = refusals.clone();
    let client = connect_with(cfg, move |o| {
        o.event_callback(move |e| {
            let heard = heard.clone();
            async move { heard.note(&e) }
        })
    })
    .await?;
    Ok((client, refusals))
}

/// An address as it may be shown: as given, unless it carries a credential.
pub(crate) fn shown(url: &str) -> String {
    if url.contains('@') {
        redact(url)
    } else {
        url.to_string()
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}<redacted>{}", &url[..s + 3], &url[at..]),
        _ => "<redacted>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let cfg = BusConfig {
            url: "tls://127.0.0.1:4222".into(),
            principal: "host_n1".into(),
            credential: ClientCredential::Password {
                user: "host_n1".into(),
                password: Secret::new("hunter2-very-secret"),
            },
            ca_file: None,
            inbox_prefix: None,
            pin: None,
        };
        assert!(!format!("{cfg:?}").contains("hunter2"));
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let cfg = BusConfig {
            credential: ClientCredential::NKey(Secret::new(seed.clone())),
            ..cfg
        };
        assert!(!format!("{cfg:?}").contains(&seed[2..]));
    }

    #[test]
    fn an_nkey_that_is_not_a_user_seed_is_refused_before_connecting() {
        for seed in [
            nkeys::KeyPair::new_account().seed().unwrap(),
            "SUnot-a-seed".to_string(),
        ] {
            let cfg = BusConfig {
                credential: ClientCredential::NKey(Secret::new(seed.clone())),
                ..pinned("tls://127.0.0.1:1")
            };
            let err = connect_now(&cfg);
            assert!(matches!(err, ConnectError::BadSeed { .. }), "{err}");
            assert!(!err.to_string().contains(&seed), "{err}");
        }
    }

    #[test]
    fn credentials_in_the_url_are_refused_and_not_echoed() {
        let cfg = BusConfig {
            url: "nats://u:hunter2@127.0.0.1:4222".into(),
            principal: "u".into(),
            credential: ClientCredential::Password {
                user: "u".into(),
                password: Secret::new("x"),
            },
            ca_file: None,
            inbox_prefix: None,
            pin: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = rt.block_on(connect(&cfg)).unwrap_err();
        assert!(matches!(err, ConnectError::CredentialsInUrl(_)));
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    fn pinned(url: &str) -> BusConfig {
        BusConfig {
            url: url.into(),
            principal: "u".into(),
            credential: ClientCredential::Password {
                user: "u".into(),
                password: Secret::new("x"),
            },
            ca_file: None,
            inbox_prefix: None,
            pin: Some(CertPin::of_der(b"cert")),
        }
    }

    fn connect_now(cfg: &BusConfig) -> ConnectError {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(connect(cfg))
            .unwrap_err()
    }

    #[test]
    fn a_pin_with_a_plaintext_address_is_refused_before_connecting() {
        // Nothing listens on port 1: a refusal other than ours would be a
        // connect error, so the variant proves no connection was tried.
        for url in ["nats://127.0.0.1:1", "127.0.0.1:1", "ws://127.0.0.1:1"] {
            let err = connect_now(&pinned(url));
            assert!(
                matches!(err, ConnectError::PlaintextWithPin(_)),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn a_pin_and_a_ca_together_are_refused() {
        let mut cfg = pinned("tls://127.0.0.1:1");
        cfg.ca_file = Some("/nonexistent/ca.pem".into());
        assert!(matches!(connect_now(&cfg), ConnectError::PinAndCa));
    }
}
