use super::*;

const HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn artifact(module: &str, name: &str) -> BuiltArtifact {
    BuiltArtifact {
        name: n(name),
        reference: format!("artifact-store://{module}/{name}@sha256:{HEX}"),
        size: 4,
        sha256: HEX.into(),
    }
}

fn success() -> Built {
    Built {
        id: "b-1".into(),
        module: Some(n("hello")),
        version: Some("0123abcd".into()),
        artifacts: vec![artifact("hello", "hello")],
        inputs: vec![format!("artifact-store://base/lib@sha256:{HEX}")],
        failure: None,
        log_tail: "ok".into(),
    }
}

#[test]
fn a_success_reads_with_its_references() {
    let Outcome::Succeeded {
        module,
        version,
        artifacts,
        inputs,
        ..
    } = success().check().unwrap()
    else {
        panic!("not a success");
    };
    assert_eq!((module.as_str(), version.as_str()), ("hello", "0123abcd"));
    assert_eq!(
        artifacts[0].1.object_name(),
        format!("hello/hello/sha256-{HEX}")
    );
    assert_eq!(inputs[0].module.as_str(), "base");
}

#[test]
fn a_failure_names_no_module() {
    let mut b = success();
    b.failure = Some("exit status 1".into());
    assert!(matches!(
        b.check(),
        Err(BuiltError::FailureWithModule { .. })
    ));
    b.module = None;
    assert_eq!(
        b.check(),
        Ok(Outcome::Failed {
            id: "b-1".into(),
            reason: "exit status 1".into()
        })
    );
    b.failure = None;
    assert_eq!(b.check(), Err(BuiltError::Neither { id: "b-1".into() }));
}

#[test]
fn what_a_success_must_say() {
    let mut b = success();
    b.version = None;
    assert!(matches!(b.check(), Err(BuiltError::BadVersion { .. })));
    b.version = Some("a b".into());
    assert!(matches!(b.check(), Err(BuiltError::BadVersion { .. })));

    let mut b = success();
    b.artifacts.clear();
    assert_eq!(b.check(), Err(BuiltError::NoArtifacts { id: "b-1".into() }));

    let mut b = success();
    b.artifacts.push(artifact("hello", "hello"));
    assert!(
        matches!(b.check(), Err(BuiltError::BadArtifact { detail, .. }) if detail == "is named twice")
    );

    // A reference to another module's artifact, or with another digest,
    // would let a build claim bytes it did not make.
    let mut b = success();
    b.artifacts = vec![artifact("other", "hello")];
    assert!(
        matches!(b.check(), Err(BuiltError::BadArtifact { detail, .. }) if detail.contains("not as its module"))
    );
    let mut b = success();
    b.artifacts[0].sha256 = HEX.replace('9', "8");
    assert!(matches!(b.check(), Err(BuiltError::BadArtifact { .. })));
    b.artifacts[0].sha256 = "short".into();
    assert!(
        matches!(b.check(), Err(BuiltError::BadArtifact { detail, .. }) if detail.contains("64 lowercase"))
    );

    let mut b = success();
    b.inputs = vec!["artifact-store://base/lib".into()];
    assert!(matches!(b.check(), Err(BuiltError::BadInput { .. })));

    let mut b = success();
    b.id = "has space".into();
    assert_eq!(b.check(), Err(BuiltError::BadId));
    b.id = String::new();
    assert_eq!(b.check(), Err(BuiltError::BadId));
    b.id = "x".repeat(129);
    assert_eq!(b.check(), Err(BuiltError::BadId));
    b.id = "x".repeat(128);
    assert!(b.check().is_ok());
}

#[test]
fn the_wire_form_is_designs() {
    let failed = Built {
        id: "b-2".into(),
        module: None,
        version: None,
        artifacts: vec![],
        inputs: vec![],
        failure: Some("no".into()),
        log_tail: "t".into(),
    };
    let v: serde_json::Value = serde_json::to_value(&failed).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"id": "b-2", "module": null, "artifacts": [], "inputs": [], "failure": "no", "log_tail": "t"})
    );
    let back: Built = serde_json::from_value(
        serde_json::json!({"id": "b-2", "module": null, "failure": "no", "log_tail": "t"}),
    )
    .unwrap();
    assert_eq!(back, failed);
    assert!(
        serde_json::from_value::<Built>(serde_json::json!({"id": "x", "module": null, "extra": 1}))
            .is_err()
    );
    let req: BuildRequest = serde_json::from_value(
        serde_json::json!({"id": "1", "module": "m", "repository": "file:///r", "rev": "main"}),
    )
    .unwrap();
    assert_eq!(req.module.as_str(), "m");
}

#[test]
fn references_are_read_out_of_text() {
    let text = format!(
        "base = \"artifact-store://base/lib@sha256:{HEX}\"\n\
         again: artifact-store://base/lib@sha256:{HEX}, and\n\
         (artifact-store://tools/cc@sha256:{HEX})\n\
         broken artifact-store://base/lib@sha256:abc\n\
         artifact-store://Bad/x@sha256:{HEX}\n\
         trailing artifact-store://"
    );
    let found: Vec<String> = references_in(&text).iter().map(|r| r.to_string()).collect();
    assert_eq!(
        found,
        [
            format!("artifact-store://base/lib@sha256:{HEX}"),
            format!("artifact-store://tools/cc@sha256:{HEX}"),
        ]
    );
    assert!(references_in("").is_empty());
    // A digest longer than 64 is not read as its first 64.
    assert!(references_in(&format!("artifact-store://a/b@sha256:{HEX}0")).is_empty());
}

#[test]
fn revs_git_would_take_as_options_are_refused() {
    assert!(rev_ok("main"));
    assert!(rev_ok("v1.2^{commit}"));
    assert!(rev_ok(HEX));
    assert!(!rev_ok("--upload-pack=x"));
    assert!(!rev_ok("-x"));
    assert!(!rev_ok(""));
    assert!(!rev_ok("a b"));
    assert!(!rev_ok(&"a".repeat(201)));
    assert!(rev_ok(&"a".repeat(200)));
}

#[test]
fn versions_are_names_a_url_can_hold() {
    assert!(version_ok("1.4.0_rc-1"));
    assert!(version_ok(&"a".repeat(64)));
    assert!(!version_ok(&"a".repeat(65)));
    assert!(!version_ok(""));
    assert!(!version_ok("a/b"));
}

#[test]
fn a_log_tail_is_its_last_lines_within_a_bound() {
    assert_eq!(log_tail("a\nb\nc\n"), "a\nb\nc");
    let many: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let tail = log_tail(&many);
    assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
    assert!(
        tail.starts_with("line 60\n") && tail.ends_with("line 99"),
        "{tail}"
    );
    let long = "é".repeat(LOG_TAIL_BYTES);
    let tail = log_tail(&long);
    assert!(tail.len() <= LOG_TAIL_BYTES && tail.len() >= LOG_TAIL_BYTES - 2);
    assert_eq!(log_tail(""), "");
}

#[test]
fn a_repository_is_a_git_url_without_credentials() {
    use crate::manifest::repository_ok;
    for ok in [
        "file:///srv/git/hello",
        "https://git.example.net/hello.git",
        "https://git.example.net:8443/hello.git",
        "ssh://git@git.example.net/hello.git",
        "git@git.example.net:team/hello.git",
        "git://git.example.net/hello",
    ] {
        assert_eq!(repository_ok(ok), Ok(()), "{ok}");
    }
    for (bad, why) in [
        ("", "is empty"),
        ("-uhello", "option"),
        ("file:///a b", "space"),
        ("ftp://x/y", "scheme ftp"),
        ("https://tok@git.example.net/x", "credentials"),
        ("https://u:p@git.example.net/x", "credentials"),
        ("ssh://u:p@git.example.net/x", "credentials"),
        ("file://relative/x", "no path"),
        ("https://", "no path"),
        ("just-a-word", "not a git URL"),
        ("/srv/git/x", "not a git URL"),
        (":x", "not a git URL"),
    ] {
        let e = repository_ok(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn build_machines_are_the_assigned_holders_of_the_role() {
    let c = crate::testing::catalogue(&[
        "[module]\nname = \"builder\"\n[holds]\nseats = [\"mesh-build-machine\"]\n",
        "[module]\nname = \"asker\"\n[uses]\nseats = [\"mesh-build-machine\"]\n",
    ]);
    let (n1, n2) = (n("n1"), n("n2"));
    let (builder, asker, gone) = (n("builder"), n("asker"), n("gone"));
    assert_eq!(
        build_machines(
            &c,
            [
                (&n2, &builder),
                (&n1, &asker),
                (&n1, &builder),
                (&n1, &gone),
                (&n1, &builder)
            ]
        ),
        [(n1.clone(), builder.clone()), (n2.clone(), builder.clone())]
    );
    assert!(build_machines(&c, [(&n1, &asker)]).is_empty());
}

#[test]
fn a_compilers_page_of_errors_fits_in_a_tail() {
    // Twenty lines of 400 characters (8,020 bytes with their newlines):
    // under both bounds, so kept whole.
    let page: String = (0..20)
        .map(|i| format!("{i:03}{}\n", "e".repeat(396)))
        .collect();
    assert_eq!(log_tail(&page), page.trim_end());
    assert_eq!(LOG_TAIL_BYTES, 8 * 1024);
}

#[test]
fn a_tail_keeps_exactly_its_bound_in_bytes() {
    let line = "x".repeat(LOG_TAIL_BYTES);
    assert_eq!(
        log_tail(&line),
        line,
        "a line of exactly the bound is kept whole"
    );
    let over = format!("y{line}");
    assert_eq!(log_tail(&over), line, "one byte over: the first is cut");
}
