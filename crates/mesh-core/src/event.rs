//! The event envelope: what a module publishes on
//! `mesh.mod.<module>.event.<event>` (DESIGN §4) and what every consumer
//! reads back out of `EVENTS`. JSON, public interface: modules in other
//! languages write and read exactly these fields.
//!
//! The envelope names its emitter and its node: a module's own events carry
//! no node in their subject, and a stored message read on its own (a
//! stream get, a backup) must still say who sent it and from where. Those
//! fields are the emitter's word; what the subject proves is the server's
//! (see [`sender`]: a reader checks one against the other, and against the
//! records).

pub mod sender;

use serde::{Deserialize, Serialize};

use crate::names::Name;

/// Largest envelope accepted, in bytes: the default `max_payload` of
/// nats-server (1 MiB). A bigger one could not have been published, so
/// reading one means the bytes did not come from a mesh emitter.
pub const MAX_ENVELOPE_BYTES: usize = 1024 * 1024;

/// Longest event id accepted. Ids are made by the emitter (the SDK writes 32
/// hex digits); the bound keeps a foreign one from bloating every record
/// that quotes it.
pub const MAX_ID_LEN: usize = 128;

/// One event as it travels and is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEnvelope {
    /// Unique per event, chosen by the emitter; consumers deduplicate on it.
    pub id: String,
    pub module: Name,
    pub node: Name,
    /// When it was emitted: milliseconds since the Unix epoch.
    pub at: u64,
    pub payload: serde_json::Value,
}

/// Why bytes are not an envelope, or an envelope cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("an event envelope is {len} bytes; at most {MAX_ENVELOPE_BYTES} are allowed")]
    TooLarge { len: usize },
    #[error("not an event envelope: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error(
        "an event id must be 1 to {MAX_ID_LEN} printable ASCII characters without spaces; got {len} characters"
    )]
    BadId { len: usize },
}

impl EventEnvelope {
    /// The envelope as JSON, refused when it could not be read back by
    /// [`parse`] (too large, a bad id).
    pub fn to_json(&self) -> Result<Vec<u8>, EventError> {
        check_id(&self.id)?;
        let bytes = serde_json::to_vec(self).map_err(EventError::Malformed)?;
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(EventError::TooLarge { len: bytes.len() });
        }
        Ok(bytes)
    }
}

/// Reads an envelope strictly: size first (before any parsing work), then
/// the fields, none unknown, every name valid.
pub fn parse(bytes: &[u8]) -> Result<EventEnvelope, EventError> {
    if bytes.len() > MAX_ENVELOPE_BYTES {
        return Err(EventError::TooLarge { len: bytes.len() });
    }
    let envelope: EventEnvelope = serde_json::from_slice(bytes).map_err(EventError::Malformed)?;
    check_id(&envelope.id)?;
    Ok(envelope)
}

fn check_id(id: &str) -> Result<(), EventError> {
    let ok = !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(EventError::BadId {
            len: id.chars().count(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope() -> EventEnvelope {
        EventEnvelope {
            id: "00112233445566778899aabbccddeeff".into(),
            module: Name::new("echo").unwrap(),
            node: Name::new("n1").unwrap(),
            at: 1_700_000_000_000,
            payload: serde_json::json!({"line": "hi"}),
        }
    }

    #[test]
    fn an_envelope_reads_back_what_it_writes() {
        let e = envelope();
        let bytes = e.to_json().unwrap();
        assert_eq!(parse(&bytes).unwrap(), e);
    }

    #[test]
    fn the_wire_form_is_the_documented_fields() {
        let v: serde_json::Value = serde_json::from_slice(&envelope().to_json().unwrap()).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["at", "id", "module", "node", "payload"]);
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let text = r#"{"id":"a","module":"echo","node":"n1","at":1,"payload":null,"extra":1}"#;
        let err = parse(text.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }

    #[test]
    fn a_missing_field_is_refused() {
        let text = r#"{"id":"a","module":"echo","at":1,"payload":null}"#;
        let err = parse(text.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("node"), "{err}");
    }

    #[test]
    fn an_invalid_name_is_refused() {
        let text = r#"{"id":"a","module":"Echo.x","node":"n1","at":1,"payload":null}"#;
        assert!(matches!(
            parse(text.as_bytes()),
            Err(EventError::Malformed(_))
        ));
    }

    #[test]
    fn a_bad_id_is_refused_both_ways() {
        for id in ["", "has space", &"x".repeat(MAX_ID_LEN + 1)] {
            let e = EventEnvelope {
                id: id.to_string(),
                ..envelope()
            };
            assert!(
                matches!(e.to_json(), Err(EventError::BadId { .. })),
                "{id:?}"
            );
            let text = serde_json::to_vec(&e).unwrap();
            assert!(
                matches!(parse(&text), Err(EventError::BadId { .. })),
                "{id:?}"
            );
        }
    }

    #[test]
    fn size_is_bounded_both_ways() {
        let big = EventEnvelope {
            payload: serde_json::Value::String("x".repeat(MAX_ENVELOPE_BYTES)),
            ..envelope()
        };
        assert!(matches!(big.to_json(), Err(EventError::TooLarge { .. })));
        // Refused on size alone, before parsing: garbage of that size says so.
        let junk = vec![b' '; MAX_ENVELOPE_BYTES + 1];
        assert!(matches!(parse(&junk), Err(EventError::TooLarge { .. })));
        // Exactly at the bound still parses if it is an envelope.
        let mut at_bound = envelope().to_json().unwrap();
        at_bound.resize(MAX_ENVELOPE_BYTES, b' ');
        assert_eq!(parse(&at_bound).unwrap(), envelope());
        // Sending: an envelope of exactly the bound is sent, one byte more
        // is not; and the bound is the broker's 1 MiB, not less.
        let with = |n: usize| EventEnvelope {
            payload: serde_json::Value::String("x".repeat(n)),
            ..envelope()
        };
        let base = with(0).to_json().unwrap().len();
        let exact = with(MAX_ENVELOPE_BYTES - base);
        assert_eq!(exact.to_json().unwrap().len(), MAX_ENVELOPE_BYTES);
        let over = with(MAX_ENVELOPE_BYTES - base + 1);
        assert!(matches!(over.to_json(), Err(EventError::TooLarge { .. })));
        let half_mib = EventEnvelope {
            payload: serde_json::Value::String("x".repeat(512 * 1024)),
            ..envelope()
        };
        assert!(half_mib.to_json().is_ok());
    }
}
