//! Which spare key each module is given (DESIGN §6 "Keys announced
//! ahead"): a module assigned to a node with no key recorded for it gets
//! one of the keys that node's host made ahead, so the broker admits the
//! module before it starts. Decided here; the controller records the gifts
//! and publishes the declarations only once the composition with them is
//! live.

use std::collections::{BTreeMap, BTreeSet};

use crate::names::Name;

/// (node, module, key) for each of `needing` (assigned modules with no key
/// recorded) whose node has a spare left, in `needing`'s order; a key is
/// given once. A node out of spares gives nothing: its module's host makes
/// a key itself and reports it, as before spares.
pub fn give(
    needing: &[(Name, Name)],
    spares: &BTreeMap<Name, Vec<String>>,
) -> Vec<(Name, Name, String)> {
    let mut used: BTreeSet<&String> = BTreeSet::new();
    let mut out = Vec::new();
    for (node, module) in needing {
        let Some(key) = spares
            .get(node)
            .into_iter()
            .flatten()
            .find(|k| !used.contains(k))
        else {
            continue;
        };
        used.insert(key);
        out.push((node.clone(), module.clone(), key.clone()));
    }
    out
}

/// The modules of `needing` left without a key whose node's host makes
/// spares (`makers`): held back from the declaration until the node's next
/// report announces more — also when every spare it announced has been
/// given (a burst of assignments over several passes), which is not the
/// same as a host that makes none. A node whose host makes none is not
/// waited for: its host makes the key, as before spares.
pub fn held_back(
    needing: &[(Name, Name)],
    makers: &BTreeSet<Name>,
    given: &[(Name, Name, String)],
) -> BTreeSet<(Name, Name)> {
    needing
        .iter()
        .filter(|(node, module)| {
            makers.contains(node) && !given.iter().any(|(n, m, _)| n == node && m == module)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn each_module_gets_its_own_nodes_key_once_until_the_node_runs_out() {
        let spares = BTreeMap::from([
            (n("n1"), vec!["UA".to_string(), "UB".to_string()]),
            (n("n2"), vec!["UC".to_string()]),
        ]);
        let needing = [
            (n("n1"), n("echo")),
            (n("n2"), n("echo")),
            (n("n1"), n("greeter")),
            (n("n1"), n("ticker")),
            (n("n3"), n("echo")),
        ];
        let got = give(&needing, &spares);
        assert_eq!(
            got,
            [
                (n("n1"), n("echo"), "UA".to_string()),
                (n("n2"), n("echo"), "UC".to_string()),
                (n("n1"), n("greeter"), "UB".to_string()),
            ]
        );
        assert!(give(&[], &spares).is_empty());
        // n1 ran out (ticker waits for its next spares); n3's host makes
        // none, so it makes echo's key itself and nothing waits.
        let makers = BTreeSet::from([n("n1"), n("n2")]);
        assert_eq!(
            held_back(&needing, &makers, &got),
            BTreeSet::from([(n("n1"), n("ticker"))])
        );
        assert!(held_back(&needing, &BTreeSet::new(), &[]).is_empty());
        // Every spare of n1 given by an earlier pass: its modules still wait.
        let later = [(n("n1"), n("worker")), (n("n3"), n("echo"))];
        let none_left = BTreeMap::from([(n("n1"), Vec::new())]);
        let given = give(&later, &none_left);
        assert!(given.is_empty());
        assert_eq!(
            held_back(&later, &makers, &given),
            BTreeSet::from([(n("n1"), n("worker"))])
        );
    }
}
