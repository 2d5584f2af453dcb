//! Certificate pinning against a real TLS nats-server: the pinned certificate
//! connects; another one — even from the same CA — is refused in words that
//! name the token; a plaintext address with a pin never connects.

use std::error::Error as _;
use std::time::Duration;

use futures::StreamExt as _;
use mesh_bus::{
    BusConfig, CertPin, ClientCredential, ConnectError, Secret, connect, fingerprint_of_pem_file,
};
use mesh_testkit::NatsServer;
use mesh_testkit::tls::TestCertificates;

/// A server without a users file admits anyone; the credential is ignored.
fn config(url: String, pin: Option<CertPin>) -> BusConfig {
    BusConfig {
        url,
        principal: "anyone".into(),
        credential: ClientCredential::Password {
            user: "anyone".into(),
            password: Secret::new("unused"),
        },
        ca_file: None,
        inbox_prefix: None,
        pin,
    }
}

/// Every message in the error's source chain, joined: the mismatch is deep
/// inside (our error → async-nats → io → rustls).
fn chain(err: &ConnectError) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push_str(" <- ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

async fn round_trip(client: &async_nats::Client) {
    let mut sub = client.subscribe("pin.echo").await.unwrap();
    let responder = client.clone();
    tokio::spawn(async move {
        if let Some(msg) = sub.next().await {
            responder
                .publish(msg.reply.unwrap(), "pong".into())
                .await
                .unwrap();
        }
    });
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        client.request("pin.echo", "ping".into()),
    )
    .await
    .expect("reply in time")
    .unwrap();
    assert_eq!(&reply.payload[..], b"pong");
}

#[tokio::test]
async fn the_pinned_certificate_connects_and_a_request_round_trips() {
    let server = NatsServer::builder().tls(true).start().unwrap();
    let certs = server.certificates().unwrap();
    // The fingerprint a token is made from (the PEM on disk) is the one the
    // wire presents (the DER).
    let from_file = fingerprint_of_pem_file(&certs.cert_pem).unwrap();
    let pin = CertPin::of_der(&certs.cert_der);
    assert_eq!(from_file, pin.to_hex());

    let client = connect(&config(
        server.url(),
        Some(CertPin::from_hex(&from_file).unwrap()),
    ))
    .await
    .unwrap();
    round_trip(&client).await;
}

#[tokio::test]
async fn a_certificate_from_the_same_ca_with_another_key_is_refused() {
    let server = NatsServer::builder().tls(true).start().unwrap();
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pinned, sibling) =
        TestCertificates::generate_siblings(dirs.0.path(), dirs.1.path()).unwrap();

    // The server now presents the sibling (restart re-reads its cert files).
    let own = server.certificates().unwrap().clone();
    let mut server = server;
    std::fs::copy(&sibling.cert_pem, &own.cert_pem).unwrap();
    std::fs::copy(&sibling.key_pem, &own.key_pem).unwrap();
    server.restart().unwrap();

    // The CA vouches for what the server presents: trusting the CA connects.
    let mut by_ca = config(server.url(), None);
    by_ca.ca_file = Some(pinned.ca_pem.clone());
    connect(&by_ca).await.expect("the sibling chains to the CA");
    // And pinning the sibling itself connects: nothing else is wrong.
    connect(&config(
        server.url(),
        Some(CertPin::of_der(&sibling.cert_der)),
    ))
    .await
    .expect("pinning the presented certificate connects");

    let want = CertPin::of_der(&pinned.cert_der).to_hex();
    let got = CertPin::of_der(&sibling.cert_der).to_hex();
    let err = connect(&config(
        server.url(),
        Some(CertPin::from_hex(&want).unwrap()),
    ))
    .await
    .expect_err("a certificate other than the pinned one is refused");
    assert!(matches!(err, ConnectError::Connect { .. }), "{err:?}");
    let text = chain(&err);
    assert!(
        text.contains("does not match the one in the token"),
        "{text}"
    );
    assert!(text.contains(&want[..16]), "{text}");
    assert!(text.contains(&got[..16]), "{text}");
}

#[tokio::test]
async fn a_plaintext_address_with_a_pin_is_refused_before_connecting() {
    let server = NatsServer::start().unwrap();
    // Without the pin the same address admits this client: the refusal below
    // is ours, not the server's.
    connect(&config(server.url(), None)).await.unwrap();
    let err = connect(&config(server.url(), Some(CertPin::of_der(b"any"))))
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::PlaintextWithPin(_)), "{err}");
    assert!(err.to_string().contains("tls://"), "{err}");
}
