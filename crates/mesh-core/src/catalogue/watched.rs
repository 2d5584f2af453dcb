//! What an operator may watch (`mesh events tail`): a filter naming an
//! emitter the catalogue does not hold, or an event it never emits, would
//! wait for ever in silence; it is refused at once with the closest name,
//! as a manifest's `consumes` is at registration.

use super::Catalogue;
use super::checks::names_list;
use crate::diagnostic::suggest;
use crate::manifest::{EventRef, Target};
use crate::names::Name;
use crate::subjects::{EventSelector, pattern};

/// Why no event can ever match a filter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unwatchable {
    #[error("no module `{module}` is registered, so nothing emits `{written}`{}", close_help(close, |c| format!("{c}.{}", written.event)))]
    UnknownModule {
        written: EventRef,
        module: Name,
        close: Option<Name>,
    },
    #[error("no seat or role `{seat}` is declared, so nothing emits `{written}`{}", close_help(close, |c| format!("seat:{c}.{}", written.event)))]
    UnknownSeat {
        written: EventRef,
        seat: Name,
        close: Option<Name>,
    },
    #[error("`{emitter}` never emits `{event}` (it emits {}){}", names_list(emitted), close_help(close, |c| format!("{emitter}.{c}")))]
    NotEmitted {
        emitter: Target,
        event: EventSelector,
        emitted: Vec<Name>,
        close: Option<Name>,
    },
}

fn close_help(close: &Option<Name>, write: impl Fn(&Name) -> String) -> String {
    close
        .as_ref()
        .map_or_else(String::new, |c| format!("; did you mean `{}`?", write(c)))
}

/// A filter written as a subject (`mesh.…`): taken as written when it
/// overlaps what `EVENTS` holds; None for any other filter (an event
/// reference, which [`Catalogue::event_filter`] reads).
pub fn subject_filter(filter: &str) -> Option<Result<String, String>> {
    use crate::subjects::{ALL_MODULE_EVENTS, ALL_SEAT_EVENTS, ALL_SEAT_NODE_EVENTS};
    if !filter.starts_with("mesh.") {
        return None;
    }
    let all = [ALL_MODULE_EVENTS, ALL_SEAT_EVENTS, ALL_SEAT_NODE_EVENTS];
    Some(if all.iter().any(|all| pattern::overlap(all, filter)) {
        Ok(filter.to_string())
    } else {
        Err(format!(
            "{filter:?} matches no event subject: EVENTS holds {}",
            all.join(", ")
        ))
    })
}

impl Catalogue {
    /// The subject `mesh events tail FILTER` reads: a subject as written,
    /// or what an event reference (`ticker.tick`, `seat:jobs.*`) is stored
    /// under when something registered emits it.
    pub fn event_filter(&self, filter: &str) -> Result<String, String> {
        if let Some(subject) = subject_filter(filter) {
            return subject;
        }
        let r = crate::manifest::refs::parse_event_ref(filter).map_err(|e| {
            format!(
                "{filter:?}: {e}; write <module>.<event>, seat:<seat>.<event> or a mesh. subject"
            )
        })?;
        self.watched(&r).map_err(|e| e.to_string())
    }

    /// The subject events of `r` are stored under, when something in the
    /// catalogue emits one of them.
    pub fn watched(&self, r: &EventRef) -> Result<String, Unwatchable> {
        let emitter = match &r.emitter {
            Target::Module(m) => Target::Module(m.clone()),
            Target::Seat(s) => Target::Seat(self.resolve_seat(s)),
        };
        let Some(publications) = self.publications(&emitter) else {
            return Err(match &r.emitter {
                Target::Module(module) => Unwatchable::UnknownModule {
                    written: r.clone(),
                    module: module.clone(),
                    close: close_name(module, self.manifests().iter().map(|m| &m.name.value)),
                },
                Target::Seat(seat) => Unwatchable::UnknownSeat {
                    written: r.clone(),
                    seat: seat.clone(),
                    close: close_name(seat, self.seats().map(|s| &s.decl.name.value)),
                },
            });
        };
        let resolved = EventRef {
            emitter: emitter.clone(),
            event: r.event.clone(),
        };
        let subject = self.event_subject(&resolved);
        if publications
            .iter()
            .any(|p| pattern::overlap(&subject, &p.subject))
        {
            return Ok(subject);
        }
        let emitted: Vec<Name> = publications.into_iter().map(|p| p.event).collect();
        let close = match &r.event {
            EventSelector::Named(e) => close_name(e, emitted.iter()),
            _ => None,
        };
        Err(Unwatchable::NotEmitted {
            emitter,
            event: r.event.clone(),
            emitted,
            close,
        })
    }
}

fn close_name<'a>(word: &Name, names: impl Iterator<Item = &'a Name>) -> Option<Name> {
    let names: Vec<&Name> = names.collect();
    suggest(word.as_str(), names.iter().map(|n| n.as_str()))
        .and_then(|c| names.into_iter().find(|n| n.as_str() == c).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::refs::parse_event_ref;
    use crate::testing::catalogue;

    fn watched(c: &Catalogue, filter: &str) -> Result<String, String> {
        c.watched(&parse_event_ref(filter).unwrap())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_filter_is_a_subject_as_written_or_what_a_reference_is_stored_under() {
        let c = catalogue(&[
            "[module]\nname = \"ticker\"\ndescription = \"t\"\n[events]\nemits = [\"tick\"]\n",
        ]);
        assert_eq!(subject_filter("ticker.tick"), None);
        assert_eq!(
            subject_filter("mesh.mod.*.event.>"),
            Some(Ok("mesh.mod.*.event.>".into()))
        );
        let Some(Err(why)) = subject_filter("mesh.control.report.n1") else {
            panic!("a subject EVENTS does not hold")
        };
        assert!(
            why.starts_with("\"mesh.control.report.n1\" matches no event subject"),
            "{why}"
        );
        assert_eq!(
            c.event_filter("ticker.tick"),
            Ok("mesh.mod.ticker.event.tick".into())
        );
        assert_eq!(
            c.event_filter("mesh.mod.x.event.y"),
            Ok("mesh.mod.x.event.y".into())
        );
        let why = c.event_filter("ticker").unwrap_err();
        assert!(
            why.starts_with("\"ticker\": ") && why.ends_with("or a mesh. subject"),
            "{why}"
        );
        assert!(
            c.event_filter("tickr.tick")
                .unwrap_err()
                .contains("did you mean `ticker.tick`")
        );
    }

    #[test]
    fn a_filter_nothing_emits_is_refused_with_the_closest_name() {
        let c = catalogue(&[
            "[module]\nname = \"ticker\"\ndescription = \"t\"\n[events]\nemits = [\"tick\", \"tock\"]\n",
        ]);
        assert_eq!(
            watched(&c, "ticker.tick"),
            Ok("mesh.mod.ticker.event.tick".into())
        );
        assert_eq!(
            watched(&c, "ticker.*"),
            Ok("mesh.mod.ticker.event.*".into())
        );
        assert_eq!(
            watched(&c, "tickr.tick"),
            Err("no module `tickr` is registered, so nothing emits `tickr.tick`; did you mean `ticker.tick`?".into())
        );
        assert_eq!(
            watched(&c, "nobody.tick"),
            Err("no module `nobody` is registered, so nothing emits `nobody.tick`".into())
        );
        assert_eq!(
            watched(&c, "ticker.tik"),
            Err(
                "`ticker` never emits `tik` (it emits `tick`, `tock`); did you mean `ticker.tick`?"
                    .into()
            )
        );
        assert_eq!(
            watched(&c, "seat:mesh-build-machne.built"),
            Err("no seat or role `mesh-build-machne` is declared, so nothing emits `seat:mesh-build-machne.built`; did you mean `seat:mesh-build-machine.built`?".into())
        );
        assert_eq!(
            watched(&c, "seat:mesh-build-machine.built"),
            Ok("mesh.seat.mesh-build-machine.event.built".into())
        );
    }
}
