//! Work queued under a seat's old name. A rename (`aliases.toml`, a row)
//! moves every holder and user to the new seat's subjects and stream: the
//! holder binds `seat_<new>` on `SEAT_<new>`, and nothing would ever take
//! what waits in `SEAT_<old>` again. The controller moves it: each message
//! published on the new seat's subject (into `SEAT_<new>`), then
//! acknowledged in the old stream, which goes once empty. What to move and
//! where each message goes is decided here; the bus crate carries it out.

use crate::catalogue::Catalogue;
use crate::manifest::Scope;
use crate::names::Name;
use crate::subjects;

/// A renamed seat that takes work: where its old name's work goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The seat's old name (`SEAT_<old>` holds what waits).
    pub old: Name,
    /// The seat it names now.
    pub seat: Name,
    /// One holder per node: work keeps the node it was queued for.
    pub node_scoped: bool,
    /// The work the seat accepts now.
    pub kinds: Vec<Name>,
}

/// Every renamed seat that takes work, by old name.
pub fn renamed(catalogue: &Catalogue) -> Vec<Renamed> {
    let mut out: Vec<Renamed> = catalogue
        .aliases()
        .entries()
        .iter()
        .filter_map(|a| {
            let seat = catalogue.resolve_seat(&a.old.value);
            let entry = catalogue.seat(&seat)?;
            (seat != a.old.value && !entry.decl.accepts.is_empty()).then(|| Renamed {
                old: a.old.value.clone(),
                node_scoped: entry.decl.scope.value == Scope::Node,
                kinds: entry.decl.accepts.iter().map(|k| k.value.clone()).collect(),
                seat,
            })
        })
        .collect();
    out.sort_by(|a, b| a.old.cmp(&b.old));
    out.dedup_by(|a, b| a.old == b.old);
    out
}

impl Renamed {
    /// The stream the old name's work waits in.
    pub fn stream(&self) -> String {
        subjects::seat_stream(&self.old)
    }

    /// What the controller publishes to move the work: each kind the seat
    /// accepts (for a node-scoped seat, on any node's), and the
    /// acknowledgements of its consumer on the old stream.
    pub fn publish_subjects(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .kinds
            .iter()
            .map(|k| {
                if self.node_scoped {
                    subjects::seat_any_node_work(&self.seat, k)
                } else {
                    subjects::seat_work(&self.seat, k)
                }
            })
            .collect();
        out.push(subjects::js_ack(&self.stream(), &self.mover()));
        out
    }

    /// The controller's consumer on the old stream.
    pub fn mover(&self) -> String {
        subjects::consumer::renamed_mover(&self.old)
    }

    /// Where work stored on `subject` under the old name goes, or why it
    /// cannot go anywhere (it stays, named).
    pub fn target(&self, subject: &str) -> Result<String, String> {
        let t: Vec<&str> = subject.split('.').collect();
        let (node, kind) = match t.as_slice() {
            ["mesh", "seat", s, "work", k] if *s == self.old.as_str() => (None, *k),
            ["mesh", "seat", s, "node", n, "work", k] if *s == self.old.as_str() => (Some(*n), *k),
            _ => return Err(format!("{subject} is no work subject of seat {}", self.old)),
        };
        let Some(kind) = self.kinds.iter().find(|k| k.as_str() == kind) else {
            return Err(format!(
                "seat {} does not accept {kind} work; it stays in {}",
                self.seat,
                self.stream()
            ));
        };
        match (self.node_scoped, node.map(Name::new)) {
            (false, _) => Ok(subjects::seat_work(&self.seat, kind)),
            (true, Some(Ok(node))) => Ok(subjects::seat_node_work(&self.seat, &node, kind)),
            (true, _) => Err(format!(
                "seat {} is node-scoped and {subject} names no node; it stays in {}",
                self.seat,
                self.stream()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{Alias, Aliases};
    use crate::diagnostic::Pos;
    use crate::manifest::{self, Located};
    use crate::testing::n;

    fn seat(name: &str, scope: &str, accepts: &str) -> String {
        format!(
            "[module]\nname = \"{name}-keeper\"\n[[seat]]\nname = \"{name}\"\nscope = \"{scope}\"\nprotocol = \"json\"\naccepts = [{accepts}]\n"
        )
    }

    fn catalogue(renames: &[(&str, &str)]) -> Catalogue {
        let texts = [
            seat("tasks", "mesh", "\"job\", \"purge\""),
            seat("filter", "node", "\"rule\""),
            seat("marker", "mesh", ""),
        ];
        let manifests = texts
            .iter()
            .enumerate()
            .map(|(i, t)| manifest::parse(&format!("m{i}.toml"), t).unwrap())
            .collect();
        let mut aliases = Aliases::new();
        for (old, new) in renames {
            aliases.push(Alias {
                old: Located::new(n(old), Pos::START),
                new: Located::new(n(new), Pos::START),
                file: "aliases.toml".into(),
            });
        }
        Catalogue::build(manifests, aliases)
    }

    #[test]
    fn a_renamed_seat_that_takes_work_moves_it_under_its_new_name() {
        let c = catalogue(&[("jobs", "tasks"), ("nft", "filter"), ("tag", "marker")]);
        let r = renamed(&c);
        // A marker takes no work: nothing waits under its old name.
        let olds: Vec<&str> = r.iter().map(|r| r.old.as_str()).collect();
        assert_eq!(olds, ["jobs", "nft"]);
        let (jobs, nft) = (&r[0], &r[1]);
        assert_eq!(jobs.stream(), "SEAT_jobs");
        assert_eq!(
            jobs.publish_subjects(),
            [
                "mesh.seat.tasks.work.job",
                "mesh.seat.tasks.work.purge",
                "$JS.ACK.SEAT_jobs.moved_jobs.>"
            ]
        );
        assert_eq!(
            nft.publish_subjects(),
            [
                "mesh.seat.filter.node.*.work.rule",
                "$JS.ACK.SEAT_nft.moved_nft.>"
            ]
        );
        assert_eq!(
            jobs.target("mesh.seat.jobs.work.job").as_deref(),
            Ok("mesh.seat.tasks.work.job")
        );
        // Queued for a node when the seat was node-scoped: the mesh seat
        // takes it all the same.
        assert_eq!(
            jobs.target("mesh.seat.jobs.node.n1.work.purge").as_deref(),
            Ok("mesh.seat.tasks.work.purge")
        );
        assert_eq!(
            nft.target("mesh.seat.nft.node.n2.work.rule").as_deref(),
            Ok("mesh.seat.filter.node.n2.work.rule")
        );
        // What cannot go anywhere says why, and stays.
        assert_eq!(
            jobs.target("mesh.seat.jobs.work.mop"),
            Err("seat tasks does not accept mop work; it stays in SEAT_jobs".into())
        );
        assert_eq!(
            nft.target("mesh.seat.nft.work.rule"),
            Err("seat filter is node-scoped and mesh.seat.nft.work.rule names no node; it stays in SEAT_nft".into())
        );
        // Another seat's work, of either form, is none of this move's.
        assert!(jobs.target("mesh.seat.tasks.work.job").is_err());
        assert!(jobs.target("mesh.seat.tasks.node.n1.work.job").is_err());
        assert!(jobs.target("mesh.seat.jobs.node.N!.work.job").is_ok());
        assert!(nft.target("mesh.seat.nft.node.N!.work.rule").is_err());
        // No rename, nothing to move.
        assert!(renamed(&catalogue(&[])).is_empty());
    }
}
