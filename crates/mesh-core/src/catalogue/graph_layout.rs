//! A layered drawing of a directed graph, the way Graphviz `dot` does it
//! (Sugiyama): cycles broken by reversing DFS back edges, layers by longest
//! path, a dummy vertex wherever an edge crosses a layer, crossings reduced
//! by barycenter sweeps and adjacent swaps, x by isotonic regression towards
//! the neighbours, edges routed through their dummies.
//!
//! Ranks alternate: even ranks hold the boxes, odd ranks only dummies, so
//! every edge has a dummy of its own between two box rows and its label is
//! that dummy, a box the layout keeps clear like any other. Boxes live only
//! inside their rank's band and an edge crosses a band only vertically at a
//! dummy, so a segment never passes through a box it does not end at — by
//! construction, not by search. Pure integer output: the same input gives
//! the same layout.

#[path = "graph_order.rs"]
mod order;

use order::order;

/// Height of a box row.
pub(super) const BOX_H: i64 = 36;
/// Height of a label (and of a label row).
pub(super) const LABEL_H: i64 = 20;
/// Gap between an edge's line and its label's box.
pub(super) const LABEL_OFF: i64 = 5;
const MIN_RANK_GAP: i64 = 30;
const MAX_RANK_GAP: i64 = 110;
/// Horizontal room between two boxes, and between lines.
const NODE_GAP: i64 = 28;
const LINE_GAP: i64 = 12;
/// A self-loop's line stands this far right of what it passes.
const LOOP_STEP: i64 = 12;
const ORDER_ROUNDS: usize = 24;
const PLACE_ROUNDS: usize = 16;

/// A box to place: its width and the lowest layer (0 = bottom row) it may
/// sit in.
#[derive(Debug, Clone)]
pub(super) struct NodeSpec {
    pub w: i64,
    pub min_layer: usize,
}

/// An edge between two of the nodes, with the width of its label box (0:
/// no label).
#[derive(Debug, Clone)]
pub(super) struct EdgeSpec {
    pub from: usize,
    pub to: usize,
    pub label_w: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rect {
    pub x: i64,
    pub y: i64,
    pub w: i64,
    pub h: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Route {
    /// From the source box's border to the target box's border.
    pub points: Vec<(i64, i64)>,
    pub label: Option<Rect>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    pub nodes: Vec<Rect>,
    pub edges: Vec<Route>,
    pub width: i64,
    pub height: i64,
}

#[derive(Debug, Clone, Copy)]
enum Vert {
    Node(usize),
    /// A point of an edge; `true`: it carries the edge's label.
    Dummy(bool),
}

/// The rank graph: real and dummy vertices, each edge a chain from the
/// upper end to the lower one.
struct Ranked {
    verts: Vec<Vert>,
    rank: Vec<usize>,
    /// Room left and right of the vertex's x.
    left: Vec<i64>,
    right: Vec<i64>,
    /// Neighbours one rank up and one down, with the weight pulling them
    /// into line.
    up: Vec<Vec<(usize, f64)>>,
    down: Vec<Vec<(usize, f64)>>,
    /// Per edge (self-loops: empty): vertices from the upper end down.
    chains: Vec<Vec<usize>>,
    /// Per edge: drawn from the lower end upwards.
    reversed: Vec<bool>,
    ranks: usize,
}

/// The back edges of a DFS in index order, and the DFS postorder (every
/// vertex after all it points at, back edges aside).
fn break_cycles(n: usize, edges: &[EdgeSpec]) -> (Vec<bool>, Vec<usize>) {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in edges.iter().enumerate() {
        if e.from != e.to {
            out[e.from].push(i);
        }
    }
    let mut reversed = vec![false; edges.len()];
    let mut state = vec![0u8; n]; // 0 new, 1 on the stack, 2 done
    let mut post = Vec::with_capacity(n);
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        state[root] = 1;
        let mut stack = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&e) = out[v].get(*next) {
                *next += 1;
                let w = edges[e].to;
                match state[w] {
                    0 => {
                        state[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => reversed[e] = true,
                    _ => {}
                }
            } else {
                state[v] = 2;
                post.push(v);
                stack.pop();
            }
        }
    }
    (reversed, post)
}

/// Layer of each node, 0 at the bottom: above everything it points at.
fn layers(nodes: &[NodeSpec], edges: &[EdgeSpec], reversed: &[bool], post: &[usize]) -> Vec<usize> {
    let mut below: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            continue;
        }
        let (hi, lo) = if reversed[i] {
            (e.to, e.from)
        } else {
            (e.from, e.to)
        };
        below[hi].push(lo);
    }
    let mut layer = vec![0usize; nodes.len()];
    for &v in post {
        let over = below[v].iter().map(|&w| layer[w] + 1).max().unwrap_or(0);
        layer[v] = over.max(nodes[v].min_layer);
    }
    let low = layer.iter().copied().min().unwrap_or(0);
    layer.iter().map(|l| l - low).collect()
}

fn weight(a: Vert, b: Vert) -> f64 {
    // As dot: long edges straight first.
    match (a, b) {
        (Vert::Dummy(_), Vert::Dummy(_)) => 8.0,
        (Vert::Node(_), Vert::Node(_)) => 1.0,
        _ => 2.0,
    }
}

fn rank_graph(nodes: &[NodeSpec], edges: &[EdgeSpec], loop_room: &[i64]) -> Ranked {
    let (reversed, post) = break_cycles(nodes.len(), edges);
    let layer = layers(nodes, edges, &reversed, &post);
    let top = layer.iter().copied().max().unwrap_or(0);
    let mut g = Ranked {
        verts: Vec::new(),
        rank: Vec::new(),
        left: Vec::new(),
        right: Vec::new(),
        up: Vec::new(),
        down: Vec::new(),
        chains: vec![Vec::new(); edges.len()],
        reversed,
        ranks: 2 * top + 1,
    };
    let add = |g: &mut Ranked, v: Vert, rank: usize, left: i64, right: i64| {
        g.verts.push(v);
        g.rank.push(rank);
        g.left.push(left);
        g.right.push(right);
        g.up.push(Vec::new());
        g.down.push(Vec::new());
        g.verts.len() - 1
    };
    for (i, n) in nodes.iter().enumerate() {
        add(
            &mut g,
            Vert::Node(i),
            2 * (top - layer[i]),
            n.w / 2,
            n.w - n.w / 2 + loop_room[i],
        );
    }
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            continue;
        }
        let (hi, lo) = if g.reversed[i] {
            (e.to, e.from)
        } else {
            (e.from, e.to)
        };
        let (r0, r1) = (g.rank[hi], g.rank[lo]);
        // The label sits on the middle one of the odd ranks the edge crosses.
        let odd = (r1 - r0) / 2;
        let label_rank = r0 + 1 + 2 * ((odd - 1) / 2);
        let mut chain = vec![hi];
        for r in r0 + 1..r1 {
            let labelled = r == label_rank && e.label_w > 0;
            let right = if labelled { LABEL_OFF + e.label_w } else { 0 };
            chain.push(add(&mut g, Vert::Dummy(labelled), r, 0, right));
        }
        chain.push(lo);
        for pair in chain.windows(2) {
            let w = weight(g.verts[pair[0]], g.verts[pair[1]]);
            g.down[pair[0]].push((pair[1], w));
            g.up[pair[1]].push((pair[0], w));
        }
        g.chains[i] = chain;
    }
    g
}

/// The least-squares x for one rank: as near each `want` as the order and
/// separations allow (pool adjacent violators on x minus the cumulative
/// separation, which turns "at least `sep` apart" into "non-decreasing").
pub(super) fn isotonic(want: &[(f64, f64)], sep: &[i64]) -> Vec<f64> {
    let mut offset = Vec::with_capacity(want.len());
    let mut acc = 0i64;
    for i in 0..want.len() {
        if i > 0 {
            acc += sep[i - 1];
        }
        offset.push(acc as f64);
    }
    // Blocks of (weight, weighted sum, length).
    let mut blocks: Vec<(f64, f64, usize)> = Vec::new();
    for (i, &(x, w)) in want.iter().enumerate() {
        let mut b = (w, w * (x - offset[i]), 1);
        while let Some(&(pw, ps, pn)) = blocks.last() {
            if ps / pw < b.1 / b.0 {
                break;
            }
            blocks.pop();
            b = (pw + b.0, ps + b.1, pn + b.2);
        }
        blocks.push(b);
    }
    let mut out = Vec::with_capacity(want.len());
    for (w, s, n) in blocks {
        for _ in 0..n {
            out.push(s / w + offset[out.len()]);
        }
    }
    out
}

fn gap(g: &Ranked, a: usize, b: usize) -> i64 {
    match (g.verts[a], g.verts[b]) {
        (Vert::Node(_), Vert::Node(_)) => NODE_GAP,
        _ => LINE_GAP,
    }
}

fn place(g: &Ranked, order: &[Vec<usize>]) -> Vec<i64> {
    let seps: Vec<Vec<i64>> = order
        .iter()
        .map(|l| {
            l.windows(2)
                .map(|p| g.right[p[0]] + gap(g, p[0], p[1]) + g.left[p[1]])
                .collect()
        })
        .collect();
    let mut x = vec![0f64; g.verts.len()];
    for (layer, sep) in order.iter().zip(&seps) {
        let start = vec![(0.0, 1.0); layer.len()];
        for (&v, p) in layer.iter().zip(isotonic(&start, sep)) {
            x[v] = p;
        }
    }
    let sides: [&[Vec<(usize, f64)>]; 2] = [&g.up, &g.down];
    for round in 0..PLACE_ROUNDS {
        let down = round.is_multiple_of(2);
        let mut ranks: Vec<usize> = (0..g.ranks).collect();
        if !down {
            ranks.reverse();
        }
        for r in ranks {
            let want: Vec<(f64, f64)> = order[r]
                .iter()
                .map(|&v| {
                    // The last rounds pull from both sides, to balance.
                    let pulls: Vec<(usize, f64)> = if round + 4 >= PLACE_ROUNDS {
                        sides.iter().flat_map(|s| s[v].iter().copied()).collect()
                    } else {
                        let s = sides[usize::from(!down)];
                        let other = sides[usize::from(down)];
                        if s[v].is_empty() {
                            other[v].clone()
                        } else {
                            s[v].clone()
                        }
                    };
                    let w: f64 = pulls.iter().map(|p| p.1).sum();
                    if w == 0.0 {
                        (x[v], 0.01)
                    } else {
                        (pulls.iter().map(|&(u, pw)| x[u] * pw).sum::<f64>() / w, w)
                    }
                })
                .collect();
            for (&v, p) in order[r].iter().zip(isotonic(&want, &seps[r])) {
                x[v] = p;
            }
        }
    }
    // Whole pixels, the separations kept exactly.
    let mut xi = vec![0i64; g.verts.len()];
    for (layer, sep) in order.iter().zip(&seps) {
        for (i, &v) in layer.iter().enumerate() {
            xi[v] = x[v].round() as i64;
            if i > 0 {
                xi[v] = xi[v].max(xi[layer[i - 1]] + sep[i - 1]);
            }
        }
    }
    compact(g, order, &seps, &mut xi);
    let min = (0..g.verts.len())
        .map(|v| xi[v] - g.left[v])
        .min()
        .unwrap_or(0);
    xi.iter_mut().for_each(|p| *p -= min);
    xi
}

/// The connected part each vertex belongs to.
fn components(g: &Ranked) -> Vec<usize> {
    let mut comp = vec![usize::MAX; g.verts.len()];
    for root in 0..g.verts.len() {
        if comp[root] != usize::MAX {
            continue;
        }
        comp[root] = root;
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            for &(w, _) in g.up[v].iter().chain(&g.down[v]) {
                if comp[w] == usize::MAX {
                    comp[w] = root;
                    stack.push(w);
                }
            }
        }
    }
    comp
}

/// Slides each connected part left, leftmost first, until it meets what
/// is left of it in some rank: nothing pulls two parts together, so they
/// would keep whatever distance the first packing left. Only the nearest
/// left neighbour outside the part bounds the slide, so order and
/// separations hold.
fn compact(g: &Ranked, order: &[Vec<usize>], seps: &[Vec<i64>], x: &mut [i64]) {
    let comp = components(g);
    let mut parts: Vec<(i64, usize)> = Vec::new();
    for v in 0..g.verts.len() {
        let left = x[v] - g.left[v];
        match parts.iter_mut().find(|p| p.1 == comp[v]) {
            Some(p) => p.0 = p.0.min(left),
            None => parts.push((left, comp[v])),
        }
    }
    parts.sort_unstable();
    let Some(&(edge, _)) = parts.first() else {
        return;
    };
    for &(part_left, part) in &parts {
        let mut slide = part_left - edge;
        for (layer, sep) in order.iter().zip(seps) {
            for i in 1..layer.len() {
                let (u, v) = (layer[i - 1], layer[i]);
                if comp[v] == part && comp[u] != part {
                    slide = slide.min(x[v] - x[u] - sep[i - 1]);
                }
            }
        }
        if slide > 0 {
            for v in 0..g.verts.len() {
                if comp[v] == part {
                    x[v] -= slide;
                }
            }
        }
    }
}

/// Where each edge meets a box side: spread along it, in the order of
/// where the edges go next.
fn ports(g: &Ranked, x: &[i64], rects: &[Rect]) -> Vec<(i64, i64)> {
    // Per edge: (x at the upper end, x at the lower end).
    let mut port = vec![(0, 0); g.chains.len()];
    let mut below: Vec<Vec<(i64, usize)>> = vec![Vec::new(); rects.len()];
    let mut above: Vec<Vec<(i64, usize)>> = vec![Vec::new(); rects.len()];
    for (e, chain) in g.chains.iter().enumerate() {
        if chain.len() < 3 {
            continue;
        }
        let (first, second) = (chain[0], chain[1]);
        let (before_last, last) = (chain[chain.len() - 2], chain[chain.len() - 1]);
        if let (Vert::Node(hi), Vert::Node(lo)) = (g.verts[first], g.verts[last]) {
            below[hi].push((x[second], e));
            above[lo].push((x[before_last], e));
        }
    }
    for (n, r) in rects.iter().enumerate() {
        for (list, upper) in [(&mut below[n], true), (&mut above[n], false)] {
            list.sort_unstable();
            let k = list.len() as i64;
            for (i, &(_, e)) in list.iter().enumerate() {
                let px = r.x + r.w * (i as i64 + 1) / (k + 1);
                if upper {
                    port[e].0 = px;
                } else {
                    port[e].1 = px;
                }
            }
        }
    }
    port
}

/// Drops a point lying on the straight line between its neighbours.
fn simplify(points: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(points.len());
    for p in points {
        if out.last() == Some(&p) {
            continue;
        }
        if let [.., a, b] = out[..] {
            let cross = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
            if cross == 0 {
                out.pop();
            }
        }
        out.push(p);
    }
    out
}

/// Lays out `nodes` and `edges`; offsets everything by (`dx`, `dy`).
pub(super) fn layout(nodes: &[NodeSpec], edges: &[EdgeSpec], dx: i64, dy: i64) -> Layout {
    // Self-loops stand to the right of their box, each line followed by
    // its label.
    let mut loops: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            loops[e.from].push(i);
        }
    }
    let loop_room: Vec<i64> = loops
        .iter()
        .map(|ls| {
            ls.iter()
                .map(|&e| {
                    LOOP_STEP
                        + if edges[e].label_w > 0 {
                            LABEL_OFF + edges[e].label_w
                        } else {
                            0
                        }
                })
                .sum()
        })
        .collect();
    let g = rank_graph(nodes, edges, &loop_room);
    let order = order(&g);
    let x = place(&g, &order);
    // Band heights; the gap after a rank grows with how far its lines lean.
    let band = |r: usize| if r.is_multiple_of(2) { BOX_H } else { LABEL_H };
    let mut lean = vec![0i64; g.ranks];
    for v in 0..g.verts.len() {
        for &(w, _) in &g.down[v] {
            lean[g.rank[v]] = lean[g.rank[v]].max((x[v] - x[w]).abs());
        }
    }
    let mut top = Vec::with_capacity(g.ranks);
    let mut y = dy;
    for (r, lean) in lean.iter().enumerate() {
        top.push(y);
        y += band(r) + (lean / 3).clamp(MIN_RANK_GAP, MAX_RANK_GAP);
    }
    let height = if g.ranks == 0 {
        0
    } else {
        y - dy - (lean[g.ranks - 1] / 3).clamp(MIN_RANK_GAP, MAX_RANK_GAP)
    };
    let rects: Vec<Rect> = (0..nodes.len())
        .map(|n| Rect {
            x: dx + x[n] - g.left[n],
            y: top[g.rank[n]],
            w: nodes[n].w,
            h: BOX_H,
        })
        .collect();
    let shifted: Vec<i64> = x.iter().map(|p| p + dx).collect();
    let port = ports(&g, &shifted, &rects);
    let mut routes = Vec::with_capacity(edges.len());
    for (e, spec) in edges.iter().enumerate() {
        let chain = &g.chains[e];
        if chain.is_empty() {
            routes.push(self_loop(&rects[spec.from], &loops[spec.from], e, edges));
            continue;
        }
        let mut points = Vec::with_capacity(2 * chain.len());
        let mut label = None;
        let (&hi, &lo) = (chain.first().unwrap_or(&0), chain.last().unwrap_or(&0));
        points.push((port[e].0, rects[vert_node(&g, hi)].y + BOX_H));
        for &d in &chain[1..chain.len() - 1] {
            let (px, r) = (shifted[d], g.rank[d]);
            points.push((px, top[r]));
            points.push((px, top[r] + band(r)));
            if let Vert::Dummy(true) = g.verts[d] {
                label = Some(Rect {
                    x: px + LABEL_OFF,
                    y: top[r],
                    w: spec.label_w,
                    h: LABEL_H,
                });
            }
        }
        points.push((port[e].1, rects[vert_node(&g, lo)].y));
        if g.reversed[e] {
            points.reverse();
        }
        routes.push(Route {
            points: simplify(points),
            label,
        });
    }
    let right = (0..g.verts.len())
        .map(|v| dx + x[v] + g.right[v])
        .max()
        .unwrap_or(dx);
    Layout {
        nodes: rects,
        edges: routes,
        width: right - dx,
        height,
    }
}

fn vert_node(g: &Ranked, v: usize) -> usize {
    match g.verts[v] {
        Vert::Node(n) => n,
        Vert::Dummy(_) => 0,
    }
}

/// Loop `e` of a box whose loops are `loops`: out of its right side near
/// the top, down, back in near the bottom; its label after its line.
fn self_loop(r: &Rect, loops: &[usize], e: usize, edges: &[EdgeSpec]) -> Route {
    let mut cursor = r.x + r.w;
    for (i, &l) in loops.iter().enumerate() {
        let line = cursor + LOOP_STEP;
        let label_w = edges[l].label_w;
        if l == e {
            // Lines above and below the label row; nested a little.
            let inset = 3 + 2 * i64::try_from(i.min(2)).unwrap_or(2);
            let label = (label_w > 0).then_some(Rect {
                x: line + LABEL_OFF,
                y: r.y + (BOX_H - LABEL_H) / 2,
                w: label_w,
                h: LABEL_H,
            });
            return Route {
                points: vec![
                    (r.x + r.w, r.y + inset),
                    (line, r.y + inset),
                    (line, r.y + BOX_H - inset),
                    (r.x + r.w, r.y + BOX_H - inset),
                ],
                label,
            };
        }
        cursor = line + if label_w > 0 { LABEL_OFF + label_w } else { 0 };
    }
    Route {
        points: Vec::new(),
        label: None,
    }
}
