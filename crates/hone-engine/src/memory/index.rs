//! An approximate nearest-neighbour index over a datastore's keys: HNSW
//! (Malkov & Yashunin, arXiv:1603.09320) from the `instant-distance` crate,
//! built in parallel once per datastore, with the same squared Euclidean
//! distance as the exact scan. Its points refer to rows of the shared key
//! matrix, so indexing does not copy the keys.

use super::Keys;
use instant_distance::{Builder, Hnsw, Search};
use std::cell::RefCell;
use std::sync::Arc;

/// Candidates kept while searching (`ef`); the `k` nearest of them are
/// returned, so `k` above this is cut to it.
const EF_SEARCH: usize = 96;
/// Candidates kept while inserting (`efConstruction`).
const EF_CONSTRUCTION: usize = 64;

/// A datastore's HNSW graph.
pub(super) struct Index {
    hnsw: Hnsw<Point>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Index(hnsw)")
    }
}

/// A stored key (a row of the matrix) or a query.
#[derive(Clone)]
enum Point {
    Stored { keys: Arc<Keys>, row: usize },
    Query { vector: Arc<[f32]>, norm: f32 },
}

impl instant_distance::Point for Point {
    fn distance(&self, other: &Self) -> f32 {
        match (self, other) {
            (Point::Stored { keys, row }, Point::Stored { row: other, .. }) => {
                keys.distance(*row, keys.row(*other), keys.norms[*other])
            }
            (Point::Stored { keys, row }, Point::Query { vector, norm })
            | (Point::Query { vector, norm }, Point::Stored { keys, row }) => keys.distance(*row, vector, *norm),
            (Point::Query { vector: a, .. }, Point::Query { vector: b, .. }) => {
                a.iter().zip(b.iter()).map(|(x, y)| (x - y) * (x - y)).sum()
            }
        }
    }
}

thread_local! {
    /// A search's working memory, reused by the decode steps of a thread.
    static SEARCH: RefCell<Search> = RefCell::new(Search::default());
}

impl Index {
    /// Indexes every row of `keys` (seeded: the same keys give the same graph).
    pub(super) fn build(keys: &Arc<Keys>) -> Self {
        let n = keys.norms.len();
        let points = (0..n)
            .map(|row| Point::Stored {
                keys: keys.clone(),
                row,
            })
            .collect();
        // Neighbours kept by distance alone: the selection heuristic
        // re-ranks every neighbour's 64 links on each insert (~260k distance
        // computations per key), which took over ten minutes for 100k keys
        // of width 896 on two cores; simple selection needs ~4k.
        let (hnsw, _) = Builder::default()
            .ef_construction(EF_CONSTRUCTION)
            .ef_search(EF_SEARCH)
            .select_heuristic(None)
            .seed(0)
            .build_hnsw(points);
        Self { hnsw }
    }

    /// About the `k` nearest rows to `query` as (squared distance, row),
    /// nearest first.
    pub(super) fn search(&self, query: &[f32], k: usize) -> Vec<(f32, usize)> {
        let query = Point::Query {
            norm: query.iter().map(|v| v * v).sum(),
            vector: query.into(),
        };
        SEARCH.with_borrow_mut(|search| {
            self.hnsw
                .search(&query, search)
                .take(k)
                .filter_map(|item| match item.point {
                    Point::Stored { row, .. } => Some((item.distance, *row)),
                    Point::Query { .. } => None,
                })
                .collect()
        })
    }
}
