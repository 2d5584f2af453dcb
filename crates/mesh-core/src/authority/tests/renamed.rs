//! A renamed seat that takes work: the controller may publish on the new
//! seat's work subjects, to move what was queued under the old name.

use super::*;
use crate::catalogue::Alias;
use crate::diagnostic::Pos;
use crate::manifest::Located;

const TASKS: &str = r#"
[module]
name = "worker"
[[seat]]
name = "tasks"
scope = "mesh"
protocol = "json"
accepts = ["job"]
[holds]
seats = ["tasks"]
"#;

fn controller(renames: &[(&str, &str)]) -> Principal {
    let mut aliases = Aliases::new();
    for (old, new) in renames {
        aliases.push(Alias {
            old: Located::new(n(old), Pos::START),
            new: Located::new(n(new), Pos::START),
            file: "aliases.toml".into(),
        });
    }
    let c = Catalogue::build(vec![manifest::parse("w.toml", TASKS).unwrap()], aliases);
    let ps = derive(&c, &Records::default(), &ControllerSpec::default()).unwrap();
    find(&ps, CONTROLLER).clone()
}

#[test]
fn the_controller_may_move_work_queued_under_a_renamed_seats_old_name() {
    let p = controller(&[("jobs", "tasks")]);
    let grant = p
        .permissions
        .publish
        .iter()
        .find(|g| g.subject == "mesh.seat.tasks.work.job")
        .expect("a grant on the new seat's work");
    assert_eq!(
        grant.cause.to_string(),
        "record: seat jobs is renamed to tasks: the controller moves the work queued under the old name"
    );
    // Nothing renamed, nothing granted.
    let p = controller(&[]);
    assert!(
        !p.permissions
            .publish
            .iter()
            .any(|g| g.subject.starts_with("mesh.seat.tasks.")),
        "{:?}",
        p.permissions.publish
    );
}
