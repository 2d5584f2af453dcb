//! The tool wire format (DESIGN §4): a call is a core NATS request on the
//! tool's subject whose payload is any JSON value; the answer is one JSON
//! object, `{"ok": <value>}` or `{"error": "<text>"}`. Public interface: a
//! module in another language serves and calls with exactly these bytes.

use serde::{Deserialize, Serialize};

/// Largest request or answer accepted, in bytes: nats-server's default
/// `max_payload` (1 MiB); bigger could not have been sent.
pub const MAX_TOOL_BYTES: usize = 1024 * 1024;

/// A tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ToolReply {
    Ok(serde_json::Value),
    Error(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ToolWireError {
    #[error("{what} is {len} bytes; at most {MAX_TOOL_BYTES} are allowed")]
    TooLarge { what: &'static str, len: usize },
    #[error("{what} is not JSON: {source}")]
    NotJson {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads a request's payload: any JSON value, bounded; an empty payload is
/// `null` (a call with nothing to say).
pub fn parse_request(bytes: &[u8]) -> Result<serde_json::Value, ToolWireError> {
    if bytes.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    parse(bytes, "a tool request")
}

/// Reads an answer strictly: `{"ok": …}` or `{"error": "…"}`, nothing else.
pub fn parse_reply(bytes: &[u8]) -> Result<ToolReply, ToolWireError> {
    parse(bytes, "a tool answer")
}

fn parse<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
) -> Result<T, ToolWireError> {
    if bytes.len() > MAX_TOOL_BYTES {
        return Err(ToolWireError::TooLarge {
            what,
            len: bytes.len(),
        });
    }
    serde_json::from_slice(bytes).map_err(|source| ToolWireError::NotJson { what, source })
}

impl ToolReply {
    pub fn to_json(&self) -> Vec<u8> {
        // A Value and a String always serialise.
        serde_json::to_vec(self)
            .unwrap_or_else(|_| br#"{"error":"unserialisable answer"}"#.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_read_back_in_both_forms_and_nothing_else() {
        for r in [
            ToolReply::Ok(json!({"a": [1, 2]})),
            ToolReply::Error("no".into()),
        ] {
            assert_eq!(parse_reply(&r.to_json()).unwrap(), r);
        }
        assert_eq!(ToolReply::Ok(json!(1)).to_json(), br#"{"ok":1}"#);
        assert_eq!(ToolReply::Error("x".into()).to_json(), br#"{"error":"x"}"#);
        for bad in [
            &br#"{"ok":1,"error":"x"}"#[..],
            br#"{"other":1}"#,
            b"[]",
            b"",
            b"ok",
        ] {
            assert!(
                parse_reply(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn requests_are_any_json_bounded_at_the_byte() {
        // nats-server's default max_payload.
        assert_eq!(MAX_TOOL_BYTES, 1_048_576);
        assert_eq!(parse_request(b"").unwrap(), serde_json::Value::Null);
        assert_eq!(parse_request(br#"{"x":1}"#).unwrap(), json!({"x": 1}));
        assert!(matches!(
            parse_request(b"{nope"),
            Err(ToolWireError::NotJson { .. })
        ));
        let at = format!("\"{}\"", "a".repeat(MAX_TOOL_BYTES - 2));
        assert!(parse_request(at.as_bytes()).is_ok());
        let over = format!("\"{}\"", "a".repeat(MAX_TOOL_BYTES - 1));
        assert!(matches!(
            parse_request(over.as_bytes()),
            Err(ToolWireError::TooLarge { len, .. }) if len == MAX_TOOL_BYTES + 1
        ));
    }
}
