//! The conformance suite: every case below runs, unchanged, against SQLite
//! and against a real PostgreSQL (through mesh-testkit). The `conformance!`
//! list at the bottom expands each case into `sqlite::<case>` and
//! `postgres::<case>`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mesh_core::names::Name;
use mesh_store::*;
use sqlx::Row;

fn n(s: &str) -> Name {
    Name::new(s).expect("test names are valid")
}

/// Short timeouts so an outage shows as an error in seconds, not a hang.
fn options() -> StoreOptions {
    StoreOptions {
        max_connections: 8,
        acquire_timeout: Duration::from_secs(3),
        busy_timeout: Duration::from_secs(20),
    }
}

enum Keep {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] mesh_testkit::postgres::TestDatabase),
}

/// One backend under test. `store` is declared before `_keep` so it drops
/// (closing connections) before the database goes away.
struct Fixture {
    store: Store,
    url: String,
    _keep: Keep,
}

impl Fixture {
    async fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        // A nested path: opening must create the parent directories.
        let url = format!("sqlite://{}/state/mesh/mesh.db", dir.path().display());
        let store = Store::open_with(&url, options())
            .await
            .expect("open sqlite");
        Fixture {
            store,
            url,
            _keep: Keep::Sqlite(dir),
        }
    }

    async fn postgres() -> Fixture {
        let db = tokio::task::spawn_blocking(mesh_testkit::postgres::fresh_database)
            .await
            .expect("join")
            .expect("a fresh PostgreSQL database from mesh-testkit");
        let url = db.url().to_string();
        let store = Store::open_with(&url, options())
            .await
            .expect("open postgres");
        Fixture {
            store,
            url,
            _keep: Keep::Postgres(db),
        }
    }

    async fn reopen(&self) -> Result<Store, StoreError> {
        Store::open_with(&self.url, options()).await
    }

    /// Runs one statement straight against the database, bypassing the store.
    async fn raw_execute(&self, sql: &str) {
        self.raw_execute_at(&self.url, sql).await
    }

    /// Runs one statement straight against the database at `url` (of the
    /// fixture's backend), bypassing any store.
    async fn raw_execute_at(&self, url: &str, sql: &str) {
        match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(url).await.expect("raw sqlite");
                sqlx::query(sql).execute(&pool).await.expect(sql);
                pool.close().await;
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(url).await.expect("raw postgres");
                sqlx::query(sql).execute(&pool).await.expect(sql);
                pool.close().await;
            }
        }
    }

    /// Every table in the store, read from the database catalogue so that a
    /// table added later is covered without anyone remembering to list it.
    async fn tables(&self) -> Vec<String> {
        let tables: Vec<(String,)> = match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url)
                    .await
                    .expect("raw sqlite");
                let tables = sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table'")
                    .fetch_all(&pool)
                    .await
                    .expect("tables");
                pool.close().await;
                tables
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url)
                    .await
                    .expect("raw postgres");
                let tables = sqlx::query_as(
                    "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
                )
                .fetch_all(&pool)
                .await
                .expect("tables");
                pool.close().await;
                tables
            }
        };
        assert!(tables.len() > 10, "{tables:?}");
        tables.into_iter().map(|(t,)| t).collect()
    }

    /// Every value of every column of every table, as bytes, labelled
    /// `table.column`.
    async fn every_value(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let tables = self.tables().await;
        match self.store.kind() {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url)
                    .await
                    .expect("raw sqlite");
                for table in tables {
                    let columns: Vec<(String,)> =
                        sqlx::query_as("SELECT name FROM pragma_table_info($1)")
                            .bind(&table)
                            .fetch_all(&pool)
                            .await
                            .expect("columns");
                    for (column,) in columns {
                        let sql = format!("SELECT CAST(\"{column}\" AS BLOB) FROM \"{table}\"");
                        for row in sqlx::query(&sql).fetch_all(&pool).await.expect(&sql) {
                            let v: Option<Vec<u8>> = row.try_get(0).expect("bytes");
                            out.push((format!("{table}.{column}"), v.unwrap_or_default()));
                        }
                    }
                }
                pool.close().await;
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url)
                    .await
                    .expect("raw postgres");
                for table in tables {
                    let columns: Vec<(String,)> = sqlx::query_as(
                        "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
                         WHERE table_schema = current_schema() AND table_name = $1",
                    )
                    .bind(&table)
                    .fetch_all(&pool)
                    .await
                    .expect("columns");
                    for (column,) in columns {
                        let sql = format!(
                            "SELECT convert_to(CAST(\"{column}\" AS TEXT), 'UTF8') FROM \"{table}\""
                        );
                        for row in sqlx::query(&sql).fetch_all(&pool).await.expect(&sql) {
                            let v: Option<Vec<u8>> = row.try_get(0).expect("bytes");
                            out.push((format!("{table}.{column}"), v.unwrap_or_default()));
                        }
                    }
                }
                pool.close().await;
            }
        }
        out
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A report from n1 with one outcome: git running.
fn git_running_on_n1(received_at: Millis) -> Report {
    Report {
        node: n("n1"),
        declaration_version: 1,
        outcomes: vec![ModuleOutcome {
            module: n("git"),
            state: ModuleState::Running,
        }],
        received_at,
    }
}

/// The principal of every credential in `s`, in order.
async fn principals(s: &Store) -> Vec<String> {
    let all = s.credentials().await.unwrap();
    all.into_iter().map(|c| c.principal).collect()
}

fn assert_refused(r: Result<Enrolled, StoreError>, want: fn(&RefusalReason) -> bool) {
    match r {
        Err(StoreError::TokenRefused(TokenRefused { reason, .. })) => {
            assert!(want(&reason), "refused for the wrong reason: {reason}")
        }
        other => panic!("expected a token refusal, got {other:?}"),
    }
}

// ------------------------------------------------------------------ cases

async fn nodes_round_trip(fx: &Fixture) {
    let s = &fx.store;
    let added = s.add_node(&n("n1"), &[4222, 22, 4222]).await.unwrap();
    assert_eq!(added.ports, vec![22, 4222], "sorted, deduplicated");
    s.add_node(&n("n0"), &[]).await.unwrap();

    let got = s.node(&n("n1")).await.unwrap().expect("n1 recorded");
    assert_eq!(got, added);
    assert_eq!(got.public_key, None);

    match s.add_node(&n("n1"), &[]).await {
        Err(StoreError::AlreadyExists { what: "node", .. }) => {}
        other => panic!("adding n1 twice: {other:?}"),
    }
    match s.add_node(&n("n2"), &[0]).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("port 0: {other:?}"),
    }

    s.set_node_ports(&n("n1"), &[5432]).await.unwrap();
    s.node_seen(&n("n1"), 1_700_000_000_000).await.unwrap();
    let got = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(got.ports, vec![5432]);
    assert_eq!(got.last_seen_at, Some(1_700_000_000_000));

    match s.node_seen(&n("ghost"), 1).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("heartbeat of an unknown node: {other:?}"),
    }
    assert_eq!(s.node(&n("ghost")).await.unwrap(), None);

    let names: Vec<String> = s
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name.to_string())
        .collect();
    assert_eq!(names, ["n0", "n1"]);
}

async fn token_spend_records_the_key(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let live = s.live_tokens().await.unwrap();
    assert_eq!(live.len(), 1);
    // The enrolment user's password is the token's secret, hashed for the
    // users file (quotable bcrypt, never the plaintext).
    assert!(
        live[0].bus_hash.starts_with("$2a$04$"),
        "{}",
        live[0].bus_hash
    );
    assert!(bcrypt::verify(token.secret.expose(), &live[0].bus_hash).unwrap());

    let enrolled = s
        .spend_token(&n("n1"), token.secret.expose(), "ed25519:key-one")
        .await
        .unwrap();
    assert_eq!(enrolled.public_key, "ed25519:key-one");
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.public_key.as_deref(), Some("ed25519:key-one"));
    assert_eq!(node.enrolled_at, Some(enrolled.enrolled_at));
    assert!(
        s.live_tokens().await.unwrap().is_empty(),
        "spent is not live"
    );

    // Spending again is refused and leaves the recorded key alone.
    assert_refused(
        s.spend_token(&n("n1"), token.secret.expose(), "ed25519:intruder")
            .await,
        |r| matches!(r, RefusalReason::Spent { .. }),
    );
    let node = s.node(&n("n1")).await.unwrap().unwrap();
    assert_eq!(node.public_key.as_deref(), Some("ed25519:key-one"));
}

async fn token_refusals_say_the_same_and_log_the_reason(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();

    // Expired: a token valid for no time at all.
    let expired = s.issue_token(&n("n1"), Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r_expired = s.spend_token(&n("n1"), expired.secret.expose(), "k").await;
    // Unknown: a secret nobody issued.
    let r_unknown = s.spend_token(&n("n1"), &"0".repeat(64), "k").await;
    // Unknown too: n2's token presented for n1.
    let t2 = s
        .issue_token(&n("n2"), Duration::from_secs(60))
        .await
        .unwrap();
    let r_wrong_node = s.spend_token(&n("n1"), t2.secret.expose(), "k").await;
    // Spent.
    s.spend_token(&n("n2"), t2.secret.expose(), "k2")
        .await
        .unwrap();
    let r_spent = s.spend_token(&n("n2"), t2.secret.expose(), "k3").await;

    let shown: BTreeSet<String> = [&r_expired, &r_unknown, &r_wrong_node, &r_spent]
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert_eq!(
        shown.len(),
        1,
        "every refusal must read the same: {shown:?}"
    );
    let shown = shown.into_iter().next().unwrap();
    assert!(!shown.contains(expired.secret.expose()));
    assert!(!shown.contains(t2.secret.expose()));

    assert_refused(r_expired, |r| matches!(r, RefusalReason::Expired { .. }));
    assert_refused(r_unknown, |r| *r == RefusalReason::Unknown);
    assert_refused(r_wrong_node, |r| *r == RefusalReason::Unknown);
    assert_refused(r_spent, |r| matches!(r, RefusalReason::Spent { .. }));

    // No refused spend recorded a key.
    assert_eq!(s.node(&n("n1")).await.unwrap().unwrap().public_key, None);
    assert_eq!(
        s.node(&n("n2"))
            .await
            .unwrap()
            .unwrap()
            .public_key
            .as_deref(),
        Some("k2")
    );

    match s.issue_token(&n("ghost"), Duration::from_secs(60)).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("token for an unknown node: {other:?}"),
    }
}

async fn issuing_again_revokes_the_earlier_token(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let first = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    let second = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(s.live_tokens().await.unwrap().len(), 1, "one live claim");
    assert_refused(
        s.spend_token(&n("n1"), first.secret.expose(), "k").await,
        |r| *r == RefusalReason::Unknown,
    );
    s.spend_token(&n("n1"), second.secret.expose(), "k")
        .await
        .unwrap();
}

async fn fifty_concurrent_spends_one_wins(fx: &Fixture) {
    let s = fx.store.clone();
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let secret: Arc<str> = token.secret.expose().into();
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (s, secret, barrier) = (s.clone(), secret.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (
                i,
                s.spend_token(&n("n1"), &secret, &format!("key-{i}")).await,
            )
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (i, r) = t.await.expect("join");
        match r {
            Ok(_) => winners.push(i),
            Err(StoreError::TokenRefused(TokenRefused {
                reason: RefusalReason::Spent { .. },
                ..
            })) => {}
            Err(e) => panic!("spend {i} failed for a reason other than a spent token: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one spend wins: {winners:?}");
    let key = s.node(&n("n1")).await.unwrap().unwrap().public_key;
    assert_eq!(key, Some(format!("key-{}", winners[0])), "the winner's key");
}

async fn minting_rotates_and_verifies(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let first = s.mint_host_credential(&n("n1")).await.unwrap();
    assert_eq!(first.expose().len(), 64, "256 bits, hex");
    assert!(
        s.verify_credential("host_n1", first.expose())
            .await
            .unwrap()
    );

    let second = s.mint_host_credential(&n("n1")).await.unwrap();
    assert_ne!(first, second);
    assert!(
        !s.verify_credential("host_n1", first.expose())
            .await
            .unwrap()
    );
    assert!(
        s.verify_credential("host_n1", second.expose())
            .await
            .unwrap()
    );
    let rows: Vec<Credential> = s
        .credentials()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.principal == "host_n1")
        .collect();
    assert_eq!(rows.len(), 1, "minting again rotates, never adds");
    let c = &rows[0];
    assert_eq!(c.kind, CredentialKind::Machine);
    assert_eq!(c.node.as_ref(), Some(&n("n1")));
    assert!(c.bcrypt_hash.starts_with("$2a$04$"), "{}", c.bcrypt_hash);

    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    let p = s.mint_person_credential(&n("ada")).await.unwrap();
    let c = s.credential("person_ada").await.unwrap().unwrap();
    assert_eq!(c.kind, CredentialKind::Person);
    assert!(c.bcrypt_hash.starts_with("$2a$11$"), "{}", c.bcrypt_hash);
    assert!(s.verify_credential("person_ada", p.expose()).await.unwrap());

    match s.mint_person_credential(&n("nobody")).await {
        Err(StoreError::NotFound { what: "person", .. }) => {}
        other => panic!("credential for an unknown person: {other:?}"),
    }
    match s.mint_module_credential(&n("n1"), &n("audit-log")).await {
        Err(StoreError::NotFound {
            what: "assignment", ..
        }) => {}
        other => panic!("credential for an unassigned module: {other:?}"),
    }
    assert!(!s.verify_credential("host_ghost", "x").await.unwrap());
}

async fn bootstrap_credential_never_overwrites_a_rotated_one(fx: &Fixture) {
    let s = &fx.store;
    assert!(
        s.adopt_credential_if_absent("controller", "bootstrap")
            .await
            .unwrap()
    );
    let rotated = s.mint_controller_credential().await.unwrap();
    assert!(
        !s.adopt_credential_if_absent("controller", "bootstrap")
            .await
            .unwrap(),
        "a restart must not put the bootstrap secret back"
    );
    assert!(
        s.verify_credential("controller", rotated.expose())
            .await
            .unwrap()
    );
    assert!(
        !s.verify_credential("controller", "bootstrap")
            .await
            .unwrap()
    );
}

async fn no_table_holds_a_plaintext_secret(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("audit-log"), "[module]\nname = \"audit-log\"\n")
        .await
        .unwrap();
    s.assign(&n("n1"), &n("audit-log")).await.unwrap();
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    let mut secrets = vec![
        s.mint_host_credential(&n("n1")).await.unwrap(),
        s.mint_module_credential(&n("n1"), &n("audit-log"))
            .await
            .unwrap(),
        s.mint_person_credential(&n("ada")).await.unwrap(),
        s.mint_controller_credential().await.unwrap(),
    ];
    let live = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    secrets.push(live.secret);

    let values = fx.every_value().await;
    assert!(values.iter().any(|(c, _)| c == "credentials.bcrypt_hash"));
    for secret in &secrets {
        let text = secret.expose().as_bytes();
        let raw = hex::decode(secret.expose()).expect("hex secret");
        for (column, value) in &values {
            assert!(
                !contains(value, text) && !contains(value, &raw),
                "{column} holds a plaintext secret"
            );
        }
    }
}

async fn forgetting_a_node_leaves_none_of_its_credentials(fx: &Fixture) {
    let s = &fx.store;
    for node in ["n1", "n2"] {
        s.add_node(&n(node), &[4222]).await.unwrap();
    }
    for module in ["audit-log", "git"] {
        s.register_module(&n(module), "x").await.unwrap();
        for node in ["n1", "n2"] {
            s.assign(&n(node), &n(module)).await.unwrap();
            s.mint_module_credential(&n(node), &n(module))
                .await
                .unwrap();
        }
    }
    for node in ["n1", "n2"] {
        s.mint_host_credential(&n(node)).await.unwrap();
    }
    s.issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    s.record_declaration(&Declaration {
        node: n("n1"),
        version: 1,
        digest: "sha256:00".into(),
        body: "{}".into(),
    })
    .await
    .unwrap();
    s.record_report(&git_running_on_n1(1)).await.unwrap();

    let forgotten = s.forget_node(&n("n1")).await.unwrap();
    assert_eq!(
        forgotten.credentials,
        ["host_n1", "module_n1_audit-log", "module_n1_git"]
    );
    assert_eq!(forgotten.assignments, 2);

    let left = principals(s).await;
    assert_eq!(left, ["host_n2", "module_n2_audit-log", "module_n2_git"]);
    assert_eq!(s.node(&n("n1")).await.unwrap(), None);
    assert!(
        s.assignments()
            .await
            .unwrap()
            .iter()
            .all(|a| a.node != n("n1"))
    );
    assert!(s.live_tokens().await.unwrap().is_empty());
    assert_eq!(s.latest_report(&n("n1")).await.unwrap(), None);
    assert_eq!(s.latest_declaration(&n("n1")).await.unwrap(), None);

    match s.forget_node(&n("n1")).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("forgetting twice: {other:?}"),
    }
    // The name is free again.
    s.add_node(&n("n1"), &[]).await.unwrap();
}

async fn unassigning_deletes_the_modules_credential(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap(); // twice changes nothing
    assert_eq!(s.assignments().await.unwrap().len(), 1);
    s.mint_module_credential(&n("n1"), &n("git")).await.unwrap();
    assert!(s.unassign(&n("n1"), &n("git")).await.unwrap());
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
    assert!(!s.unassign(&n("n1"), &n("git")).await.unwrap());
    match s.assign(&n("n1"), &n("nope")).await {
        Err(StoreError::NotFound { what: "module", .. }) => {}
        other => panic!("assigning an unknown module: {other:?}"),
    }
}

async fn persons_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    s.put_person(
        &n("bob"),
        &ToolGrant::Tools(vec!["git.clone".into(), "audit-log.tail".into()]),
    )
    .await
    .unwrap();
    assert_eq!(
        s.person(&n("bob")).await.unwrap().unwrap().tools,
        ToolGrant::Tools(vec!["audit-log.tail".into(), "git.clone".into()])
    );
    let all: Vec<(String, ToolGrant)> = s
        .persons()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name.to_string(), p.tools))
        .collect();
    assert_eq!(all[0], ("ada".into(), ToolGrant::All));
    assert_eq!(all.len(), 2);

    // Narrowing replaces the grant.
    s.put_person(&n("ada"), &ToolGrant::Tools(vec!["git.clone".into()]))
        .await
        .unwrap();
    assert_eq!(
        s.person(&n("ada")).await.unwrap().unwrap().tools,
        ToolGrant::Tools(vec!["git.clone".into()])
    );
    match s
        .put_person(&n("eve"), &ToolGrant::Tools(vec!["*".into()]))
        .await
    {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("a '*' inside a tool list: {other:?}"),
    }

    s.mint_person_credential(&n("ada")).await.unwrap();
    assert!(s.remove_person(&n("ada")).await.unwrap());
    assert_eq!(s.person(&n("ada")).await.unwrap(), None);
    assert_eq!(s.credential("person_ada").await.unwrap(), None);
}

/// The database itself deletes a credential with its person or its
/// assignment, whoever deletes the row: here plain SQL that knows nothing of
/// credentials. A host's credential (module NULL) is not an assignment's.
async fn credentials_go_with_their_person_and_assignment(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    s.mint_host_credential(&n("n1")).await.unwrap();
    s.mint_module_credential(&n("n1"), &n("git")).await.unwrap();
    s.mint_person_credential(&n("ada")).await.unwrap();
    let ada = s.credential("person_ada").await.unwrap().unwrap();
    assert_eq!(ada.person, Some(n("ada")));
    assert_eq!((ada.node, ada.module), (None, None));
    let host = s.credential("host_n1").await.unwrap().unwrap();
    assert_eq!(host.person, None);

    fx.raw_execute("DELETE FROM persons WHERE name = 'ada'")
        .await;
    fx.raw_execute("DELETE FROM assignments WHERE node = 'n1' AND module = 'git'")
        .await;
    let left = principals(s).await;
    assert_eq!(left, ["host_n1"], "a credential outlived its owner");

    // Added back, they have no credential until one is minted again.
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    assert_eq!(s.credential("person_ada").await.unwrap(), None);
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
}

/// What a mint checked can still be removed before its insert (on
/// PostgreSQL a removal commits between the two). A trigger makes that
/// happen every time: the foreign keys refuse the insert, and the mint says
/// what the check would have said.
async fn an_owner_removed_before_the_insert_is_not_found(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.add_node(&n("n2"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    let removals = "DELETE FROM persons WHERE name = NEW.person; \
         DELETE FROM assignments WHERE node = NEW.node AND module = NEW.module; \
         DELETE FROM nodes WHERE name = NEW.node AND NEW.module IS NULL;";
    match s.kind() {
        BackendKind::Sqlite => {
            fx.raw_execute(&format!(
                "CREATE TRIGGER owner_goes BEFORE INSERT ON credentials BEGIN {removals} END"
            ))
            .await
        }
        BackendKind::Postgres => {
            fx.raw_execute(&format!(
                "CREATE FUNCTION owner_goes() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN {removals} RETURN NEW; END $$"
            ))
            .await;
            fx.raw_execute(
                "CREATE TRIGGER owner_goes BEFORE INSERT ON credentials \
                 FOR EACH ROW EXECUTE FUNCTION owner_goes()",
            )
            .await
        }
    }

    match s.mint_person_credential(&n("ada")).await {
        Err(StoreError::NotFound {
            what: "person",
            key,
        }) => assert_eq!(key, "ada"),
        other => panic!("minting for a person removed before the insert: {other:?}"),
    }
    match s.mint_module_credential(&n("n1"), &n("git")).await {
        Err(StoreError::NotFound {
            what: "assignment",
            key,
        }) => assert_eq!(key, "git on n1"),
        other => panic!("minting for an assignment removed before the insert: {other:?}"),
    }
    match s.mint_host_credential(&n("n2")).await {
        Err(StoreError::NotFound { what: "node", key }) => assert_eq!(key, "n2"),
        other => panic!("minting for a node removed before the insert: {other:?}"),
    }
    assert!(s.credentials().await.unwrap().is_empty());
}

/// A person removed while their credential is being minted keeps no
/// credential: the mint checks the person inside the transaction that writes.
async fn a_person_removed_while_minting_keeps_no_credential(fx: &Fixture) {
    let s = fx.store.clone();
    s.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    let mint = {
        let s = s.clone();
        tokio::spawn(async move { s.mint_person_credential(&n("ada")).await })
    };
    // The cost-11 hash takes far longer than this; the removal lands while
    // the mint is hashing, between a check made outside its write and the write.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(s.remove_person(&n("ada")).await.unwrap());
    match mint.await.expect("join") {
        // Minted first: the removal deleted it too.
        Ok(_) | Err(StoreError::NotFound { what: "person", .. }) => {}
        Err(e) => panic!("minting for a person being removed: {e:?}"),
    }
    assert_eq!(
        s.credential("person_ada").await.unwrap(),
        None,
        "a credential outlived its person"
    );
}

async fn catalogue_round_trip(fx: &Fixture) {
    let s = &fx.store;
    let source = "[module]\nname = \"git\"\n";
    let m = s.register_module(&n("git"), source).await.unwrap();
    assert_eq!(m.manifest_source, source);
    assert_eq!(m.manifest_digest, sha256_digest(source));
    assert!(m.manifest_digest.starts_with("sha256:"));
    assert_eq!(s.module(&n("git")).await.unwrap(), Some(m.clone()));

    let again = s.register_module(&n("git"), "changed").await.unwrap();
    assert_eq!(again.registered_at, m.registered_at);
    assert_eq!(again.manifest_digest, sha256_digest("changed"));
    assert_eq!(s.modules().await.unwrap().len(), 1);

    s.record_module_version(&n("git"), "abc123", None)
        .await
        .unwrap();
    let v = s
        .record_module_version(&n("git"), "abc123", Some("build-1"))
        .await
        .unwrap();
    assert_eq!(v.build_id.as_deref(), Some("build-1"));
    s.record_module_version(&n("git"), "def456", None)
        .await
        .unwrap();
    let revs: Vec<String> = s
        .module_versions(&n("git"))
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.rev)
        .collect();
    assert_eq!(revs.len(), 2);
    assert!(revs.contains(&"abc123".to_string()));
    match s.record_module_version(&n("nope"), "x", None).await {
        Err(StoreError::NotFound { what: "module", .. }) => {}
        other => panic!("version of an unknown module: {other:?}"),
    }

    let seat = Seat {
        name: n("git"),
        declared_by: Some(n("git")),
        scope: SeatScope::Mesh,
        protocol: "git".into(),
    };
    s.put_seat(&seat).await.unwrap();
    let role = Seat {
        name: n("mesh-store"),
        declared_by: None,
        scope: SeatScope::Mesh,
        protocol: "postgres".into(),
    };
    s.put_seat(&role).await.unwrap();
    let marker = Seat {
        name: n("packet-filter"),
        declared_by: Some(n("git")),
        scope: SeatScope::Node,
        protocol: String::new(),
    };
    s.put_seat(&marker).await.unwrap();
    assert_eq!(s.seat(&n("packet-filter")).await.unwrap(), Some(marker));
    assert_eq!(s.seats().await.unwrap().len(), 3);

    s.add_seat_alias(&n("vcs"), &n("git")).await.unwrap();
    assert_eq!(s.resolve_seat(&n("vcs")).await.unwrap(), Some(n("git")));
    assert_eq!(s.resolve_seat(&n("git")).await.unwrap(), Some(n("git")));
    assert_eq!(s.resolve_seat(&n("nothing")).await.unwrap(), None);
    assert_eq!(s.seat_aliases().await.unwrap(), vec![(n("vcs"), n("git"))]);
    match s.add_seat_alias(&n("vcs"), &n("mesh-store")).await {
        Err(StoreError::AlreadyExists { .. }) => {}
        other => panic!("alias twice: {other:?}"),
    }
    match s.add_seat_alias(&n("mesh-store"), &n("git")).await {
        Err(StoreError::AlreadyExists { what: "seat", .. }) => {}
        other => panic!("alias shadowing a seat: {other:?}"),
    }

    s.add_node(&n("n1"), &[]).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    match s.remove_module(&n("git")).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("removing an assigned module: {other:?}"),
    }
    s.unassign(&n("n1"), &n("git")).await.unwrap();
    assert!(s.remove_module(&n("git")).await.unwrap());
    assert_eq!(s.module(&n("git")).await.unwrap(), None);
    assert_eq!(s.seat(&n("git")).await.unwrap(), None, "its seats go too");
    assert_eq!(s.resolve_seat(&n("vcs")).await.unwrap(), None);
    assert!(
        s.seat(&n("mesh-store")).await.unwrap().is_some(),
        "roles stay"
    );
}

async fn declarations_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    assert_eq!(s.latest_declaration(&n("n1")).await.unwrap(), None);
    for v in [1, 2, 5] {
        s.record_declaration(&Declaration {
            node: n("n1"),
            version: v,
            digest: format!("sha256:{v}"),
            body: format!("{{\"version\":{v}}}"),
        })
        .await
        .unwrap();
    }
    let newest = s.latest_declaration(&n("n1")).await.unwrap().unwrap();
    assert_eq!(newest.version, 5);
    assert_eq!(newest.body, "{\"version\":5}");
    match s
        .record_declaration(&Declaration {
            node: n("n1"),
            version: 5,
            digest: "sha256:other".into(),
            body: "other".into(),
        })
        .await
    {
        Err(StoreError::StaleDeclaration {
            version: 5,
            newest: 5,
            ..
        }) => {}
        other => panic!("reusing a version: {other:?}"),
    }
    match s
        .record_declaration(&Declaration {
            node: n("ghost"),
            version: 1,
            digest: String::new(),
            body: String::new(),
        })
        .await
    {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("declaration for an unknown node: {other:?}"),
    }
}

async fn reports_round_trip(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let report = Report {
        node: n("n1"),
        declaration_version: 3,
        outcomes: vec![
            ModuleOutcome {
                module: n("git"),
                state: ModuleState::Failed {
                    reason: "exit status 1".into(),
                },
            },
            ModuleOutcome {
                module: n("audit-log"),
                state: ModuleState::Running,
            },
        ],
        received_at: 1_700_000_000_123,
    };
    let first = s.record_report(&report).await.unwrap();
    let mut later = report.clone();
    later.declaration_version = 4;
    let second = s.record_report(&later).await.unwrap();
    assert!(second > first);

    let got = s.latest_report(&n("n1")).await.unwrap().unwrap();
    assert_eq!(got.id, second);
    assert_eq!(got.report.declaration_version, 4);
    assert_eq!(got.report.outcomes[0].module, n("audit-log"), "sorted");
    assert_eq!(
        got.report.outcomes[1].state,
        ModuleState::Failed {
            reason: "exit status 1".into()
        }
    );
    assert_eq!(got.report.received_at, 1_700_000_000_123);
    let all = s.reports(&n("n1"), 10).await.unwrap();
    assert_eq!(all.len(), 2);
    let mut sorted = report.clone();
    sorted.outcomes.sort_by(|a, b| a.module.cmp(&b.module));
    assert_eq!(all[1].report, sorted);

    let mut stray = report.clone();
    stray.node = n("ghost");
    match s.record_report(&stray).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("report from an unknown node: {other:?}"),
    }
}

/// A report is never read without its outcomes, even while newer reports
/// arrive between the store's reads (they are written in one transaction).
async fn a_report_read_while_others_arrive_has_its_outcomes(fx: &Fixture) {
    let s = fx.store.clone();
    s.add_node(&n("n1"), &[]).await.unwrap();
    let report = git_running_on_n1(1);
    s.record_report(&report).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop, report) = (s.clone(), stop.clone(), report.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                s.record_report(&report).await.unwrap();
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut reads = 0;
    while Instant::now() < deadline {
        let got = s.latest_report(&n("n1")).await.unwrap().unwrap();
        reads += 1;
        assert_eq!(
            got.report.outcomes, report.outcomes,
            "report {} read without its outcomes (read {reads})",
            got.id
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
}

async fn builds_round_trip(fx: &Fixture) {
    let s = &fx.store;
    let build = Build {
        id: "req-1".into(),
        module: Some(n("audit-log")),
        rev: Some("abc123".into()),
        state: BuildState::Succeeded,
        inputs: vec!["sha256:bbb".into(), "sha256:aaa".into()],
        artifacts: vec![
            Artifact {
                name: "audit-log".into(),
                digest: "sha256:1111".into(),
                path: "target/release/audit-log".into(),
                size: 12_345_678,
            },
            Artifact {
                name: "a-helper".into(),
                digest: "sha256:2222".into(),
                path: "target/release/a-helper".into(),
                size: 0,
            },
        ],
        finished_at: 42,
    };
    s.record_build(&build).await.unwrap();
    let got = s.build("req-1").await.unwrap().unwrap();
    assert_eq!(got.inputs, build.inputs, "inputs keep their order");
    assert_eq!(got.artifacts[0].name, "a-helper", "artifacts by name");
    assert_eq!(got.artifacts[1], build.artifacts[0]);
    assert_eq!(got.module, build.module);
    match s.record_build(&build).await {
        Err(StoreError::AlreadyExists { what: "build", .. }) => {}
        other => panic!("recording a build twice: {other:?}"),
    }

    let failed = Build {
        id: "req-2".into(),
        module: None,
        rev: None,
        state: BuildState::Failed {
            reason: "no manifest".into(),
        },
        inputs: vec![],
        artifacts: vec![],
        finished_at: 43,
    };
    s.record_build(&failed).await.unwrap();
    assert_eq!(s.build("req-2").await.unwrap(), Some(failed));
    assert_eq!(s.build("req-3").await.unwrap(), None);

    let by_digest = s.artifacts_by_digest("sha256:1111").await.unwrap();
    assert_eq!(
        by_digest,
        vec![("req-1".to_string(), build.artifacts[0].clone())]
    );
}

async fn reopening_is_idempotent(fx: &Fixture) {
    fx.store.add_node(&n("n1"), &[22]).await.unwrap();
    assert_eq!(fx.store.schema_version().await.unwrap(), SCHEMA_VERSION);
    for _ in 0..2 {
        let again = fx.reopen().await.expect("reopen");
        assert_eq!(again.schema_version().await.unwrap(), SCHEMA_VERSION);
        assert_eq!(again.node(&n("n1")).await.unwrap().unwrap().ports, vec![22]);
        again.close().await;
    }
}

/// The URL of a database with no schema yet, to build an older store in. The
/// fixture's store is current: SQLite gets a file beside it; PostgreSQL reuses
/// the fixture's database after closing its store and dropping every table.
async fn schemaless_url(fx: &Fixture) -> String {
    match fx.store.kind() {
        BackendKind::Sqlite => fx.url.replace("mesh.db", "old.db"),
        BackendKind::Postgres => {
            fx.store.close().await;
            // One statement, so the foreign keys between them set no order.
            let tables = fx.tables().await.join(", ");
            fx.raw_execute(&format!("DROP TABLE {tables}")).await;
            fx.url.clone()
        }
    }
}

async fn an_older_store_is_brought_forward(fx: &Fixture) {
    let old_url = schemaless_url(fx).await;
    let old = Store::open_at(&old_url, options(), 1).await.unwrap();
    assert_eq!(old.schema_version().await.unwrap(), 1);
    old.add_node(&n("n1"), &[]).await.unwrap();
    match old.register_module(&n("git"), "x").await {
        Err(StoreError::Refused { .. }) => {}
        other => panic!("version 1 has no modules table: {other:?}"),
    }
    old.close().await;

    let current = Store::open_with(&old_url, options()).await.unwrap();
    assert_eq!(current.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert!(current.node(&n("n1")).await.unwrap().is_some(), "kept");
    current.register_module(&n("git"), "x").await.unwrap();
    current.close().await;
}

/// Version 4 ties credentials to their person or assignment. Bringing a
/// version 3 store forward keeps every credential that still has its owner
/// (a person's now naming the person) and drops the orphans, whose stale
/// secrets would otherwise be valid again once the name came back.
async fn bringing_credentials_forward_drops_the_orphans(fx: &Fixture) {
    let old_url = schemaless_url(fx).await;
    let old = Store::open_at(&old_url, options(), 3).await.unwrap();
    assert_eq!(old.schema_version().await.unwrap(), 3);
    old.add_node(&n("n1"), &[]).await.unwrap();
    old.register_module(&n("git"), "x").await.unwrap();
    old.assign(&n("n1"), &n("git")).await.unwrap();
    old.put_person(&n("ada"), &ToolGrant::All).await.unwrap();
    old.close().await;
    // What a version 3 mint wrote, and what the race could leave behind:
    // person_gone and module_n1_gone name a person and an assignment that are
    // not recorded.
    fx.raw_execute_at(
        &old_url,
        "INSERT INTO credentials (principal, kind, bcrypt_hash, node, module, created_at) VALUES \
         ('controller', 'machine', 'h0', NULL, NULL, 1), \
         ('host_n1', 'machine', 'h1', 'n1', NULL, 2), \
         ('module_n1_git', 'machine', 'h2', 'n1', 'git', 3), \
         ('module_n1_gone', 'machine', 'h3', 'n1', 'gone', 4), \
         ('person_ada', 'person', 'h4', NULL, NULL, 5), \
         ('person_gone', 'person', 'h5', NULL, NULL, 6)",
    )
    .await;

    let current = Store::open_with(&old_url, options()).await.unwrap();
    assert_eq!(current.schema_version().await.unwrap(), SCHEMA_VERSION);
    let kept = current.credentials().await.unwrap();
    fn name(n: &Option<Name>) -> Option<&str> {
        n.as_ref().map(Name::as_str)
    }
    let owners: Vec<_> = kept
        .iter()
        .map(|c| {
            let (node, module, person) = (name(&c.node), name(&c.module), name(&c.person));
            (c.principal.as_str(), node, module, person)
        })
        .collect();
    assert_eq!(
        owners,
        [
            ("controller", None, None, None),
            ("host_n1", Some("n1"), None, None),
            ("module_n1_git", Some("n1"), Some("git"), None),
            ("person_ada", None, None, Some("ada")),
        ]
    );
    let ada = current.credential("person_ada").await.unwrap().unwrap();
    assert_eq!((ada.bcrypt_hash.as_str(), ada.created_at), ("h4", 5));

    // The names coming back bring no secret back with them.
    current
        .put_person(&n("gone"), &ToolGrant::All)
        .await
        .unwrap();
    current.register_module(&n("gone"), "x").await.unwrap();
    current.assign(&n("n1"), &n("gone")).await.unwrap();
    assert_eq!(current.credential("person_gone").await.unwrap(), None);
    assert_eq!(current.credential("module_n1_gone").await.unwrap(), None);
    // And the kept person credential now goes with its person.
    assert!(current.remove_person(&n("ada")).await.unwrap());
    assert_eq!(current.credential("person_ada").await.unwrap(), None);
    current.close().await;
}

async fn a_newer_store_is_refused_naming_both_versions(fx: &Fixture) {
    fx.store.close().await;
    let future = SCHEMA_VERSION + 1;
    fx.raw_execute(&format!(
        "INSERT INTO mesh_schema (version, name, applied_at) VALUES ({future}, 'from-the-future', 0)"
    ))
    .await;
    let err = fx
        .reopen()
        .await
        .expect_err("a newer store must be refused");
    match &err {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!((*found, *supported), (future, SCHEMA_VERSION))
        }
        other => panic!("wrong refusal: {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "store schema version {future} is newer than this mesh binary supports ({SCHEMA_VERSION}); upgrade mesh"
        )
    );
}

async fn secrets_stay_out_of_debug_output(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    let token = s
        .issue_token(&n("n1"), Duration::from_secs(60))
        .await
        .unwrap();
    let shown = format!("{token:?}");
    assert!(!shown.contains(token.secret.expose()), "{shown}");
    let minted = s.mint_host_credential(&n("n1")).await.unwrap();
    assert!(!format!("{minted:?}").contains(minted.expose()));
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = super::Fixture::sqlite().await;
                    super::$case(&fx).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = super::Fixture::postgres().await;
                    super::$case(&fx).await;
                }
            )*
        }
    };
}

conformance!(
    nodes_round_trip,
    token_spend_records_the_key,
    token_refusals_say_the_same_and_log_the_reason,
    issuing_again_revokes_the_earlier_token,
    fifty_concurrent_spends_one_wins,
    minting_rotates_and_verifies,
    bootstrap_credential_never_overwrites_a_rotated_one,
    no_table_holds_a_plaintext_secret,
    forgetting_a_node_leaves_none_of_its_credentials,
    unassigning_deletes_the_modules_credential,
    persons_round_trip,
    a_person_removed_while_minting_keeps_no_credential,
    credentials_go_with_their_person_and_assignment,
    an_owner_removed_before_the_insert_is_not_found,
    catalogue_round_trip,
    declarations_round_trip,
    reports_round_trip,
    a_report_read_while_others_arrive_has_its_outcomes,
    builds_round_trip,
    reopening_is_idempotent,
    an_older_store_is_brought_forward,
    bringing_credentials_forward_drops_the_orphans,
    a_newer_store_is_refused_naming_both_versions,
    secrets_stay_out_of_debug_output,
);

// ------------------------------------------------- PostgreSQL-only: outage

/// The store window rests on this: with the database stopped a call fails as
/// `Unavailable` (promptly), and once it is back the same call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_is_unavailable_then_recovers() {
    use mesh_testkit::postgres::PgCluster;
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .expect("join")
        .expect("an owned PostgreSQL cluster");
    let cluster = Arc::new(cluster);
    let c = cluster.clone();
    let db = tokio::task::spawn_blocking(move || c.create_database())
        .await
        .expect("join")
        .expect("database");
    let store = Store::open_with(db.url(), options()).await.unwrap();
    store.add_node(&n("n1"), &[]).await.unwrap();
    let report = git_running_on_n1(7);
    store.record_report(&report).await.unwrap();

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop())
        .await
        .expect("join")
        .expect("stop postgres");

    for attempt in 0..2 {
        let started = Instant::now();
        match store.record_report(&report).await {
            Err(e @ StoreError::Unavailable { .. }) => {
                assert!(e.is_unavailable());
                assert_eq!(e.to_string(), "the postgresql store is unavailable");
            }
            other => panic!("attempt {attempt} with the database stopped: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "an outage must fail promptly, took {:?}",
            started.elapsed()
        );
    }
    match store.node(&n("n1")).await {
        Err(StoreError::Unavailable { .. }) => {}
        other => panic!("a read with the database stopped: {other:?}"),
    }

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start_again())
        .await
        .expect("join")
        .expect("restart postgres");
    let id = store
        .record_report(&report)
        .await
        .expect("the same call succeeds once the database is back");
    assert_eq!(store.latest_report(&n("n1")).await.unwrap().unwrap().id, id);
    store.close().await;
    drop(db);
}

/// A refusal is not an outage: the controller must not retry it forever.
#[tokio::test]
async fn a_refusal_is_not_unavailable() {
    let fx = Fixture::sqlite().await;
    fx.store.add_node(&n("n1"), &[]).await.unwrap();
    let e = fx.store.add_node(&n("n1"), &[]).await.unwrap_err();
    assert!(!e.is_unavailable(), "{e:?}");
}

/// A SQLite file that cannot be opened is an outage, typed as such.
#[tokio::test]
async fn sqlite_that_cannot_be_opened_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let url = format!("sqlite://{}/mesh.db", file.display());
    match Store::open_with(&url, options()).await {
        Err(StoreError::Unavailable {
            backend: BackendKind::Sqlite,
            ..
        }) => {}
        other => panic!("opening under a file: {other:?}"),
    }
}
