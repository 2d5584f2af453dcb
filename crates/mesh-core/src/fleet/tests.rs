use super::*;
use crate::catalogue::Aliases;
use crate::diagnostic::render_text;
use crate::manifest;

const AUDIT: &str = r#"[module]
name = "audit-log"
[tools]
serves = ["search", "tail"]
"#;

const GIT: &str = r#"[module]
name = "git-server"
"#;

fn cat() -> Catalogue {
    let ms = [
        ("audit-log/mesh.toml", AUDIT),
        ("git-server/mesh.toml", GIT),
    ]
    .iter()
    .map(|(p, t)| manifest::parse(p, t).unwrap())
    .collect();
    Catalogue::build(ms, Aliases::default())
}

fn errors(src: &str) -> Vec<Diagnostic> {
    read("fleet.toml", src, &cat()).expect_err("refused")
}

fn shown(src: &str) -> String {
    errors(src)
        .iter()
        .map(|d| render_text(d, Some(src)))
        .collect()
}

#[test]
fn a_good_file_reads() {
    let f = read(
        "fleet.toml",
        "[[node]]\nname = \"n1\"\nmodules = [\"audit-log\"]\n\
         [[person]]\nname = \"bob\"\ntools = [\"audit-log.search\"]\n\
         [[person]]\nname = \"ada\"\ntools = [\"*\"]\n[[token]]\nnode = \"n4\"\n",
        &cat(),
    )
    .unwrap();
    assert_eq!(f.nodes[0].modules[0].value.as_str(), "audit-log");
    assert_eq!(f.persons[1].tools, ToolAccess::All);
    assert_eq!(f.tokens[0].value.as_str(), "n4");
}

#[test]
fn every_problem_is_reported_at_once_with_the_fix() {
    let src = "[[node]]\nname = \"n1\"\nmodules = [\"audit-logg\"]\n\
               [[node]]\nnam = \"n2\"\n\
               [[person]]\nname = \"bob\"\ntools = [\"audit-log.serach\"]\n";
    let e = errors(src);
    let kinds: Vec<Kind> = e.iter().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        [Kind::BadValue, Kind::UnknownField, Kind::UnservedTool],
        "{e:#?}"
    );
    let text = shown(src);
    assert!(text.contains("fleet.toml:3:12: error[bad-value]"), "{text}");
    assert!(text.contains("did you mean `audit-log`?"), "{text}");
    assert!(text.contains("did you mean `name`?"), "{text}");
    assert!(text.contains("did you mean `audit-log.search`?"), "{text}");
    assert!(
        text.contains("  8 | tools = [\"audit-log.serach\"]"),
        "{text}"
    );
}

#[test]
fn a_person_listed_twice_is_refused_naming_both_lines() {
    let src = "[[person]]\nname = \"bob\"\ntools = [\"audit-log.search\"]\n\
               [[person]]\nname = \"bob\"\ntools = [\"*\"]\n";
    let e = errors(src);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].kind, Kind::DuplicateEntry);
    assert!(e[0].message.contains("lines 2 and 5"), "{}", e[0].message);
    for twice in [
        "[[node]]\nname = \"n1\"\n[[node]]\nname = \"n1\"\n",
        "[[token]]\nnode = \"n4\"\n[[token]]\nnode = \"n4\"\n",
    ] {
        assert_eq!(errors(twice)[0].kind, Kind::DuplicateEntry, "{twice}");
    }
}

#[test]
fn tools_nothing_serves_and_bad_shapes_are_refused() {
    let e = errors("[[person]]\nname = \"bob\"\ntools = [\"audt-log.search\"]\n");
    assert_eq!(e[0].kind, Kind::UnservedTool);
    assert!(e[0].is_error());
    assert_eq!(
        e[0].help.as_deref(),
        Some("did you mean `audit-log.search`?")
    );
    let e = errors("[[person]]\nname = \"bob\"\ntools = [\"*\", \"audit-log.search\"]\n");
    assert_eq!(e[0].kind, Kind::BadValue);
    let e = errors("[[person]]\nname = \"Bob\"\n");
    let kinds: Vec<Kind> = e.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, [Kind::MissingField, Kind::BadName], "{e:#?}");
    let e = errors("node = \"n1\"\n");
    assert_eq!(e[0].kind, Kind::WrongType);
    let e = errors("[[nodes]]\nname = \"n1\"\n");
    assert_eq!(e[0].help.as_deref(), Some("did you mean `node`?"));
    let e = errors("[[node]\n");
    assert_eq!(e[0].kind, Kind::TomlSyntax);
}
