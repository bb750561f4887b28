//! The Pareto front over an agent's objectives (`max reward`, `min cost`,
//! `min latency`): a point is dominated when another is at least as good on
//! every objective and better on one.

use hone_config::Objective;

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub reward: f64,
    pub cost: f64,
    pub latency: f64,
}

fn better_or_equal(o: Objective, a: &Point, b: &Point) -> (bool, bool) {
    let (x, y) = match o {
        Objective::MaxReward => (a.reward, b.reward),
        // Lower is better: compare negated.
        Objective::MinCost => (-a.cost, -b.cost),
        Objective::MinLatency => (-a.latency, -b.latency),
    };
    (x >= y, x > y)
}

/// Whether `a` dominates `b` on the objectives.
pub fn dominates(objectives: &[Objective], a: &Point, b: &Point) -> bool {
    let mut strictly = false;
    for o in objectives {
        let (ge, gt) = better_or_equal(*o, a, b);
        if !ge {
            return false;
        }
        strictly |= gt;
    }
    strictly
}

/// For each point, the index of a point that dominates it (`None`: on the front).
pub fn dominated_by(objectives: &[Objective], points: &[Point]) -> Vec<Option<usize>> {
    points
        .iter()
        .map(|p| {
            points
                .iter()
                .enumerate()
                .find(|(_, q)| dominates(objectives, q, p))
                .map(|(i, _)| i)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(reward: f64, cost: f64) -> Point {
        Point {
            reward,
            cost,
            latency: 0.0,
        }
    }

    #[test]
    fn dominated_points_are_found_and_trade_offs_kept() {
        let o = [Objective::MaxReward, Objective::MinCost];
        // 0: good and dear, 1: worse and cheap (a trade-off), 2: worse and dearer than 0, 3: equal to 0.
        let points = [p(0.9, 2.0), p(0.6, 0.5), p(0.8, 3.0), p(0.9, 2.0)];
        let d = dominated_by(&o, &points);
        assert_eq!(d, vec![None, None, Some(0), None]);
        // Reward alone: only the best survive.
        let d = dominated_by(&[Objective::MaxReward], &points);
        assert_eq!(d, vec![None, Some(0), Some(0), None]);
    }
}
