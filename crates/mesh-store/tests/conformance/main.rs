//! The conformance suite: every case below runs, unchanged, against SQLite
//! and against a real PostgreSQL (through mesh-testkit). The `conformance!`
//! list at the bottom of each module expands each case into
//! `<module>::sqlite::<case>` and `<module>::postgres::<case>`.
//!
//! One test binary, one module per record kind: mesh-testkit starts one
//! PostgreSQL cluster per binary, shared by every case in it.

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = crate::fixture::Fixture::sqlite().await;
                    super::$case(&fx).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = crate::fixture::Fixture::postgres().await;
                    super::$case(&fx).await;
                }
            )*
        }
    };
}

// After the macro: a `macro_rules!` is in scope only below its definition.
mod artifacts;
mod assignments;
mod audit;
mod builds;
mod catalogue;
mod credentials;
mod declarations;
mod deployments;
mod fixture;
mod fleet;
mod lease;
mod logins;
mod nodes;
mod open;
mod outage;
mod persons;
mod reports;
mod revision_order;
mod schema;
mod tokens;
