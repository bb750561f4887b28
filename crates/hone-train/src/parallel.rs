//! A batch's parts on threads of their own: the trainers cut a batch when
//! each candle op runs on one thread (`hone_engine::threads::batch_parts`),
//! so the other cores work on the other parts. The base-policy build cuts
//! its rendering of demonstrations the same way.

use crate::{Result, TrainError};

/// `items` cut into at most `parts` consecutive parts of nearly equal
/// length (one part when `parts` is 0 or 1; never an empty part).
pub fn cut<T>(items: &[T], parts: usize) -> std::slice::Chunks<'_, T> {
    items.chunks(hone_engine::threads::part_len(items.len(), parts))
}

/// Runs each job on a thread of its own (a single job on the calling
/// thread) and returns their results in order (the first error, if any;
/// a panicked job is a [`TrainError::Data`]).
pub fn on_threads<T, E, F>(jobs: impl IntoIterator<Item = F>) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send + From<TrainError>,
    F: FnOnce() -> Result<T, E> + Send,
{
    let mut jobs: Vec<F> = jobs.into_iter().collect();
    if jobs.len() == 1 {
        return jobs.pop().into_iter().map(|job| job()).collect();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs.into_iter().map(|job| scope.spawn(job)).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(TrainError::Data("a thread panicked".into()).into()))
            })
            .collect()
    })
}
