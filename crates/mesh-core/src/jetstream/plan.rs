//! Asserting the JetStream objects, decided here: from the objects the mesh
//! wants and what the server was observed to hold, the steps that make the
//! server agree — streams before consumers — or the refusal that no step can
//! mend. The bus crate observes, hands the observation here, and executes
//! each step as it is, so what an assert will do can be printed and
//! unit-tested without a server (the reconcile shape, see the crate docs).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ConsumerSpec, Objects, Retention, StreamSpec};

/// What the server holds, in the fields mesh decides; everything else the
/// server fills in is not mesh's to compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Streams found, by name.
    pub streams: BTreeMap<String, ObservedStream>,
    /// Consumers found, by (stream, consumer name).
    pub consumers: BTreeMap<(String, String), ObservedConsumer>,
}

/// A stream as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedStream {
    pub subjects: Vec<String>,
    /// `None`: a retention mesh never uses (interest).
    pub retention: Option<Retention>,
    pub max_msgs_per_subject: Option<i64>,
    pub max_age_secs: Option<u64>,
    pub replicas: usize,
}

/// A consumer as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedConsumer {
    /// `None` for a pull consumer: one a host has no authority to bind.
    pub deliver_subject: Option<String>,
    pub deliver_group: Option<String>,
    /// Both of the server's filter fields, as one list in any order.
    pub filter_subjects: Vec<String>,
    pub ack_wait_secs: u64,
    pub max_deliver: Option<i64>,
    /// Whether every delivery must be acknowledged; mesh's always are.
    pub explicit_ack: bool,
}

/// One thing to do on the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum ObjectStep {
    CreateStream {
        spec: StreamSpec,
    },
    /// `changed` names the fields that differ, for the operator.
    UpdateStream {
        spec: StreamSpec,
        changed: Vec<&'static str>,
    },
    CreateConsumer {
        spec: ConsumerSpec,
    },
    UpdateConsumer {
        spec: ConsumerSpec,
        changed: Vec<&'static str>,
    },
}

impl ObjectStep {
    /// `stream NAME` or `consumer NAME on STREAM`: how logs and reports name
    /// the object.
    pub fn object(&self) -> String {
        match self {
            ObjectStep::CreateStream { spec } | ObjectStep::UpdateStream { spec, .. } => {
                format!("stream {}", spec.name)
            }
            ObjectStep::CreateConsumer { spec } | ObjectStep::UpdateConsumer { spec, .. } => {
                format!("consumer {} on {}", spec.name, spec.stream)
            }
        }
    }

    pub fn is_create(&self) -> bool {
        matches!(
            self,
            ObjectStep::CreateStream { .. } | ObjectStep::CreateConsumer { .. }
        )
    }
}

/// Why the server cannot be brought to agree by any step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "consumer {consumer} cannot be asserted: its stream {stream} does not exist; assert the stream first (was it deleted?)"
    )]
    MissingStream { consumer: String, stream: String },
    #[error(
        "stream {stream} exists with {found} retention but the mesh needs {wanted}; the server cannot switch a stream to or from work-queue retention, so delete it and let the controller recreate it"
    )]
    RetentionMismatch {
        stream: String,
        found: String,
        wanted: String,
    },
}

fn retention_name(r: Option<Retention>) -> String {
    match r {
        Some(Retention::Limits) => "limits".into(),
        Some(Retention::WorkQueue) => "work-queue".into(),
        None => "interest".into(),
    }
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v.dedup();
    v
}

fn stream_changes(want: &StreamSpec, found: &ObservedStream) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if sorted(&want.subjects) != sorted(&found.subjects) {
        changed.push("subjects");
    }
    if want.max_msgs_per_subject != found.max_msgs_per_subject {
        changed.push("max_msgs_per_subject");
    }
    if want.max_age_secs != found.max_age_secs {
        changed.push("max_age");
    }
    // A cluster grown from one server takes its streams' copies along
    // (the server scales a stream up or down in place).
    if want.replicas != found.replicas {
        changed.push("replicas");
    }
    changed
}

fn consumer_changes(want: &ConsumerSpec, found: &ObservedConsumer) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if found.deliver_subject.as_deref() != Some(want.deliver_subject.as_str()) {
        changed.push("deliver_subject");
    }
    if want.deliver_group != found.deliver_group {
        changed.push("deliver_group");
    }
    if sorted(&want.filter_subjects) != sorted(&found.filter_subjects) {
        changed.push("filter_subjects");
    }
    if want.ack_wait_secs != found.ack_wait_secs {
        changed.push("ack_wait");
    }
    if want.max_deliver != found.max_deliver {
        changed.push("max_deliver");
    }
    if !found.explicit_ack {
        changed.push("ack_policy");
    }
    changed
}

/// The steps that bring the server from `observed` to `wanted`: every
/// stream's step before any consumer's; nothing for an object that already
/// agrees, so asserting twice plans nothing the second time. A consumer
/// whose stream is neither wanted nor found is refused naming the stream, so
/// whoever reads it looks for a deletion, not for reversed lines.
pub fn plan(wanted: &Objects, observed: &Observed) -> Result<Vec<ObjectStep>, PlanError> {
    let mut steps = Vec::new();
    for s in &wanted.streams {
        match observed.streams.get(&s.name) {
            None => steps.push(ObjectStep::CreateStream { spec: s.clone() }),
            Some(found) => {
                if found.retention != Some(s.retention) {
                    return Err(PlanError::RetentionMismatch {
                        stream: s.name.clone(),
                        found: retention_name(found.retention),
                        wanted: retention_name(Some(s.retention)),
                    });
                }
                let changed = stream_changes(s, found);
                if !changed.is_empty() {
                    steps.push(ObjectStep::UpdateStream {
                        spec: s.clone(),
                        changed,
                    });
                }
            }
        }
    }
    for c in &wanted.consumers {
        let stream_wanted = wanted.streams.iter().any(|s| s.name == c.stream);
        if !stream_wanted && !observed.streams.contains_key(&c.stream) {
            return Err(PlanError::MissingStream {
                consumer: c.name.clone(),
                stream: c.stream.clone(),
            });
        }
        match observed.consumers.get(&(c.stream.clone(), c.name.clone())) {
            None => steps.push(ObjectStep::CreateConsumer { spec: c.clone() }),
            Some(found) => {
                let changed = consumer_changes(c, found);
                if !changed.is_empty() {
                    steps.push(ObjectStep::UpdateConsumer {
                        spec: c.clone(),
                        changed,
                    });
                }
            }
        }
    }
    Ok(steps)
}

impl ObservedStream {
    /// What the server would report for a stream created from `spec`.
    pub fn from_spec(spec: &StreamSpec) -> Self {
        ObservedStream {
            subjects: spec.subjects.clone(),
            retention: Some(spec.retention),
            max_msgs_per_subject: spec.max_msgs_per_subject,
            max_age_secs: spec.max_age_secs,
            replicas: spec.replicas,
        }
    }
}

impl ObservedConsumer {
    /// What the server would report for a consumer created from `spec`.
    pub fn from_spec(spec: &ConsumerSpec) -> Self {
        ObservedConsumer {
            deliver_subject: Some(spec.deliver_subject.clone()),
            deliver_group: spec.deliver_group.clone(),
            filter_subjects: spec.filter_subjects.clone(),
            ack_wait_secs: spec.ack_wait_secs,
            max_deliver: spec.max_deliver,
            explicit_ack: true,
        }
    }
}

impl Observed {
    /// What the server holds once `objects` were all created: the
    /// observation after a complete assert.
    pub fn of(objects: &Objects) -> Self {
        let mut o = Observed::default();
        for s in &objects.streams {
            o.streams
                .insert(s.name.clone(), ObservedStream::from_spec(s));
        }
        for c in &objects.consumers {
            o.consumers.insert(
                (c.stream.clone(), c.name.clone()),
                ObservedConsumer::from_spec(c),
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::DEFAULT_ACK_WAIT_SECS;

    fn stream(name: &str, subjects: &[&str], retention: Retention) -> StreamSpec {
        StreamSpec {
            name: name.into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            retention,
            max_msgs_per_subject: None,
            max_age_secs: None,
            replicas: 1,
        }
    }

    fn consumer(stream: &str, name: &str, filters: &[&str]) -> ConsumerSpec {
        ConsumerSpec {
            stream: stream.into(),
            name: name.into(),
            deliver_subject: format!("mesh.deliver.{name}"),
            deliver_group: None,
            filter_subjects: filters.iter().map(|s| s.to_string()).collect(),
            ack_wait_secs: DEFAULT_ACK_WAIT_SECS,
            max_deliver: None,
        }
    }

    fn wanted() -> Objects {
        Objects {
            streams: vec![
                stream("NODES", &["mesh.node.*.declaration"], Retention::Limits),
                stream(
                    "CONTROL",
                    &["mesh.control.report.*", "mesh.control.enrol.*"],
                    Retention::WorkQueue,
                ),
            ],
            consumers: vec![
                consumer("NODES", "n1", &["mesh.node.n1.declaration"]),
                consumer("CONTROL", "controller_control", &[]),
            ],
        }
    }

    fn objects_of(steps: &[ObjectStep]) -> Vec<String> {
        steps.iter().map(ObjectStep::object).collect()
    }

    #[test]
    fn nothing_to_do_when_the_server_agrees() {
        let w = wanted();
        assert_eq!(plan(&w, &Observed::of(&w)), Ok(vec![]));
        // Filters in another order are the same filters.
        let mut o = Observed::of(&w);
        o.streams.get_mut("CONTROL").unwrap().subjects.reverse();
        assert_eq!(plan(&w, &o), Ok(vec![]));
    }

    #[test]
    fn an_empty_server_gets_every_stream_before_any_consumer() {
        let steps = plan(&wanted(), &Observed::default()).unwrap();
        assert_eq!(
            objects_of(&steps),
            [
                "stream NODES",
                "stream CONTROL",
                "consumer n1 on NODES",
                "consumer controller_control on CONTROL"
            ]
        );
        assert!(steps.iter().all(ObjectStep::is_create));
    }

    #[test]
    fn a_missing_stream_is_created_and_its_consumers_with_it() {
        let w = wanted();
        let mut o = Observed::of(&w);
        // Deleting a stream takes its consumers with it.
        o.streams.remove("NODES");
        o.consumers.remove(&("NODES".into(), "n1".into()));
        let steps = plan(&w, &o).unwrap();
        assert_eq!(
            steps,
            [
                ObjectStep::CreateStream {
                    spec: w.streams[0].clone()
                },
                ObjectStep::CreateConsumer {
                    spec: w.consumers[0].clone()
                },
            ]
        );
    }

    #[test]
    fn a_consumer_whose_stream_is_neither_wanted_nor_found_is_refused_naming_it() {
        let w = Objects {
            streams: vec![],
            consumers: wanted().consumers,
        };
        let mut o = Observed::of(&wanted());
        o.streams.remove("NODES");
        let e = plan(&w, &o).unwrap_err();
        assert_eq!(
            e,
            PlanError::MissingStream {
                consumer: "n1".into(),
                stream: "NODES".into()
            }
        );
        assert!(e.to_string().contains("stream NODES does not exist"), "{e}");
        // Another stream being wanted does not stand in for the missing one.
        let w = Objects {
            streams: vec![wanted().streams[1].clone()],
            consumers: wanted().consumers,
        };
        assert!(matches!(
            plan(&w, &o),
            Err(PlanError::MissingStream { stream, .. }) if stream == "NODES"
        ));
        // A consumer on a stream that is found but not wanted this time is fine.
        let o = Observed::of(&wanted());
        assert_eq!(plan(&w, &o), Ok(vec![]));
    }

    #[test]
    fn a_changed_stream_is_updated_and_its_agreeing_consumer_left_alone() {
        let w = wanted();
        let mut o = Observed::of(&w);
        let found = o.streams.get_mut("CONTROL").unwrap();
        found.subjects = vec!["mesh.control.>".into()];
        found.max_msgs_per_subject = Some(1);
        let steps = plan(&w, &o).unwrap();
        assert!(!steps[0].is_create());
        assert_eq!(
            steps,
            [ObjectStep::UpdateStream {
                spec: w.streams[1].clone(),
                changed: vec!["subjects", "max_msgs_per_subject"],
            }]
        );
    }

    /// A single server's streams, the genesis now a cluster of three: each
    /// stream is scaled to three copies in place, named as the change.
    #[test]
    fn a_stream_with_other_copies_than_wanted_is_scaled() {
        let mut w = wanted();
        let o = Observed::of(&w);
        for s in &mut w.streams {
            s.replicas = 3;
        }
        let steps = plan(&w, &o).unwrap();
        assert_eq!(steps.len(), w.streams.len(), "{steps:?}");
        for (step, spec) in steps.iter().zip(&w.streams) {
            assert_eq!(
                step,
                &ObjectStep::UpdateStream {
                    spec: spec.clone(),
                    changed: vec!["replicas"],
                }
            );
        }
        assert_eq!(plan(&w, &Observed::of(&w)), Ok(vec![]));
    }

    #[test]
    fn a_consumer_on_a_changed_stream_that_differs_itself_is_updated_after_the_stream() {
        let w = wanted();
        let mut o = Observed::of(&w);
        o.streams.get_mut("NODES").unwrap().subjects = vec!["mesh.node.>".into()];
        let found = o.consumers.get_mut(&("NODES".into(), "n1".into())).unwrap();
        found.filter_subjects = vec!["mesh.node.n2.declaration".into()];
        found.ack_wait_secs = 1;
        found.max_deliver = Some(5);
        found.deliver_group = Some("x".into());
        found.explicit_ack = false;
        let steps = plan(&w, &o).unwrap();
        assert_eq!(
            steps,
            [
                ObjectStep::UpdateStream {
                    spec: w.streams[0].clone(),
                    changed: vec!["subjects"],
                },
                ObjectStep::UpdateConsumer {
                    spec: w.consumers[0].clone(),
                    changed: vec![
                        "deliver_group",
                        "filter_subjects",
                        "ack_wait",
                        "max_deliver",
                        "ack_policy"
                    ],
                },
            ]
        );
        // A pull consumer in a push consumer's place: its deliver subject differs.
        let mut o = Observed::of(&w);
        o.consumers
            .get_mut(&("NODES".into(), "n1".into()))
            .unwrap()
            .deliver_subject = None;
        assert!(matches!(
            &plan(&w, &o).unwrap()[..],
            [ObjectStep::UpdateConsumer { changed, .. }] if changed == &["deliver_subject"]
        ));
    }

    #[test]
    fn a_stream_of_the_wrong_retention_is_refused() {
        let w = wanted();
        let mut o = Observed::of(&w);
        o.streams.get_mut("CONTROL").unwrap().retention = Some(Retention::Limits);
        let e = plan(&w, &o).unwrap_err();
        assert_eq!(
            e,
            PlanError::RetentionMismatch {
                stream: "CONTROL".into(),
                found: "limits".into(),
                wanted: "work-queue".into()
            }
        );
        o.streams.get_mut("CONTROL").unwrap().retention = None;
        assert!(matches!(
            plan(&w, &o),
            Err(PlanError::RetentionMismatch { found, .. }) if found == "interest"
        ));
    }

    #[test]
    fn a_plan_prints_as_data() {
        let steps = plan(&wanted(), &Observed::default()).unwrap();
        let json = serde_json::to_value(&steps[0]).unwrap();
        assert_eq!(json["step"], "create-stream");
        assert_eq!(json["spec"]["name"], "NODES");
        // A single server's plan says nothing of copies; a clustered bus's
        // plan names them (an operator reading it must see R3, not assume it).
        assert!(json["spec"].get("replicas").is_none(), "{json}");
        let mut w = wanted();
        for s in &mut w.streams {
            s.replicas = 3;
        }
        let steps = plan(&w, &Observed::default()).unwrap();
        let json = serde_json::to_value(&steps[0]).unwrap();
        assert_eq!(json["spec"]["replicas"], 3, "{json}");
    }
}
