//! Assignments, and the module credential that goes with one.

use crate::fixture::*;
use mesh_store::*;

async fn unassigning_deletes_the_modules_credential(fx: &Fixture) {
    let s = &fx.store;
    s.add_node(&n("n1"), &[]).await.unwrap();
    s.register_module(&n("git"), "x").await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap();
    s.assign(&n("n1"), &n("git")).await.unwrap(); // twice changes nothing
    assert_eq!(s.assignments().await.unwrap().len(), 1);
    let git = mesh_core::authority::PrincipalKind::Module {
        node: n("n1"),
        module: n("git"),
    };
    record_key(s, &git).await.unwrap();
    assert!(s.unassign(&n("n1"), &n("git")).await.unwrap());
    assert_eq!(s.credential("module_n1_git").await.unwrap(), None);
    assert!(!s.unassign(&n("n1"), &n("git")).await.unwrap());
    match s.assign(&n("n1"), &n("nope")).await {
        Err(StoreError::NotFound { what: "module", .. }) => {}
        other => panic!("assigning an unknown module: {other:?}"),
    }
}

conformance!(unassigning_deletes_the_modules_credential,);
