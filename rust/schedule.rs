//! Scheduling strategies that group a turn's runnable calls into batches.
//!
//! Batches run one after another; the calls of a batch may overlap, up to the
//! batch's concurrency. Every strategy keeps the calls in model order.

use crate::error::EngineError;

/// How the calls of a turn are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One call at a time.
    Sequential,
    /// All calls in one batch, at most `max_concurrency` in flight.
    Parallel { max_concurrency: usize },
    /// Chunks of `size` calls, chunk after chunk.
    Batched { size: usize, max_concurrency: usize },
    /// Runs of consecutive concurrency-safe calls share a batch; every other call runs alone.
    Partitioned { max_concurrency: usize },
}

/// A run of consecutive calls, `start..end` in the runnable list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub start: usize,
    pub end: usize,
    /// How many of the batch's calls may be in flight at once (at least 1).
    pub concurrency: usize,
}

impl Batch {
    /// Number of calls in the batch.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the batch is empty (never true of a planned batch).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Whether calls of this batch may overlap.
    pub fn is_concurrent(&self) -> bool {
        self.concurrency > 1 && self.len() > 1
    }
}

fn positive(option: &'static str, value: usize) -> Result<usize, EngineError> {
    if value == 0 {
        return Err(EngineError::InvalidOption {
            option,
            message: "must be at least 1".into(),
        });
    }
    Ok(value)
}

impl Strategy {
    /// Checks the strategy's sizes.
    pub fn validated(self) -> Result<Self, EngineError> {
        match self {
            Self::Sequential => {}
            Self::Parallel { max_concurrency } | Self::Partitioned { max_concurrency } => {
                positive("max_concurrency", max_concurrency)?;
            }
            Self::Batched { size, max_concurrency } => {
                positive("size", size)?;
                positive("max_concurrency", max_concurrency)?;
            }
        }
        Ok(self)
    }
}

/// Groups runnable calls into batches. `safe[i]` says whether call `i` is
/// concurrency-safe (only `Partitioned` looks at it).
pub fn plan_batches(strategy: Strategy, safe: &[bool]) -> Result<Vec<Batch>, EngineError> {
    let count = safe.len();
    let batch = |start: usize, end: usize, cap: usize| Batch {
        start,
        end,
        concurrency: cap.min(end - start).max(1),
    };
    let batches = match strategy.validated()? {
        Strategy::Sequential => (0..count).map(|i| batch(i, i + 1, 1)).collect(),
        Strategy::Parallel { max_concurrency } if count > 0 => vec![batch(0, count, max_concurrency)],
        Strategy::Parallel { .. } => Vec::new(),
        Strategy::Batched { size, max_concurrency } => (0..count)
            .step_by(size)
            .map(|start| batch(start, (start + size).min(count), size.min(max_concurrency)))
            .collect(),
        Strategy::Partitioned { max_concurrency } => {
            let mut batches = Vec::new();
            let mut start = 0;
            while start < count {
                let end = if safe[start] {
                    start + safe[start..].iter().take_while(|&&s| s).count()
                } else {
                    start + 1
                };
                batches.push(batch(start, end, max_concurrency));
                start = end;
            }
            batches
        }
    };
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(batches: &[Batch]) -> Vec<(usize, usize, usize)> {
        batches.iter().map(|b| (b.start, b.end, b.concurrency)).collect()
    }

    #[test]
    fn partitioned_isolates_unsafe_calls() {
        let safe = [true, true, false, true, true];
        let batches = plan_batches(Strategy::Partitioned { max_concurrency: 10 }, &safe).unwrap();
        assert_eq!(ranges(&batches), vec![(0, 2, 2), (2, 3, 1), (3, 5, 2)]);
        assert!(batches[0].is_concurrent());
        assert!(!batches[1].is_concurrent());
    }

    #[test]
    fn partitioned_never_merges_unsafe_neighbours() {
        let batches = plan_batches(Strategy::Partitioned { max_concurrency: 2 }, &[false, false, true]).unwrap();
        assert_eq!(ranges(&batches), vec![(0, 1, 1), (1, 2, 1), (2, 3, 1)]);
    }

    #[test]
    fn the_cap_bounds_concurrency() {
        let batches = plan_batches(Strategy::Parallel { max_concurrency: 3 }, &[false; 8]).unwrap();
        assert_eq!(ranges(&batches), vec![(0, 8, 3)]);
        let batches = plan_batches(
            Strategy::Batched {
                size: 3,
                max_concurrency: 2,
            },
            &[true; 7],
        )
        .unwrap();
        assert_eq!(ranges(&batches), vec![(0, 3, 2), (3, 6, 2), (6, 7, 1)]);
    }

    #[test]
    fn sequential_runs_one_at_a_time() {
        let batches = plan_batches(Strategy::Sequential, &[true; 3]).unwrap();
        assert_eq!(ranges(&batches), vec![(0, 1, 1), (1, 2, 1), (2, 3, 1)]);
    }

    #[test]
    fn empty_turns_have_no_batches() {
        for strategy in [
            Strategy::Sequential,
            Strategy::Parallel { max_concurrency: 1 },
            Strategy::Batched {
                size: 2,
                max_concurrency: 1,
            },
            Strategy::Partitioned { max_concurrency: 1 },
        ] {
            assert!(plan_batches(strategy, &[]).unwrap().is_empty());
        }
    }

    #[test]
    fn zero_sizes_are_refused() {
        assert!(plan_batches(
            Strategy::Batched {
                size: 0,
                max_concurrency: 1
            },
            &[true]
        )
        .is_err());
        assert!(plan_batches(Strategy::Partitioned { max_concurrency: 0 }, &[true]).is_err());
    }
}
