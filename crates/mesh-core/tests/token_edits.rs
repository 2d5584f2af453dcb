//! Every single-character change of a real token is refused on the node
//! before anything is sent, or reads as the very same token (whitespace a
//! paste may add): none reads as a token with another meaning — another
//! controller key, address, pin, node or seed.

use mesh_core::names::Name;
use mesh_core::secret::Secret;
use mesh_core::token::Token;

fn real_token() -> Token {
    let key = ed25519_dalek::SigningKey::from_bytes(&[42; 32]);
    Token {
        bus_urls: vec![
            "tls://10.0.0.1:4222".into(),
            "tls://ctl.example:4222".into(),
        ],
        cert_sha256: "5e".repeat(32),
        controller_key: hex::encode(key.verifying_key().to_bytes()),
        node: Name::new("web-1").unwrap(),
        enrolment_seed: Secret::new(nkeys::KeyPair::new_user().seed().unwrap()),
        expires_at: 1_800_000_000_000,
    }
}

/// Substitutes for the character at one position: a spread over printable
/// ASCII (both cases, digits, the base64url extras, the separators, space)
/// and the character's neighbours, the commonest typo of a hex digit.
fn substitutes(c: u8) -> Vec<u8> {
    let mut out: Vec<u8> = b" .-_+/=Aa0Zz9m~".to_vec();
    out.extend([c.wrapping_add(1), c.wrapping_sub(1), c ^ 0x20]);
    out.retain(|&s| s != c && (0x20..0x7f).contains(&s));
    out.sort_unstable();
    out.dedup();
    out
}

#[test]
fn every_one_character_edit_is_refused_or_means_the_same() {
    let token = real_token();
    let text = token.encode().into_string();
    let seed = token.enrolment_seed.expose().to_string();
    let (mut cases, mut refused, mut same, mut wrong) = (0usize, 0usize, 0usize, Vec::new());
    for (i, &c) in text.as_bytes().iter().enumerate() {
        for s in substitutes(c) {
            let mut edited = text.clone().into_bytes();
            edited[i] = s;
            let edited = String::from_utf8(edited).unwrap();
            cases += 1;
            match Token::decode(&edited) {
                Err(e) => {
                    refused += 1;
                    // A reason, and never a part of the seed it carries.
                    let msg = e.to_string();
                    assert!(!msg.is_empty());
                    assert!(!msg.contains(&seed[2..12]), "{msg}");
                }
                Ok(t) if t == token => same += 1,
                Ok(_) => wrong.push((i, c as char, s as char)),
            }
        }
    }
    println!(
        "token edits: {cases} cases, {} accepted wrongly",
        wrong.len()
    );
    assert!(cases >= 500, "{cases}");
    assert!(wrong.is_empty(), "accepted with another meaning: {wrong:?}");
    assert_eq!(refused + same, cases);
    assert!(refused > same, "{refused} refused, {same} the same");
}

#[test]
fn an_edit_with_its_checksum_recomputed_decodes_as_edited() {
    // The checksum catches mistakes, not intent: a deliberate edit made with
    // the encoder reads back, and is left to the controller's signed answer.
    let mut token = real_token();
    let other = ed25519_dalek::SigningKey::from_bytes(&[43; 32]);
    token.controller_key = hex::encode(other.verifying_key().to_bytes());
    let text = token.encode().into_string();
    assert_eq!(Token::decode(&text).unwrap(), token);
}
