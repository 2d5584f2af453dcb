//! The catalogue as a whole: the role-event case both ways, the example
//! catalogue, alias resolution, and the positions later code cites.

use std::fs;
use std::path::Path;

use mesh_core::catalogue::{self, Aliases, Catalogue, Origin, builtin_roles};
use mesh_core::diagnostic::{Kind, Pos, Severity};
use mesh_core::manifest::{self, Manifest, Target};
use mesh_core::names::Name;
use mesh_core::placeholders::Placeholder;
use mesh_core::subjects::EventSelector;

fn parse(path: &str, text: &str) -> Manifest {
    manifest::parse(path, text).unwrap_or_else(|d| panic!("{path}: {d:#?}"))
}

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

const NOTIFIER_BUILT: &str = r#"[module]
name = "notifier"
[events]
consumes = ["seat:mesh-build-machine.built"]
"#;

#[test]
fn consuming_a_role_event_resolves_to_the_seat_subject_and_checks_clean() {
    let m = parse("notifier/mesh.toml", NOTIFIER_BUILT);
    let cat = Catalogue::build(vec![m], Aliases::new());
    let m = &cat.manifests()[0];
    let consumes = cat.consumes(m);
    assert_eq!(consumes.len(), 1);
    let c = &consumes[0];
    assert_eq!(c.subject, "mesh.seat.mesh-build-machine.event.built");
    assert_eq!(c.emitter, Target::Seat(n("mesh-build-machine")));
    assert_eq!(c.event, EventSelector::Named(n("built")));
    assert_eq!(
        (c.location.file.as_str(), c.location.line),
        ("notifier/mesh.toml", 4)
    );
    // The role publishes exactly that subject, declared by the mesh itself.
    let pubs = cat.publications(&c.emitter).unwrap();
    assert_eq!(pubs.len(), 1);
    assert_eq!(pubs[0].subject, c.subject);
    assert_eq!(pubs[0].origin, Origin::Mesh);
    assert_eq!(catalogue::check(&cat), vec![]);
}

#[test]
fn consuming_an_event_the_role_never_emits_is_reported() {
    let text = NOTIFIER_BUILT.replace(".built", ".finished");
    let cat = Catalogue::build(vec![parse("notifier/mesh.toml", &text)], Aliases::new());
    let diags = catalogue::check(&cat);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].kind, Kind::UnmatchedConsume);
    assert_eq!(diags[0].severity, Severity::Error);
    assert_eq!(diags[0].line(), 4);
    assert!(
        diags[0]
            .message
            .contains("mesh.seat.mesh-build-machine.event.finished"),
        "{}",
        diags[0].message
    );
    // What the emitter does publish is named, so the fix can be read off.
    assert!(
        diags[0].message.ends_with("(it emits `built`)"),
        "{}",
        diags[0].message
    );
}

#[test]
fn a_role_read_as_a_module_is_an_error_not_a_missing_emitter() {
    let text = NOTIFIER_BUILT.replace("seat:mesh-build-machine", "mesh-build-machine");
    let cat = Catalogue::build(vec![parse("notifier/mesh.toml", &text)], Aliases::new());
    let diags = catalogue::check(&cat);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].kind, Kind::SeatReadAsModule);
    assert_eq!(
        diags[0].help.as_deref(),
        Some("write `seat:mesh-build-machine.built`")
    );
    assert!(
        diags[0].message.ends_with(
            "mesh.mod.mesh-build-machine.event.built is published by nothing; \
             its holder publishes on mesh.seat.mesh-build-machine.event.built"
        ),
        "{}",
        diags[0].message
    );
}

#[test]
fn a_seat_tool_called_as_a_module_tool_names_both_subjects() {
    let git = r#"[module]
name = "git-server"
[[seat]]
name = "git"
scope = "mesh"
protocol = "git"
tools = ["clone"]
[holds]
seats = ["git"]
"#;
    let caller = r#"[module]
name = "mirror"
[tools]
uses = ["git.clone"]
"#;
    let cat = Catalogue::build(
        vec![
            parse("git-server/mesh.toml", git),
            parse("mirror/mesh.toml", caller),
        ],
        Aliases::new(),
    );
    let diags = catalogue::check(&cat);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].kind, Kind::SeatReadAsModule);
    assert_eq!(diags[0].help.as_deref(), Some("write `seat:git.clone`"));
    assert!(
        diags[0].message.ends_with(
            "mesh.mod.git.tool.clone is served by nothing; its holder serves mesh.seat.git.tool.clone"
        ),
        "{}",
        diags[0].message
    );
}

#[test]
fn builtin_roles_are_the_mesh_seats() {
    let roles = builtin_roles();
    let names: Vec<&str> = roles.iter().map(|r| r.name.value.as_str()).collect();
    assert_eq!(names, ["mesh-broker", "mesh-store", "mesh-build-machine"]);
    let bm = &roles[2];
    assert_eq!(bm.accepts[0].value.as_str(), "build");
    assert_eq!(bm.emits[0].value.as_str(), "built");
    assert_eq!(bm.scope.value, manifest::Scope::Mesh);
}

/// Loads `examples/catalogue` the way `mesh check` does.
fn example_catalogue() -> Catalogue {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalogue");
    let mut manifests = Vec::new();
    for e in fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path().join("mesh.toml");
        if p.is_file() {
            let text = fs::read_to_string(&p).unwrap();
            manifests.push(parse(&p.to_string_lossy(), &text));
        }
    }
    let aliases_path = root.join("aliases.toml");
    let aliases = Aliases::parse(
        &aliases_path.to_string_lossy(),
        &fs::read_to_string(&aliases_path).unwrap(),
    )
    .unwrap();
    Catalogue::build(manifests, aliases)
}

#[test]
fn the_example_catalogue_checks_clean() {
    let cat = example_catalogue();
    assert!(cat.manifests().len() >= 6);
    assert_eq!(catalogue::check(&cat), vec![]);
    // And its subscriptions are what the bus contract says.
    let notifier = cat.module(&n("notifier")).unwrap();
    let subjects: Vec<String> = cat
        .consumes(notifier)
        .into_iter()
        .map(|c| c.subject)
        .collect();
    assert_eq!(
        subjects,
        [
            "mesh.seat.mesh-build-machine.event.built",
            "mesh.seat.git.event.pushed",
            "mesh.mod.audit-log.event.entry-written",
        ]
    );
    let audit = cat.module(&n("audit-log")).unwrap();
    let all: Vec<String> = cat.consumes(audit).into_iter().map(|c| c.subject).collect();
    assert!(all.contains(&"mesh.seat.artifact-store.event.*".to_string()));
    assert!(all.contains(&"mesh.mod.git-server.event.>".to_string()));
    let search = cat.module(&n("code-search")).unwrap();
    let tools = cat.tool_uses(search);
    assert_eq!(tools[0].subject, "mesh.seat.git.tool.clone");
    // The packet filter is a marker seat, and valid.
    let pf = cat.seat(&n("packet-filter")).unwrap();
    assert!(pf.decl.is_marker());
    assert_eq!(pf.module, Some(n("nftables")));
}

#[test]
fn aliases_are_resolved_before_checking() {
    let store = parse(
        "artifact-store/mesh.toml",
        r#"[module]
name = "artifact-store"
[[seat]]
name = "artifact-store"
scope = "mesh"
protocol = "http"
emits = ["stored"]
tools = ["get"]
"#,
    );
    let user = parse(
        "audit-log/mesh.toml",
        r#"[module]
name = "audit-log"
[events]
consumes = ["seat:artifacts.stored"]
[tools]
uses = ["seat:artifacts.get"]
"#,
    );
    let aliases =
        Aliases::parse("aliases.toml", "[seats]\nartifacts = \"artifact-store\"\n").unwrap();
    let cat = Catalogue::build(vec![store, user], aliases);
    let m = cat.module(&n("audit-log")).unwrap();
    assert_eq!(
        cat.consumes(m)[0].subject,
        "mesh.seat.artifact-store.event.stored"
    );
    assert_eq!(
        cat.tool_uses(m)[0].subject,
        "mesh.seat.artifact-store.tool.get"
    );
    let diags = catalogue::check(&cat);
    // Only the advice to write the new name; nothing refused.
    assert!(
        diags.iter().all(|d| d.kind == Kind::RenamedSeat),
        "{diags:#?}"
    );
    assert_eq!(diags.len(), 2);
}

#[test]
fn a_marker_seat_is_valid() {
    let m = parse(
        "nftables/mesh.toml",
        r#"[module]
name = "nftables"
[[seat]]
name = "packet-filter"
scope = "node"
protocol = ""
[holds]
seats = ["packet-filter"]
"#,
    );
    assert!(m.seats[0].is_marker());
    let cat = Catalogue::build(vec![m], Aliases::new());
    assert_eq!(catalogue::check(&cat), vec![]);
}

#[test]
fn positions_later_code_cites_are_kept() {
    let text = r#"[module]
name = "audit-log"

[run]
command = ["audit-log", "--retention", "${file:retention}"]
env = { DB = "postgres://${seat:mesh-store:5432}/audit" }

[[seat]]
name = "audit"
scope = "mesh"
protocol = ""
emits = ["sealed"]

[holds]
seats = ["audit"]

[events]
emits = ["entry-written"]
consumes = ["seat:git.pushed"]

[tools]
serves = ["search"]
uses = ["audit-log.search"]

[uses]
seats = ["mesh-build-machine"]

[[file]]
name = "retention"
path = "retention.toml"
"#;
    let m = parse("a/mesh.toml", text);
    let at = |p: Pos| (p.line, p.col);
    assert_eq!(at(m.name.pos), (2, 8));
    assert_eq!(at(m.seats[0].name.pos), (9, 8));
    assert_eq!(at(m.seats[0].emits[0].pos), (12, 10));
    assert_eq!(at(m.holds[0].pos), (15, 10));
    assert_eq!(at(m.emits[0].pos), (18, 10));
    assert_eq!(at(m.consumes[0].pos), (19, 13));
    assert_eq!(at(m.serves[0].pos), (22, 11));
    assert_eq!(at(m.uses_tools[0].pos), (23, 9));
    assert_eq!(at(m.uses_seats[0].pos), (26, 10));
    assert_eq!(at(m.files[0].name.pos), (29, 8));
    // A placeholder's position is the placeholder's own, not its string's.
    let run = m.run.as_ref().unwrap();
    let file = &run.command[2].placeholders[0];
    assert_eq!(
        file.value,
        Placeholder::File {
            name: n("retention")
        }
    );
    assert_eq!((file.pos.line, file.pos.col, file.pos.len), (5, 41, 17));
    let seat = &run.env[0].value.placeholders[0];
    assert_eq!(at(seat.pos), (6, 26));
    assert_eq!(m.locate(m.consumes[0].pos).to_string(), "a/mesh.toml:19:13");
}

#[test]
fn refusals_point_at_the_offending_character() {
    let cases: [(&str, Kind, (usize, usize)); 4] = [
        // the `_`, not the string
        ("[module]\nname = \"audit_log\"\n", Kind::BadName, (2, 14)),
        // the placeholder inside the string, past an escape
        (
            "[module]\nname = \"a\"\n[run]\ncommand = [\"a\\tb ${file:x}\"]\n",
            Kind::UndeclaredFile,
            (4, 18),
        ),
        // `**` in the middle
        (
            "[module]\nname = \"a\"\n[events]\nconsumes = ['git.**.x']\n",
            Kind::MisplacedWildcard,
            (4, 18),
        ),
        (
            "[module]\nname = \"a\"\n[run]\ncommand = [\"\"\"\nx ${secret:k}\"\"\"]\n",
            Kind::SecretInCommand,
            (5, 3),
        ),
    ];
    for (text, kind, (line, col)) in cases {
        let diags = manifest::parse("m.toml", text).unwrap_err();
        assert_eq!(diags.len(), 1, "{diags:#?}");
        assert_eq!(
            (diags[0].kind, diags[0].location.line, diags[0].location.col),
            (kind, line, col),
            "{text}"
        );
    }
}

#[test]
fn did_you_mean_for_typos_and_misplaced_fields() {
    let d = manifest::parse(
        "m.toml",
        "[module]\nname = \"a\"\nemits = [\"x\"]\n[evnets]\n",
    )
    .unwrap_err();
    let helps: Vec<_> = d.iter().filter_map(|d| d.help.clone()).collect();
    assert_eq!(
        helps,
        [
            "`emits` belongs in [[seat]] or [events]",
            "did you mean `events`?"
        ]
    );
}

#[test]
fn an_emitted_name_reads_as_foreign_only_when_the_other_emits_it() {
    const GIT: &str = r#"
[module]
name = "git-server"
[[seat]]
name = "git"
scope = "mesh"
protocol = "git"
emits = ["pushed"]
[holds]
seats = ["git"]
[events]
emits = ["mirrored"]
"#;
    let foreign = |name: &str, emits: &str, holds: &str| {
        let text = format!("[module]\nname = \"{name}\"\n{holds}[events]\nemits = [{emits}]\n");
        let cat = Catalogue::build(
            vec![parse("git/mesh.toml", GIT), parse("x/mesh.toml", &text)],
            Aliases::new(),
        );
        catalogue::check(&cat)
            .into_iter()
            .filter(|d| d.kind == Kind::EventReadsAsForeign)
            .map(|d| d.message)
            .collect::<Vec<_>>()
    };
    // Another module's event, and a seat's event by a module not holding it.
    assert_eq!(foreign("x", "\"git-server-mirrored\"", "").len(), 1);
    assert_eq!(foreign("x", "\"git-pushed\"", "").len(), 1);
    // Its own name as the prefix, an event the other does not emit, and the
    // seat's event by its holder: each an ordinary local name.
    assert_eq!(
        foreign("x", "\"pushed\", \"x-pushed\"", ""),
        Vec::<String>::new()
    );
    assert_eq!(
        foreign("x", "\"git-server-other\"", ""),
        Vec::<String>::new()
    );
    assert_eq!(
        foreign("x", "\"git-pushed\"", "[holds]\nseats = [\"git\"]\n"),
        Vec::<String>::new()
    );
}

#[test]
fn an_unknown_seat_suggests_the_close_one_or_lists_the_declared() {
    let help = |claim: &str| {
        let text = format!("[module]\nname = \"x\"\n[holds]\nseats = [\"{claim}\"]\n");
        let cat = Catalogue::build(vec![parse("x/mesh.toml", &text)], Aliases::new());
        let diags = catalogue::check(&cat);
        let d = diags
            .iter()
            .find(|d| d.kind == Kind::UnknownSeat)
            .unwrap_or_else(|| panic!("{diags:#?}"));
        d.help.clone().unwrap_or_default()
    };
    assert_eq!(help("mesh-brokr"), "did you mean `mesh-broker`?");
    assert_eq!(
        help("zzzzzz"),
        "declare it in a module's [[seat]]; declared seats are: mesh-broker, mesh-build-machine, mesh-store"
    );
}
