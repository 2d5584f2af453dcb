//! Reports (DESIGN §6): what a host says after applying a declaration, and
//! again whenever a module's state changes.
//!
//! Wire on `mesh.control.report.<node>` (stored in CONTROL): `{"id",
//! "node", "sequence", "modules": [{"name", "state": "running" | "starting" |
//! "failed" | "stopped", "reason", "restarts", "nkey"}], "refused"}`;
//! `id` is the host's, unique per report: a report is recorded once.
//! `refused` (optional) says why the host refused what it was sent — then
//! `sequence` is the last one it applied and nothing was changed.

use serde::{Deserialize, Serialize};

use crate::enrolment::BadMessage;
use crate::names::Name;
use crate::subjects;
use crate::users_file::UserCredential;

/// A node with a hundred modules and their last log lines fits easily.
pub const MAX_REPORT_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleState {
    Starting,
    Running,
    Failed,
    Stopped,
}

impl ModuleState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleState::Starting => "starting",
            ModuleState::Running => "running",
            ModuleState::Failed => "failed",
            ModuleState::Stopped => "stopped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleReport {
    pub name: Name,
    pub state: ModuleState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub restarts: u32,
    /// The module's NKey public key (`U…`), made by its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nkey: Option<String>,
    /// The version its declaration pinned (what runs, once `running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
    /// Its health as the host's check says (hosts before health: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ModuleHealth>,
}

/// A module's health as its host reports it (DESIGN "health and deploys").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModuleHealth {
    /// Not yet passing for `healthy_after`, and not failing.
    Starting,
    /// Passing without a break for `for_ms` when the report was made: the
    /// receiver counts from when it received it, on its own clock.
    Healthy { for_ms: u64 },
    /// The check failed `FAILURES_UNHEALTHY` times in a row (its last
    /// output), or the process keeps exiting.
    Unhealthy { reason: String },
}

/// Checks failed in a row before a module is unhealthy: one slow answer
/// is not a failed deploy.
pub const FAILURES_UNHEALTHY: u32 = 3;
/// A check's output quoted in a report, at most (its tail).
pub const MAX_HEALTH_REASON: usize = 1024;

impl ModuleHealth {
    pub fn as_str(&self) -> &'static str {
        match self {
            ModuleHealth::Starting => "starting",
            ModuleHealth::Healthy { .. } => "healthy",
            ModuleHealth::Unhealthy { .. } => "unhealthy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// 1 to 64 of `[A-Za-z0-9_-]`, unique per report of a node.
    pub id: String,
    pub node: Name,
    pub sequence: u64,
    pub modules: Vec<ModuleReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Where other nodes reach this node, as its host was told to advertise
    /// (`mesh host --advertise`): sent until it is recorded, and again when
    /// it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The module keys the host holds unspent (public halves): a module
    /// newly declared to it is given one, admitted before it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spare_keys: Vec<String>,
    /// The RabbitMQ password hash of each module and spare key, by public
    /// key (DESIGN "the bus seam").
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub amqp_hashes: std::collections::BTreeMap<String, String>,
}

impl Report {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("report JSON")
    }

    /// Reads and checks a report delivered on `subject`: its node must be
    /// the subject's, each module named once, each key a user key.
    pub fn parse(subject: &str, payload: &[u8]) -> Result<Report, BadMessage> {
        let prefix = "mesh.control.report.";
        let node = subject
            .strip_prefix(prefix)
            .and_then(|n| Name::new(n).ok())
            .filter(|n| subjects::report(n) == subject)
            .ok_or_else(|| BadMessage::Subject {
                subject: subject.to_string(),
            })?;
        if payload.len() > MAX_REPORT_BYTES {
            return Err(BadMessage::TooLarge {
                size: payload.len(),
                max: MAX_REPORT_BYTES,
            });
        }
        let r: Report = serde_json::from_slice(payload).map_err(|e| BadMessage::Json {
            reason: format!("line {} column {}", e.line(), e.column()),
        })?;
        if r.node != node {
            return Err(BadMessage::OtherNode {
                subject: node.to_string(),
                payload: r.node.to_string(),
            });
        }
        if r.id.is_empty()
            || r.id.len() > 64
            || !r
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(BadMessage::Json {
                reason: "the report id is not 1 to 64 of letters, digits, '_' and '-'".into(),
            });
        }
        if !crate::enrolment::spare_keys_ok(&r.spare_keys) {
            return Err(BadMessage::Json {
                reason: "the spare keys are not at most 16 distinct NKey user keys".into(),
            });
        }
        let keys: Vec<&str> = r
            .modules
            .iter()
            .filter_map(|m| m.nkey.as_deref())
            .chain(r.spare_keys.iter().map(String::as_str))
            .collect();
        if let Err(why) = crate::authority::amqp::check_announced(&r.amqp_hashes, &keys) {
            return Err(BadMessage::Json {
                reason: format!("amqp_hashes: {why}"),
            });
        }
        // Not quoted back: a hostile payload stays out of the log.
        if let Some(a) = &r.address
            && crate::names::check_address(a).is_err()
        {
            return Err(BadMessage::Json {
                reason: "the address is not an IP address or DNS name".into(),
            });
        }
        // Declarations are recorded with an i64 version: a sequence past it
        // answers no declaration there can ever be.
        if i64::try_from(r.sequence).is_err() {
            return Err(BadMessage::Json {
                reason: format!(
                    "the sequence is beyond {}, the largest a declaration can have",
                    i64::MAX
                ),
            });
        }
        let mut names: Vec<&Name> = r.modules.iter().map(|m| &m.name).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(BadMessage::Json {
                reason: "a module is reported twice".into(),
            });
        }
        if r.modules
            .iter()
            .filter_map(|m| m.nkey.as_deref())
            .any(|k| !UserCredential::is_user_nkey(k))
        {
            return Err(BadMessage::Key {
                field: "nkey",
                kind: "user",
            });
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn report() -> Report {
        Report {
            id: "0123abcd".into(),
            node: n("n1"),
            sequence: 3,
            modules: vec![ModuleReport {
                name: n("echo"),
                state: ModuleState::Running,
                reason: None,
                restarts: 0,
                nkey: Some(nkeys::KeyPair::new_user().public_key()),
                pinned: None,
                health: None,
            }],
            refused: None,
            address: None,
            spare_keys: Vec::new(),
            amqp_hashes: Default::default(),
        }
    }

    #[test]
    fn a_report_id_is_1_to_64_of_letters_digits_underscore_and_dash() {
        let parse = |id: &str| {
            let r = Report {
                id: id.into(),
                ..report()
            };
            Report::parse("mesh.control.report.n1", &r.to_json())
        };
        for ok in ["a", "A-b_9", &"x".repeat(64)] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", &"x".repeat(65), "a.b", "a b", "é"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("report id"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_report_announces_hashes_of_its_module_and_spare_keys_only() {
        let hash =
            crate::authority::amqp::announced_hash(&nkeys::KeyPair::new_user().seed().unwrap());
        let mut r = report();
        let module_key = r.modules[0].nkey.clone().unwrap();
        let spare = nkeys::KeyPair::new_user().public_key();
        r.spare_keys = vec![spare.clone()];
        r.amqp_hashes = [(module_key, hash.clone()), (spare, hash.clone())].into();
        assert_eq!(
            Report::parse("mesh.control.report.n1", &r.to_json()).unwrap(),
            r
        );
        let mut other = report();
        other.amqp_hashes = [(nkeys::KeyPair::new_user().public_key(), hash)].into();
        let e = Report::parse("mesh.control.report.n1", &other.to_json()).unwrap_err();
        assert!(e.to_string().contains("amqp_hashes"), "{e}");
    }

    #[test]
    fn a_report_round_trips_on_its_own_subject_only() {
        let r = report();
        assert_eq!(
            Report::parse("mesh.control.report.n1", &r.to_json()).unwrap(),
            r
        );
        assert!(matches!(
            Report::parse("mesh.control.report.n2", &r.to_json()),
            Err(BadMessage::OtherNode { .. })
        ));
        assert!(matches!(
            Report::parse("mesh.control.enrol.n1", &r.to_json()),
            Err(BadMessage::Subject { .. })
        ));
        let json = String::from_utf8(r.to_json()).unwrap();
        assert!(json.contains("\"state\":\"running\""), "{json}");
    }

    #[test]
    fn a_report_of_many_modules_with_their_last_lines_is_read() {
        let mut r = report();
        let m = r.modules[0].clone();
        r.modules = (0..100)
            .map(|i| ModuleReport {
                name: n(&format!("m{i}")),
                reason: Some("l".repeat(1500)),
                ..m.clone()
            })
            .collect();
        let json = r.to_json();
        assert!(json.len() > 150_000, "{}", json.len());
        assert_eq!(Report::parse("mesh.control.report.n1", &json).unwrap(), r);
    }

    #[test]
    fn health_and_the_pinned_version_travel_and_unknown_states_are_refused() {
        let mut r = report();
        r.modules[0].pinned = Some("v2".into());
        r.modules[0].health = Some(ModuleHealth::Healthy { for_ms: 1500 });
        let json = String::from_utf8(r.to_json()).unwrap();
        assert!(
            json.contains(r#""pinned":"v2","health":{"state":"healthy","for_ms":1500}"#),
            "{json}"
        );
        assert_eq!(
            Report::parse("mesh.control.report.n1", json.as_bytes()).unwrap(),
            r
        );
        r.modules[0].health = Some(ModuleHealth::Unhealthy {
            reason: "answered 503".into(),
        });
        let back = Report::parse("mesh.control.report.n1", &r.to_json()).unwrap();
        assert_eq!(
            back.modules[0].health.as_ref().map(ModuleHealth::as_str),
            Some("unhealthy")
        );
        let bad = json.replace(r#""state":"healthy""#, r#""state":"sick""#);
        assert!(Report::parse("mesh.control.report.n1", bad.as_bytes()).is_err());
        // A report without health (a host before it) still reads.
        r.modules[0].health = None;
        let json = String::from_utf8(r.to_json()).unwrap();
        assert!(!json.contains("health"), "{json}");
        assert_eq!(ModuleHealth::Starting.as_str(), "starting");
    }

    #[test]
    fn a_state_reads_as_it_is_written() {
        for s in [
            ModuleState::Starting,
            ModuleState::Running,
            ModuleState::Failed,
            ModuleState::Stopped,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn a_bad_report_is_refused_with_its_reason() {
        let sub = "mesh.control.report.n1";
        let mut twice = report();
        twice.modules.push(twice.modules[0].clone());
        assert!(matches!(
            Report::parse(sub, &twice.to_json()),
            Err(BadMessage::Json { .. })
        ));
        let mut badkey = report();
        badkey.modules[0].nkey = Some(nkeys::KeyPair::new_account().public_key());
        assert!(matches!(
            Report::parse(sub, &badkey.to_json()),
            Err(BadMessage::Key { .. })
        ));
        assert!(matches!(
            Report::parse(sub, b"{"),
            Err(BadMessage::Json { .. })
        ));
        let mut big = report().to_json();
        big.resize(MAX_REPORT_BYTES + 1, b' ');
        assert!(matches!(
            Report::parse(sub, &big),
            Err(BadMessage::TooLarge { .. })
        ));
        let mut future = report();
        future.sequence = u64::MAX;
        assert!(matches!(
            Report::parse(sub, &future.to_json()),
            Err(BadMessage::Json { .. })
        ));
        let mut largest = report();
        largest.sequence = i64::MAX as u64;
        assert_eq!(Report::parse(sub, &largest.to_json()).unwrap(), largest);
        let mut exact = report().to_json();
        exact.resize(MAX_REPORT_BYTES, b' ');
        assert!(Report::parse(sub, &exact).is_ok());
    }
}
