//! Bad operator input to the store and to `mesh fleet load`, from the real
//! binary: for every case the exit code, the message (what is wrong and what
//! to do), no panic, nothing written or lost (store rows and secret files
//! compared before and after), and no secret, hash or password printed.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .canonicalize()
        .unwrap()
}

fn catalogue() -> String {
    examples().join("catalogue").display().to_string()
}

const FULL: &str = include_str!("../../../../examples/fleet.toml");

/// One node and one person of the example fleet.
const SMALL: &str = "[[node]]\nname = \"n1\"\nmodules = [\"nats-broker\", \"git-server\", \"audit-log\", \"nftables\"]\n\
                     [[person]]\nname = \"alice\"\ntools = [\"*\"]\n";

/// Whether `text` holds something shaped like an NKey seed: `SU` and 56 more
/// base32 characters (a public key is 56 in all, so never matches).
fn seed_in(text: &str) -> bool {
    let b = text.as_bytes();
    let base32 = |c: &u8| c.is_ascii_uppercase() || (b'2'..=b'7').contains(c);
    (0..b.len().saturating_sub(57))
        .any(|i| b[i..].starts_with(b"SU") && b[i..i + 58].iter().all(base32))
}

/// A temp dir holding the store (`mesh.db`), the secrets (`.mesh/secrets`)
/// and the fleet files.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn store_url(&self) -> String {
        format!("sqlite://{}", self.path().join("mesh.db").display())
    }

    fn secrets(&self) -> PathBuf {
        self.path().join(".mesh/secrets")
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn mesh(&self, args: &[&str], store: Option<&str>) -> Output {
        let store = store.map_or_else(|| self.store_url(), str::to_string);
        Command::new(env!("CARGO_BIN_EXE_mesh"))
            .args(args)
            .env("MESH_STORE", store)
            .current_dir(self.path())
            .output()
            .unwrap()
    }

    fn load(&self, text: &str, extra: &[&str]) -> Output {
        let f = self.file("fleet.toml", text);
        let cat = catalogue();
        let mut args = vec!["fleet", "load", f.as_str(), "--catalogue", cat.as_str()];
        args.extend_from_slice(extra);
        self.mesh(&args, None)
    }

    fn load_ok(&self, text: &str) {
        let out = self.load(text, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every record, read around the CLI (read-only): `None` without a store.
    fn rows(&self) -> Option<Vec<String>> {
        if !self.path().join("mesh.db").exists() {
            return None;
        }
        let url = self.store_url();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = match mesh_store::Store::open_existing(&url).await {
                Ok(s) => s,
                // Not a current mesh store: what it is stands for its rows.
                Err(e) => return Some(vec![format!("not readable: {e}")]),
            };
            let s = mesh_state::read(&store).await.unwrap();
            let mut rows: Vec<String> = s
                .credentials
                .iter()
                .map(|(p, h)| format!("credential {p} {h:?}"))
                .collect();
            rows.push(format!("{:?}", s.records));
            for m in store.modules().await.unwrap() {
                rows.push(format!("module {} {}", m.name, m.manifest_digest));
            }
            for t in store.live_tokens().await.unwrap() {
                rows.push(format!("token {} {}", t.node, t.expires_at));
            }
            store.close().await;
            Some(rows)
        })
    }

    /// Every file under the secrets dir (hidden ones too), with its mode.
    fn secret_files(&self) -> BTreeMap<String, (u32, Vec<u8>)> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(self.secrets()) else {
            return out;
        };
        for e in entries {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let bytes = if m.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                b"<dir>".to_vec()
            };
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                (m.permissions().mode() & 0o777, bytes),
            );
        }
        out
    }

    fn state(&self) -> State {
        State {
            rows: self.rows(),
            secrets: self.secret_files(),
        }
    }
}

#[derive(Debug, PartialEq)]
struct State {
    rows: Option<Vec<String>>,
    secrets: BTreeMap<String, (u32, Vec<u8>)>,
}

/// What a case expects of the state after the command.
enum After {
    /// Store rows and secret files exactly as before.
    Unchanged,
    /// Checked by the case (a follow-up command, say); returns what is wrong.
    Check(fn(&Env, &State) -> Result<(), String>),
}

struct Case {
    name: &'static str,
    /// Brings the env to where the case starts.
    setup: fn(&Env),
    /// Runs the command under test.
    run: fn(&Env) -> Output,
    code: i32,
    /// Every one must appear in stderr+stdout: the reason and the fix. One
    /// prefixed `once:` must appear exactly once (a cause said twice).
    says: &'static [&'static str],
    after: After,
}

fn nothing(_: &Env) {}

/// Runs `f` on a runtime of its own (the setup of a case is synchronous).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn explain_on(store: &str) -> impl Fn(&Env) -> Output + '_ {
    move |e: &Env| {
        let cat = catalogue();
        e.mesh(
            &["authority", "explain", "controller", "--catalogue", &cat],
            Some(store),
        )
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "explain on a typo'd store creates nothing",
            setup: |e| e.load_ok(SMALL),
            run: |e| {
                let typo = format!("sqlite://{}", e.path().join("mesh.dbb").display());
                explain_on(&typo)(e)
            },
            code: 2,
            says: &[
                "no mesh store at sqlite://",
                "mesh.dbb",
                "mesh fleet load FILE --catalogue DIR",
            ],
            after: After::Check(|e, before| unchanged_without(e, before, "mesh.dbb")),
        },
        Case {
            name: "compose on a missing store creates nothing",
            setup: nothing,
            run: |e| {
                let cat = catalogue();
                e.mesh(&["authority", "compose", "--catalogue", &cat], None)
            },
            code: 2,
            says: &["no mesh store at", "mesh fleet load FILE --catalogue DIR"],
            after: After::Unchanged,
        },
        Case {
            name: "another application's database is refused untouched",
            setup: |e| {
                let url = format!("{}?mode=rwc", e.store_url());
                block_on(async {
                    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                    for t in ["invoices", "customers"] {
                        sqlx::query(&format!("CREATE TABLE {t} (id BIGINT)"))
                            .execute(&pool)
                            .await
                            .unwrap();
                    }
                    pool.close().await;
                })
            },
            run: |e| e.load(SMALL, &[]),
            code: 2,
            says: &[
                "the database holds 2 table(s) that are not mesh's (customers, invoices)",
                "give --store an empty database or a mesh store",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "a reader refuses an older store naming the upgrade",
            setup: |e| {
                let url = e.store_url();
                block_on(async {
                    let options = mesh_store::StoreOptions::default();
                    let old = mesh_store::Store::open_at(&url, options, 3).await.unwrap();
                    old.close().await;
                })
            },
            run: |e| explain_on(&e.store_url())(e),
            code: 2,
            says: &[
                "store schema version 3 is older than this mesh binary reads",
                "bring it forward with `mesh fleet load FILE --catalogue DIR`",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "an empty sqlite path is refused",
            setup: nothing,
            run: |e| {
                let f = e.file("fleet.toml", SMALL);
                let cat = catalogue();
                e.mesh(
                    &["fleet", "load", &f, "--catalogue", &cat],
                    Some("sqlite://"),
                )
            },
            code: 2,
            says: &["names no file", "write sqlite://./.mesh/mesh.db"],
            after: After::Check(|e, _| {
                if e.path().join(".mesh").exists() {
                    return Err(".mesh was created".into());
                }
                Ok(())
            }),
        },
        Case {
            name: "a key=value store url is refused without its password",
            setup: nothing,
            run: |e| {
                let f = e.file("fleet.toml", SMALL);
                let cat = catalogue();
                e.mesh(
                    &["fleet", "load", &f, "--catalogue", &cat],
                    Some("host=127.0.0.1 password='kv secret' dbname=mesh"),
                )
            },
            code: 2,
            says: &[
                "password=***",
                "write postgres://USER:PASSWORD@HOST:PORT/DATABASE",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "an unreachable postgres store does not show its password",
            setup: nothing,
            run: explain_on_pg,
            code: 2,
            says: &["postgres://mesh:***@127.0.0.1:1/mesh", "unavailable"],
            after: After::Unchanged,
        },
        Case {
            name: "a store under a regular file says its cause once",
            setup: |e| std::fs::write(e.path().join("afile"), "x").unwrap(),
            run: |e| {
                let f = e.file("fleet.toml", SMALL);
                let cat = catalogue();
                let url = format!("sqlite://{}/afile/mesh.db", e.path().display());
                e.mesh(&["fleet", "load", &f, "--catalogue", &cat], Some(&url))
            },
            code: 2,
            says: &[
                "the sqlite store is unavailable",
                "once:File exists (os error 17)",
            ],
            // The secrets dir is made (empty) before the store is opened: a
            // store must not be left behind for a secrets dir that fails.
            after: After::Check(|e, before| match e.secret_files().is_empty() {
                true if e.state().rows == before.rows => Ok(()),
                _ => Err("written".into()),
            }),
        },
        Case {
            name: "every problem of a fleet file is reported, located, with the fix",
            setup: |e| e.load_ok(SMALL),
            run: |e| {
                e.load(
                    "[[node]]\nname = \"n1\"\nmodules = [\"audit-logg\"]\n\
                     [[node]]\nnam = \"n2\"\n\
                     [[person]]\nname = \"bob\"\ntools = [\"audit-log.serach\"]\n",
                    &[],
                )
            },
            code: 2,
            says: &[
                "fleet.toml:3:12: error[bad-value]",
                "did you mean `audit-log`?",
                "fleet.toml:5:1: error[unknown-field]",
                "did you mean `name`?",
                "fleet.toml:8:10: error[unserved-tool]",
                "  8 | tools = [\"audit-log.serach\"]",
                "did you mean `audit-log.search`?",
                "has 3 errors; nothing was recorded",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "a person listed twice is refused naming both lines",
            setup: |e| e.load_ok(SMALL),
            run: |e| {
                e.load(
                    "[[person]]\nname = \"bob\"\ntools = [\"audit-log.search\"]\n\
                     [[person]]\nname = \"bob\"\ntools = [\"*\"]\n",
                    &[],
                )
            },
            code: 2,
            says: &[
                "person `bob` is listed twice, on lines 2 and 5",
                "merge this one into line 2",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "a syntax error is located",
            setup: nothing,
            run: |e| e.load("[[node]\nname = \"n1\"\n", &[]),
            code: 2,
            says: &[
                "fleet.toml:1:",
                "error[toml-syntax]",
                "nothing was recorded",
            ],
            after: After::Check(|e, s| match (&s.rows, e.path().join(".mesh").exists()) {
                (None, false) => Ok(()),
                other => Err(format!("written: {other:?}")),
            }),
        },
        Case {
            name: "a secret path blocked by a directory changes nothing; unblocked, all is minted",
            setup: |e| {
                e.load_ok(SMALL);
                std::fs::create_dir_all(e.secrets().join("module_n2_notifier")).unwrap();
            },
            run: |e| e.load(FULL, &[]),
            code: 2,
            says: &[
                "module_n2_notifier is a directory",
                "move it away and load again",
            ],
            after: After::Check(|e, before| {
                if &e.state() != before {
                    return Err("the refused load changed the store or the secrets".into());
                }
                std::fs::remove_dir(e.secrets().join("module_n2_notifier")).unwrap();
                let out = e.load(FULL, &[]);
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() || !stdout.contains("1 token issued") {
                    return Err(format!(
                        "the retry: {stdout}{}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                for p in ["module_n2_notifier", "host_n3", "enrol_n4", "person_bob"] {
                    if !e.secrets().join(p).is_file() {
                        return Err(format!("the retry did not write {p}"));
                    }
                }
                Ok(())
            }),
        },
        Case {
            name: "a staging file that cannot be written leaves no staged file behind",
            setup: |e| {
                e.load_ok(SMALL);
                std::fs::create_dir_all(e.secrets().join(".person_bob.pending/x")).unwrap();
            },
            run: |e| e.load(FULL, &[]),
            code: 2,
            says: &[".person_bob.pending"],
            after: After::Unchanged,
        },
        Case {
            name: "a secrets dir of another store is refused naming both",
            setup: |e| e.load_ok(SMALL),
            run: |e| {
                let f = e.file("fleet.toml", SMALL);
                let cat = catalogue();
                let other = format!("sqlite://{}", e.path().join("other.db").display());
                e.mesh(&["fleet", "load", &f, "--catalogue", &cat], Some(&other))
            },
            code: 2,
            says: &[
                "holds the secrets of store",
                "mesh.db",
                "this store (not created yet)",
                "give this store a --secrets-dir of its own",
            ],
            after: After::Check(|e, before| unchanged_without(e, before, "other.db")),
        },
        Case {
            name: "a recorded credential without its secret is reported with the re-mint",
            setup: |e| {
                e.load_ok(SMALL);
                std::fs::remove_file(e.secrets().join("person_alice")).unwrap();
            },
            run: |e| e.load(SMALL, &[]),
            code: 1,
            says: &[
                "warning: person_alice has a credential recorded but no secret",
                "--remint person_alice",
            ],
            after: After::Check(|e, before| {
                if &e.state() != before {
                    return Err("reporting changed something".into());
                }
                let out = e.load(SMALL, &["--remint", "person_alice"]);
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() || !stdout.contains("1 credential minted") {
                    return Err(format!(
                        "re-mint: {stdout}{}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                if !e.secrets().join("person_alice").is_file() {
                    return Err("re-mint wrote no secret".into());
                }
                Ok(())
            }),
        },
        Case {
            name: "an unknown --remint is refused with the close name",
            setup: |e| e.load_ok(SMALL),
            run: |e| e.load(SMALL, &["--remint", "person_alcie"]),
            code: 2,
            says: &[
                "--remint person_alcie: no such principal",
                "did you mean person_alice?",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "what the store holds and the file does not is named, and kept",
            setup: |e| e.load_ok(FULL),
            run: |e| e.load(SMALL, &[]),
            code: 0,
            says: &[
                "0 nodes added, 1 already recorded",
                "node n2",
                "person bob",
                "--prune forgets them",
            ],
            after: After::Unchanged,
        },
        Case {
            name: "--prune forgets it with its credentials",
            setup: |e| e.load_ok(FULL),
            run: |e| e.load(SMALL, &["--prune"]),
            code: 0,
            says: &[
                "pruned: node n2 with the credentials of host_n2",
                "pruned: person bob",
            ],
            after: After::Check(|e, _| {
                let rows = e.rows().unwrap_or_default().join("\n");
                if rows.contains("host_n2") || rows.contains("person_bob") {
                    return Err(format!("not pruned: {rows}"));
                }
                for gone in ["host_n2", "module_n2_notifier", "person_bob"] {
                    if e.secrets().join(gone).exists() {
                        return Err(format!("the secret of pruned {gone} was left"));
                    }
                }
                if !e.secrets().join("person_alice").is_file() {
                    return Err("a kept secret was removed".into());
                }
                Ok(())
            }),
        },
    ]
}

/// The state is as before and no file `created` was made beside the store.
fn unchanged_without(e: &Env, before: &State, created: &str) -> Result<(), String> {
    if e.path().join(created).exists() {
        return Err(format!("{created} was created"));
    }
    if &e.state() != before {
        return Err("the store or the secrets changed".into());
    }
    Ok(())
}

fn explain_on_pg(e: &Env) -> Output {
    explain_on("postgres://mesh:hunter2@127.0.0.1:1/mesh")(e)
}

/// Runs every fleet and store case; what it found is added to `tally`.
pub fn run(tally: &mut super::support::Tally) {
    let (mut panics, mut losses, mut leaks) = (0, 0, 0);
    let mut failures = Vec::new();
    let all = cases();
    for case in &all {
        let env = Env::new();
        (case.setup)(&env);
        let before = env.state();
        let out = (case.run)(&env);
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let fail = |what: String| format!("{}: {what}\n{shown}", case.name);
        if shown.contains("panicked") || out.status.code() == Some(101) {
            panics += 1;
            failures.push(fail("panicked".into()));
        }
        if out.status.code() != Some(case.code) {
            failures.push(fail(format!(
                "exit {:?}, want {}",
                out.status.code(),
                case.code
            )));
        }
        for s in case.says {
            let (text, want_once) = match s.strip_prefix("once:") {
                Some(t) => (t, true),
                None => (*s, false),
            };
            let n = shown.matches(text).count();
            if n == 0 || (want_once && n != 1) {
                failures.push(fail(format!("says {text:?} {n} times")));
            }
        }
        // Nothing secret in what was printed: no password, no hash, no nkey
        // seed, no secret of any file in the secrets dir.
        let after = env.state();
        let mut secrets: Vec<String> = ["hunter2", "kv secret", "$2a$", "$2b$"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for (_, bytes) in before.secrets.values().chain(after.secrets.values()) {
            let s = String::from_utf8_lossy(bytes).into_owned();
            if s.len() >= 32 {
                secrets.push(s);
            }
        }
        if seed_in(&shown) {
            leaks += 1;
            failures.push(fail("printed an nkey seed".to_string()));
        }
        if let Some(leak) = secrets.iter().find(|s| shown.contains(s.as_str())) {
            leaks += 1;
            failures.push(fail(format!("printed a secret ({} chars)", leak.len())));
        }
        let checked = match &case.after {
            After::Unchanged if after != before => {
                Err("the store or the secrets changed".to_string())
            }
            After::Unchanged => Ok(()),
            After::Check(check) => check(&env, &before),
        };
        if let Err(e) = checked {
            losses += 1;
            failures.push(fail(e));
        }
        // Every secret file is its owner's only.
        for (name, (mode, _)) in env.secret_files() {
            if mode & 0o077 != 0 && !name.ends_with(".pending") {
                failures.push(fail(format!("{name} has mode {mode:o}")));
            }
        }
    }
    tally.cases += all.len();
    tally.panics += panics;
    tally.losses += losses;
    tally.leaks += leaks;
    tally.failures.extend(failures);
}
