//! Crossing reduction for the layered layout: a breadth-first first
//! order, then barycenter sweeps down and up, each followed by swapping
//! neighbours while that removes crossings; the order with the fewest
//! crossings wins.

use std::collections::VecDeque;

use super::{ORDER_ROUNDS, Ranked};

/// The first order: breadth first from each vertex not yet reached, in
/// rank then index order, so connected vertices start out close.
fn initial_order(g: &Ranked) -> Vec<Vec<usize>> {
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); g.ranks];
    let mut seen = vec![false; g.verts.len()];
    let mut roots: Vec<usize> = (0..g.verts.len()).collect();
    roots.sort_by_key(|&v| (g.rank[v], v));
    for root in roots {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        let mut queue = VecDeque::from([root]);
        while let Some(v) = queue.pop_front() {
            order[g.rank[v]].push(v);
            for &(w, _) in g.down[v].iter().chain(&g.up[v]) {
                if !seen[w] {
                    seen[w] = true;
                    queue.push_back(w);
                }
            }
        }
    }
    order
}

fn positions(g: &Ranked, order: &[Vec<usize>]) -> Vec<usize> {
    let mut pos = vec![0; g.verts.len()];
    for layer in order {
        for (i, &v) in layer.iter().enumerate() {
            pos[v] = i;
        }
    }
    pos
}

/// Crossings between rank `r` and `r + 1`: inversions of the lower ends
/// once the segments are sorted by their upper ends.
fn crossings_between(g: &Ranked, order: &[Vec<usize>], pos: &[usize], r: usize) -> usize {
    let mut segs: Vec<(usize, usize)> = order[r]
        .iter()
        .flat_map(|&u| g.down[u].iter().map(move |&(v, _)| (pos[u], pos[v])))
        .collect();
    segs.sort_unstable();
    // Fenwick tree over the lower rank's positions.
    let size = order[r + 1].len();
    let mut tree = vec![0usize; size + 1];
    let mut crossings = 0;
    for (seen, &(_, lo)) in segs.iter().enumerate() {
        let mut at_or_below = 0;
        let mut i = lo + 1;
        while i > 0 {
            at_or_below += tree[i];
            i &= i - 1;
        }
        crossings += seen - at_or_below;
        let mut i = lo + 1;
        while i <= size {
            tree[i] += 1;
            i += i & i.wrapping_neg();
        }
    }
    crossings
}

fn crossings(g: &Ranked, order: &[Vec<usize>]) -> usize {
    let pos = positions(g, order);
    (0..g.ranks.saturating_sub(1))
        .map(|r| crossings_between(g, order, &pos, r))
        .sum()
}

/// Crossings among the edges of `u` and `v` (u left of v) on one side.
fn pair_crossings(side: &[Vec<(usize, f64)>], pos: &[usize], u: usize, v: usize) -> usize {
    let mut c = 0;
    for &(a, _) in &side[u] {
        for &(b, _) in &side[v] {
            if pos[a] > pos[b] {
                c += 1;
            }
        }
    }
    c
}

/// Swaps neighbours in a rank while that removes crossings.
fn transpose(g: &Ranked, order: &mut [Vec<usize>]) {
    let mut pos = positions(g, order);
    for _ in 0..8 {
        let mut improved = false;
        for layer in order.iter_mut() {
            for i in 1..layer.len() {
                let (u, v) = (layer[i - 1], layer[i]);
                let now = pair_crossings(&g.up, &pos, u, v) + pair_crossings(&g.down, &pos, u, v);
                let swapped =
                    pair_crossings(&g.up, &pos, v, u) + pair_crossings(&g.down, &pos, v, u);
                if swapped < now {
                    layer.swap(i - 1, i);
                    pos[u] = i;
                    pos[v] = i - 1;
                    improved = true;
                }
            }
        }
        if !improved {
            break;
        }
    }
}

/// Reorders rank `r` by the mean position of each vertex's neighbours on
/// `side`; one without any keeps its place.
fn barycenter(g: &Ranked, order: &mut [Vec<usize>], r: usize, side: &[Vec<(usize, f64)>]) {
    let pos = positions(g, order);
    let mut keyed: Vec<(f64, usize, usize)> = order[r]
        .iter()
        .map(|&v| {
            let ns = &side[v];
            let key = if ns.is_empty() {
                pos[v] as f64
            } else {
                ns.iter().map(|&(w, _)| pos[w] as f64).sum::<f64>() / ns.len() as f64
            };
            (key, pos[v], v)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    order[r] = keyed.into_iter().map(|(_, _, v)| v).collect();
}

pub(super) fn order(g: &Ranked) -> Vec<Vec<usize>> {
    let mut order = initial_order(g);
    transpose(g, &mut order);
    let mut best = order.clone();
    let mut best_c = crossings(g, &order);
    for round in 0..ORDER_ROUNDS {
        if best_c == 0 {
            break;
        }
        if round.is_multiple_of(2) {
            for r in 1..g.ranks {
                barycenter(g, &mut order, r, &g.up);
            }
        } else {
            for r in (0..g.ranks.saturating_sub(1)).rev() {
                barycenter(g, &mut order, r, &g.down);
            }
        }
        transpose(g, &mut order);
        let c = crossings(g, &order);
        if c < best_c {
            best_c = c;
            best.clone_from(&order);
        }
    }
    best
}
