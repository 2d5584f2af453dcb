//! Connecting to the bus as one principal.

use std::path::PathBuf;

use async_nats::{Client, ConnectOptions};

pub use mesh_core::secret::Secret;

/// Where and as whom to connect. The password travels beside the address,
/// never inside it: a credential in a URL leaks into every line that prints it.
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// `nats://` or `tls://` address, without credentials.
    pub url: String,
    pub user: String,
    pub password: Secret,
    /// CA certificate (PEM) the server's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// The principal's private inbox prefix (`_INBOX.<principal>`): its grants
    /// allow replies there and nowhere else, so the client must use it.
    pub inbox_prefix: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the bus address {0:?} carries credentials; give the user and password separately")]
    CredentialsInUrl(String),
    #[error("could not connect to the bus at {url} as {user}")]
    Connect {
        url: String,
        user: String,
        #[source]
        source: async_nats::ConnectError,
    },
}

/// Connects as `cfg.user`, requiring TLS when a CA is given.
pub async fn connect(cfg: &BusConfig) -> Result<Client, ConnectError> {
    if cfg.url.contains('@') {
        // Refused rather than redacted: the caller's copy would leak elsewhere.
        return Err(ConnectError::CredentialsInUrl(redact(&cfg.url)));
    }
    // No retry on the first connect (the client's default): a refusal is an
    // answer (wrong credential, not yet in the users file) and the caller
    // decides about backoff.
    let mut opts =
        ConnectOptions::with_user_and_password(cfg.user.clone(), cfg.password.expose().into());
    if let Some(ca) = &cfg.ca_file {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some(prefix) = &cfg.inbox_prefix {
        opts = opts.custom_inbox_prefix(prefix.clone());
    }
    opts.connect(cfg.url.as_str())
        .await
        .map_err(|source| ConnectError::Connect {
            url: cfg.url.clone(),
            user: cfg.user.clone(),
            source,
        })
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
            user: "host_n1".into(),
            password: Secret::new("hunter2-very-secret"),
            ca_file: None,
            inbox_prefix: None,
        };
        assert!(!format!("{cfg:?}").contains("hunter2"));
    }

    #[test]
    fn credentials_in_the_url_are_refused_and_not_echoed() {
        let cfg = BusConfig {
            url: "nats://u:hunter2@127.0.0.1:4222".into(),
            user: "u".into(),
            password: Secret::new("x"),
            ca_file: None,
            inbox_prefix: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = rt.block_on(connect(&cfg)).unwrap_err();
        assert!(matches!(err, ConnectError::CredentialsInUrl(_)));
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
