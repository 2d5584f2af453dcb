//! Whom a credential is minted for: decided here, carried out by whoever
//! holds the store, so the CLI and the controller cannot mint by two rules.

use super::{Principal, PrincipalKind};
use crate::names::Name;

/// The principals that need a credential minted now, in derived order.
///
/// Skipped: a principal that already has one (minting again would rotate a
/// credential somebody is using); an enrolment principal, whose secret is its
/// token's, issued with the token; and the host of a node that `enrols_itself`
/// (it holds a token and makes its own credential when it spends it — one
/// minted here would be a second, unused way in).
pub fn credentials_to_mint(
    principals: &[Principal],
    has_credential: impl Fn(&str) -> bool,
    enrols_itself: impl Fn(&Name) -> bool,
) -> Vec<&Principal> {
    principals
        .iter()
        .filter(|p| !has_credential(&p.name))
        .filter(|p| match &p.kind {
            PrincipalKind::Enrolment { .. } | PrincipalKind::Login { .. } => false,
            PrincipalKind::Host { node } => !enrols_itself(node),
            PrincipalKind::Controller
            | PrincipalKind::Module { .. }
            | PrincipalKind::Person { .. } => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::Permissions;

    fn p(kind: PrincipalKind) -> Principal {
        Principal {
            name: kind.principal_name(),
            kind,
            source: String::new(),
            permissions: Permissions::default(),
        }
    }

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn mints_only_what_is_missing_and_not_what_enrolment_makes() {
        let ps = vec![
            p(PrincipalKind::Controller),
            p(PrincipalKind::Host { node: n("n1") }),
            p(PrincipalKind::Host { node: n("n4") }),
            p(PrincipalKind::Module {
                node: n("n1"),
                module: n("git"),
            }),
            p(PrincipalKind::Enrolment { node: n("n4") }),
            p(PrincipalKind::Person { person: n("ada") }),
        ];
        let names = |v: Vec<&Principal>| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(credentials_to_mint(
                &ps,
                |_| false,
                |node| node.as_str() == "n4"
            )),
            ["controller", "host_n1", "module_n1_git", "person_ada"]
        );
        // Nothing twice: a recorded credential is never minted over.
        assert_eq!(
            names(credentials_to_mint(
                &ps,
                |name| name != "module_n1_git",
                |_| false
            )),
            ["module_n1_git"]
        );
        // A node that does not enrol itself gets its host credential here.
        assert_eq!(
            names(credentials_to_mint(
                &ps,
                |name| name != "host_n4",
                |_| false
            )),
            ["host_n4"]
        );
    }
}
