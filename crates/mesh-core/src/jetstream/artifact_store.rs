//! The artifact store's streams (DESIGN §6 Artifacts), decided here: what
//! they must be, and the steps that bring a server's to that — an older
//! store is changed in place, its objects kept.
//!
//! Write-once is the server's to enforce, not each writer's courtesy: a
//! holder of `mesh-build-machine` may publish on every meta subject (its
//! names are new each build, so no grant can name them ahead), and a second
//! meta on a stored name would make it point at other chunks. A stream
//! cannot refuse a second message on a meta subject while taking many on a
//! chunk subject (the per-subject limit is stream-wide), so metas are
//! written into a stream of their own, [`METAS_STREAM`]: one message per
//! subject, a second refused (`discard_new_per_subject`), which the
//! bucket's stream sources, keeping each meta's subject. Readers — NATS
//! clients, hosts — read the bucket exactly as before. Neither stream takes
//! a roll-up header: one on a chunk subject would purge a stored object's
//! chunks, and one carried over from the metas stream would stall sourcing.

use serde::Serialize;

use crate::subjects::artifact::{ALL_CHUNKS, ALL_META, METAS_STREAM, STREAM};

/// One of the store's streams, in the fields mesh decides; every other field
/// is left as the server has it (its storage, limits, placement).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreStream {
    pub name: String,
    pub subjects: Vec<String>,
    /// Streams whose messages it takes in under their own subjects.
    pub sources: Vec<String>,
    /// With `discard_new_per_subject`, a message past it is refused.
    pub max_msgs_per_subject: Option<i64>,
    /// Refuse the message past `max_msgs_per_subject` (needs discard new).
    pub discard_new_per_subject: bool,
    pub allow_rollup: bool,
    /// Readers get metas by direct get.
    pub allow_direct: bool,
    pub replicas: usize,
}

/// The metas stream: a name's first meta is its only one.
pub fn metas_stream(replicas: usize) -> StoreStream {
    StoreStream {
        name: METAS_STREAM.into(),
        subjects: vec![ALL_META.into()],
        sources: vec![],
        max_msgs_per_subject: Some(1),
        discard_new_per_subject: true,
        allow_rollup: false,
        allow_direct: true,
        replicas: replicas.max(1),
    }
}

/// The bucket's stream: chunks written to it, metas sourced into it.
pub fn bucket_stream(replicas: usize) -> StoreStream {
    StoreStream {
        name: STREAM.into(),
        subjects: vec![ALL_CHUNKS.into()],
        sources: vec![METAS_STREAM.into()],
        max_msgs_per_subject: None,
        discard_new_per_subject: false,
        allow_rollup: false,
        allow_direct: true,
        replicas: replicas.max(1),
    }
}

/// A store stream as found on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedStoreStream {
    /// Its fields as the server reports them.
    pub config: StoreStream,
    /// Meta subjects it holds a message on (how many names it knows).
    pub meta_subjects: u64,
    /// No message may be stored or removed any more.
    pub sealed: bool,
}

/// Both store streams as found (`None`: not on the server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObservedStore {
    pub bucket: Option<ObservedStoreStream>,
    pub metas: Option<ObservedStoreStream>,
}

/// One thing to do on the server, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum StoreStep {
    Create {
        spec: StoreStream,
    },
    /// In place; `changed` names the fields that differ, for the operator.
    Update {
        spec: StoreStream,
        changed: Vec<&'static str>,
    },
    /// The bucket's newest meta of every name it holds written into the
    /// metas stream (a name already there is refused, and skipped): names
    /// stored before the metas stream existed are written once too.
    CopyMetas,
}

impl StoreStep {
    /// How logs name it.
    pub fn describe(&self) -> String {
        match self {
            StoreStep::Create { spec } => format!("create stream {}", spec.name),
            StoreStep::Update { spec, changed } => {
                format!("update stream {} ({})", spec.name, changed.join(", "))
            }
            StoreStep::CopyMetas => format!("copy the metas of {STREAM} into {METAS_STREAM}"),
        }
    }
}

/// Why no step can make the store usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreRefusal {
    #[error(
        "stream {0} is sealed: nothing can be stored in it; delete the stream to have the artifact store recreated (and put the artifacts again)"
    )]
    Sealed(String),
}

fn changes(want: &StoreStream, found: &StoreStream) -> Vec<&'static str> {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    [
        (
            sorted(&want.subjects) != sorted(&found.subjects),
            "subjects",
        ),
        (sorted(&want.sources) != sorted(&found.sources), "sources"),
        (
            want.max_msgs_per_subject != found.max_msgs_per_subject,
            "max_msgs_per_subject",
        ),
        (
            want.discard_new_per_subject != found.discard_new_per_subject,
            "discard_new_per_subject",
        ),
        (want.allow_rollup != found.allow_rollup, "allow_rollup"),
        (want.allow_direct != found.allow_direct, "allow_direct"),
        (want.replicas != found.replicas.max(1), "replicas"),
    ]
    .into_iter()
    .filter_map(|(differs, field)| differs.then_some(field))
    .collect()
}

/// The steps that make the store what it must be. `controller`: the mesh's
/// controller asserts it, and brings every field in place (its copies too);
/// anyone else (a command) only creates what is missing with `replicas`
/// copies, and leaves a store the controller has not yet changed to it.
///
/// The bucket is changed before the metas stream is made (the server
/// refuses two streams on one subject, and an older bucket holds the meta
/// subjects), and a missing bucket is made after it (so it sources a
/// stream that exists).
pub fn plan_store(
    observed: &ObservedStore,
    replicas: usize,
    controller: bool,
) -> Result<Vec<StoreStep>, StoreRefusal> {
    let (bucket, metas) = (bucket_stream(replicas), metas_stream(replicas));
    for (spec, found) in [(&bucket, &observed.bucket), (&metas, &observed.metas)] {
        if found.as_ref().is_some_and(|f| f.sealed) {
            return Err(StoreRefusal::Sealed(spec.name.clone()));
        }
    }
    let update = |spec: &StoreStream, found: &ObservedStoreStream| {
        let changed = changes(spec, &found.config);
        (!changed.is_empty()).then(|| StoreStep::Update {
            spec: spec.clone(),
            changed,
        })
    };
    let mut steps = Vec::new();
    match &observed.bucket {
        None => {
            match &observed.metas {
                None => steps.push(StoreStep::Create {
                    spec: metas.clone(),
                }),
                Some(found) if controller => steps.extend(update(&metas, found)),
                Some(_) => {}
            }
            steps.push(StoreStep::Create { spec: bucket });
            return Ok(steps);
        }
        Some(found) if controller => steps.extend(update(&bucket, found)),
        // A bucket that still takes its own metas is the controller's to change.
        Some(found) if found.config.subjects.iter().any(|s| s == ALL_META) => return Ok(steps),
        Some(_) => {}
    }
    match &observed.metas {
        None => steps.push(StoreStep::Create { spec: metas }),
        Some(found) if controller => steps.extend(update(&metas, found)),
        Some(_) => {}
    }
    let held = observed.bucket.as_ref().map_or(0, |b| b.meta_subjects);
    let written_once = observed.metas.as_ref().map_or(0, |m| m.meta_subjects);
    if held > written_once {
        steps.push(StoreStep::CopyMetas);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(spec: &StoreStream, meta_subjects: u64) -> ObservedStoreStream {
        ObservedStoreStream {
            config: spec.clone(),
            meta_subjects,
            sealed: false,
        }
    }

    /// The bucket an object store client (and mesh before metas were a
    /// stream of their own) made: both subjects, roll-ups allowed.
    fn older_bucket(meta_subjects: u64) -> ObservedStoreStream {
        let mut older = found(&bucket_stream(1), meta_subjects);
        older.config.subjects = vec![ALL_CHUNKS.into(), ALL_META.into()];
        older.config.sources = vec![];
        older.config.allow_rollup = true;
        older
    }

    fn names(steps: &[StoreStep]) -> Vec<String> {
        steps.iter().map(StoreStep::describe).collect()
    }

    #[test]
    fn a_new_store_makes_the_metas_stream_before_the_bucket_that_sources_it() {
        for controller in [true, false] {
            let steps = plan_store(&ObservedStore::default(), 3, controller).unwrap();
            assert_eq!(
                steps,
                [
                    StoreStep::Create {
                        spec: metas_stream(3)
                    },
                    StoreStep::Create {
                        spec: bucket_stream(3)
                    },
                ]
            );
        }
        let metas = metas_stream(1);
        assert_eq!(
            (metas.max_msgs_per_subject, metas.discard_new_per_subject),
            (Some(1), true)
        );
        assert!(!metas.allow_rollup && !bucket_stream(1).allow_rollup);
        assert_eq!(bucket_stream(1).sources, [METAS_STREAM]);
        assert_eq!(bucket_stream(1).subjects, [ALL_CHUNKS]);
    }

    #[test]
    fn a_store_as_it_must_be_plans_nothing() {
        let observed = ObservedStore {
            bucket: Some(found(&bucket_stream(1), 7)),
            metas: Some(found(&metas_stream(1), 7)),
        };
        assert_eq!(plan_store(&observed, 1, true).unwrap(), []);
        assert_eq!(plan_store(&observed, 1, false).unwrap(), []);
    }

    #[test]
    fn an_older_bucket_is_changed_in_place_and_its_names_written_once() {
        let observed = ObservedStore {
            bucket: Some(older_bucket(4)),
            metas: None,
        };
        let steps = plan_store(&observed, 1, true).unwrap();
        assert_eq!(
            names(&steps),
            [
                "update stream OBJ_ARTIFACTS (subjects, sources, allow_rollup)",
                "create stream ARTIFACT_METAS",
                "copy the metas of OBJ_ARTIFACTS into ARTIFACT_METAS",
            ]
        );
        // A command leaves it to the controller: it could not make the
        // metas stream while the bucket holds the meta subjects.
        assert_eq!(plan_store(&observed, 1, false).unwrap(), []);
        // An empty older bucket has nothing to copy.
        let empty = ObservedStore {
            bucket: Some(older_bucket(0)),
            metas: None,
        };
        assert!(
            !plan_store(&empty, 1, true)
                .unwrap()
                .contains(&StoreStep::CopyMetas)
        );
    }

    #[test]
    fn names_the_metas_stream_lacks_are_copied_again() {
        // Stopped between making the metas stream and copying into it.
        let observed = ObservedStore {
            bucket: Some(found(&bucket_stream(1), 5)),
            metas: Some(found(&metas_stream(1), 2)),
        };
        for controller in [true, false] {
            assert_eq!(
                plan_store(&observed, 1, controller).unwrap(),
                [StoreStep::CopyMetas]
            );
        }
        // Sourcing lags behind the metas stream: nothing is missing.
        let lagging = ObservedStore {
            bucket: Some(found(&bucket_stream(1), 2)),
            metas: Some(found(&metas_stream(1), 5)),
        };
        assert_eq!(plan_store(&lagging, 1, true).unwrap(), []);
        // The metas stream lost: made again, and filled from the bucket.
        let lost = ObservedStore {
            bucket: Some(found(&bucket_stream(1), 5)),
            metas: None,
        };
        assert_eq!(
            names(&plan_store(&lost, 1, false).unwrap()),
            [
                "create stream ARTIFACT_METAS",
                "copy the metas of OBJ_ARTIFACTS into ARTIFACT_METAS",
            ]
        );
    }

    #[test]
    fn only_the_controller_changes_a_streams_fields_or_copies() {
        let mut metas = found(&metas_stream(1), 3);
        metas.config.discard_new_per_subject = false;
        metas.config.max_msgs_per_subject = None;
        let observed = ObservedStore {
            bucket: Some(found(&bucket_stream(1), 3)),
            metas: Some(metas),
        };
        assert_eq!(
            names(&plan_store(&observed, 3, true).unwrap()),
            [
                "update stream OBJ_ARTIFACTS (replicas)",
                "update stream ARTIFACT_METAS (max_msgs_per_subject, discard_new_per_subject, replicas)",
            ]
        );
        assert_eq!(plan_store(&observed, 3, false).unwrap(), []);
        // A bucket lost with its metas kept: made again, sourcing them all;
        // the metas stream's own fields are the controller's to bring in.
        let lost = ObservedStore {
            bucket: None,
            metas: Some(found(&metas_stream(1), 3)),
        };
        assert_eq!(
            plan_store(&lost, 1, false).unwrap(),
            [StoreStep::Create {
                spec: bucket_stream(1)
            }]
        );
        assert_eq!(
            names(&plan_store(&lost, 3, true).unwrap()),
            [
                "update stream ARTIFACT_METAS (replicas)",
                "create stream OBJ_ARTIFACTS",
            ]
        );
        assert_eq!(
            names(&plan_store(&lost, 3, false).unwrap()),
            ["create stream OBJ_ARTIFACTS"]
        );
    }

    #[test]
    fn a_direct_get_turned_off_is_turned_on_and_a_stream_reporting_zero_copies_has_one() {
        let mut bucket = found(&bucket_stream(1), 0);
        bucket.config.allow_direct = false;
        bucket.config.replicas = 0;
        let observed = ObservedStore {
            bucket: Some(bucket),
            metas: Some(found(&metas_stream(1), 0)),
        };
        assert_eq!(
            names(&plan_store(&observed, 1, true).unwrap()),
            ["update stream OBJ_ARTIFACTS (allow_direct)"]
        );
    }

    #[test]
    fn a_sealed_stream_is_refused_naming_it() {
        for (bucket_sealed, name) in [(true, STREAM), (false, METAS_STREAM)] {
            let mut bucket = found(&bucket_stream(1), 0);
            let mut metas = found(&metas_stream(1), 0);
            bucket.sealed = bucket_sealed;
            metas.sealed = !bucket_sealed;
            let observed = ObservedStore {
                bucket: Some(bucket),
                metas: Some(metas),
            };
            let err = plan_store(&observed, 1, false).unwrap_err();
            assert_eq!(err, StoreRefusal::Sealed(name.into()));
            assert!(err.to_string().contains("delete the stream"), "{err}");
        }
    }
}
