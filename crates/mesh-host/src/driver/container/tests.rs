//! The run argv, the spec's checks, limits and the engine's lookup, as data.

use super::*;

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn spec() -> ContainerSpec {
    ContainerSpec {
        node: name("n1"),
        module: name("web"),
        host: "UHOST".into(),
        sequence: 42,
        image: Image::Archive("/var/lib/mesh/cache/web.tar".into()),
        args: vec!["--port".into(), "8080".into()],
        env_names: vec!["MESH_NODE".into(), "API_TOKEN".into()],
        mounts: vec![("/var/lib/mesh/keys/web.nk".into(), "/run/mesh/nkey".into())],
        workdir: Some(("/var/lib/mesh/work/web".into(), "/run/mesh/work".into())),
        stop_grace: Duration::from_millis(2500),
        secret_env: None,
        ulimits: Ulimits {
            nofile: Limit {
                soft: 1024,
                hard: 20000,
            },
            nproc: Limit {
                soft: 4096,
                hard: 32768,
            },
        },
    }
}

#[test]
fn the_run_argv_carries_labels_limits_names_and_read_only_mounts() {
    let argv = run_argv(Path::new("/usr/bin/podman"), &spec(), "abc123");
    let expected: Vec<String> = [
        "/usr/bin/podman",
        "run",
        "--rm",
        "--replace",
        "--name=mesh-n1-web-host",
        "--label=mesh.node=n1",
        "--label=mesh.module=web",
        "--label=mesh.host=UHOST",
        "--label=mesh.sequence=42",
        "--network=host",
        "--runtime=runc",
        "--init",
        "--ulimit=nofile=1024:20000",
        "--ulimit=nproc=4096:32768",
        "--stop-timeout=3",
        "--log-driver=passthrough",
        "--sig-proxy=true",
        "--pull=never",
        "--env",
        "MESH_NODE",
        "--env",
        "API_TOKEN",
        "--volume",
        "/var/lib/mesh/work/web:/run/mesh/work:rw",
        "--volume",
        "/var/lib/mesh/keys/web.nk:/run/mesh/nkey:ro",
        "--workdir=/run/mesh/work",
        "abc123",
        "--port",
        "8080",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(argv, expected);
}

#[test]
fn a_reference_may_be_pulled_and_an_archive_never() {
    let mut s = spec();
    s.image = Image::Reference(format!("registry.example/web@sha256:{}", "a".repeat(64)));
    let argv = run_argv(Path::new("podman"), &s, "registry.example/web");
    assert!(argv.contains(&"--pull=missing".to_string()), "{argv:?}");
}

#[test]
fn a_secret_env_goes_through_the_shim_never_to_the_engine() {
    let mut s = spec();
    s.secret_env = Some(SecretEnv {
        shim: "/state/bin/mesh-env-shim".into(),
        file: "/state/modules/web/secret-env".into(),
        image: ImageCommand {
            entrypoint: vec!["/web".into()],
            cmd: vec!["--default".into()],
        },
    });
    let argv = run_argv(Path::new("podman"), &s, "abc123");
    let at = argv.iter().position(|a| a == "abc123").unwrap();
    assert_eq!(
        argv[at + 1..],
        ["/run/mesh/secret-env", "/web", "--port", "8080"]
    );
    for expected in [
        "--entrypoint=/run/mesh/env-shim",
        "/state/bin/mesh-env-shim:/run/mesh/env-shim:ro",
        "/state/modules/web/secret-env:/run/mesh/secret-env:ro",
    ] {
        assert!(argv[..at].contains(&expected.to_string()), "{argv:?}");
    }
}

#[test]
fn no_env_value_or_glob_ever_reaches_argv() {
    let mut s = spec();
    s.env_names = vec!["OK_NAME".into(), "API_TOKEN=s3cr3t".into(), "A*".into()];
    let argv = run_argv(Path::new("podman"), &s, "img");
    assert!(argv.contains(&"OK_NAME".to_string()), "{argv:?}");
    assert!(
        !argv.iter().any(|a| a.contains("s3cr3t") || a == "A*"),
        "{argv:?}"
    );
    let e = s.check().unwrap_err().to_string();
    assert!(
        e.contains("\"API_TOKEN=s3cr3t\" is not a variable name"),
        "{e}"
    );
}

#[test]
fn a_spec_is_checked_for_what_the_argv_relies_on() {
    assert!(spec().check().is_ok());
    let with = |f: &dyn Fn(&mut ContainerSpec)| {
        let mut s = spec();
        f(&mut s);
        s.check().unwrap_err().to_string()
    };
    let e = with(&|s| s.image = Image::Archive("web.tar".into()));
    assert!(e.contains("not an absolute path"), "{e}");
    let e = with(&|s| s.env_names.push("1X".into()));
    assert!(e.contains("not a variable name"), "{e}");
    let e = with(&|s| s.mounts.push(("/k".into(), "/run/a:rw".into())));
    assert!(e.contains("':' or ','"), "{e}");
    let e = with(&|s| s.mounts.push(("k".into(), "/run/k".into())));
    assert!(e.contains("host path is not absolute"), "{e}");
    let e = with(&|s| s.mounts.push(("/k".into(), "run/k".into())));
    assert!(e.contains("in the container is not absolute"), "{e}");
    let e = with(&|s| s.mounts.push(("/k".into(), "/".into())));
    assert!(e.contains("root"), "{e}");
    let e = with(&|s| s.mounts.push(("/other".into(), "/run/mesh/nkey".into())));
    assert!(e.contains("same path"), "{e}");
    let e = with(&|s| s.workdir = Some(("/var/lib/mesh/work/web".into(), "work".into())));
    assert!(
        e.contains("working directory \"/var/lib/mesh/work/web:work\" is not an absolute"),
        "{e}"
    );
    let e = with(&|s| s.workdir = Some(("work/web".into(), "/run/mesh/work".into())));
    assert!(e.contains("not an absolute path on both sides"), "{e}");
}

#[test]
fn the_declared_image_and_names_are_executed_as_decided() {
    let archive = PathBuf::from("/var/lib/mesh/artifacts/sha256-ab");
    let archives = BTreeMap::from([(name("web"), archive.clone())]);
    // An artifact image is its cached archive: no string is searched
    // for a placeholder to tell which kind it is.
    assert_eq!(
        image(&ImageDecl::Artifact(name("web")), &archives).unwrap(),
        Image::Archive(archive)
    );
    // A reference is pulled as declared: pinned, or not, was decided by
    // `mesh check`.
    let reference = format!("registry.example/web@sha256:{}", "a".repeat(64));
    assert_eq!(
        image(&ImageDecl::Reference(reference.clone()), &archives).unwrap(),
        Image::Reference(reference)
    );
    let e = image(&ImageDecl::Artifact(name("db")), &archives).unwrap_err();
    assert!(
        e.to_string().contains("artifact db, which is not among"),
        "{e}"
    );
    // Which names may reach the engine was decided too: the spec
    // check holds only the variable-name shape (the one `mesh check`
    // applies), and refuses nothing else.
    for n in [
        "CONTAINERS_CONF",
        "CONTAINER_HOST",
        "STORAGE_OPTS",
        "1X",
        "A=b",
    ] {
        let mut s = spec();
        s.env_names.push(n.into());
        assert_eq!(
            s.check().is_ok(),
            mesh_core::container::is_env_name(n),
            "{n}"
        );
    }
}

#[test]
fn the_container_name_joins_node_module_and_the_host() {
    let key = "UDSEYZ6HVXLRILJQMLKKS3C6E5DJGFWPPFEWOLG7CQUW3A2UCUC3FHWO";
    assert_eq!(
        container_name(&name("edge-1"), &name("web"), key),
        "mesh-edge-1-web-dseyz6hv"
    );
    // Two meshes' node `local`: two names.
    let other = "UAJ5DNA2FW6KFDA4JCWDIBS4PVLII5SGSEAM3SPTDLZKFWLMMZS24LNJ";
    assert_ne!(
        container_name(&name("local"), &name("web"), key),
        container_name(&name("local"), &name("web"), other)
    );
}

#[test]
fn a_grace_rounds_up_to_whole_seconds() {
    assert_eq!(grace_secs(Duration::ZERO), 0);
    assert_eq!(grace_secs(Duration::from_secs(5)), 5);
    assert_eq!(grace_secs(Duration::from_millis(5001)), 6);
}

#[test]
fn limits_are_capped_where_podman_cannot_pass_more_on() {
    let l = |soft, hard| Limit { soft, hard };
    assert_eq!(capped((20000, 20000), NOFILE_CAP), l(20000, 20000));
    assert_eq!(capped((96363, 96363), NPROC_CAP), l(32768, 32768));
    assert_eq!(capped((1024, u64::MAX), NPROC_CAP), l(1024, 32768));
    assert_eq!(capped((0, 0), NOFILE_CAP), l(1024, NOFILE_CAP));
    let host = Ulimits::of_host();
    assert!(host.nproc.hard <= NPROC_CAP && host.nproc.soft <= host.nproc.hard);
    assert!(host.nofile.hard <= NOFILE_CAP && host.nofile.soft <= host.nofile.hard);
}

#[test]
fn a_missing_engine_says_to_install_podman() {
    let dir = tempfile::tempdir().unwrap();
    let path = Some(dir.path().as_os_str().to_owned());
    let e = find_engine(None, path.clone()).unwrap_err().to_string();
    assert_eq!(
        e,
        "no container engine: install podman (podman is not on PATH)"
    );
    let e = find_engine(Some("/nowhere/podman".into()), path.clone())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("no container engine: install podman"), "{e}");
    assert!(e.contains("MESH_CONTAINER_ENGINE=/nowhere/podman"), "{e}");

    use std::os::unix::fs::PermissionsExt as _;
    let fake = dir.path().join("podman");
    std::fs::write(&fake, "#!/bin/sh\n").unwrap();
    // Not executable yet: not an engine.
    assert!(find_engine(None, path.clone()).is_err());
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(find_engine(None, path.clone()).unwrap(), fake);
    assert_eq!(
        find_engine(Some("podman".into()), path.clone()).unwrap(),
        fake
    );
    assert_eq!(
        find_engine(Some(fake.clone().into_os_string()), None).unwrap(),
        fake
    );
    // Empty means unset.
    assert_eq!(find_engine(Some("".into()), path).unwrap(), fake);
}
