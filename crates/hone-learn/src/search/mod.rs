//! Finding a better version: [`optimiser`]s propose candidates, [`eval`]
//! runs a version over a dataset, [`compare`] pairs two versions' runs, the
//! [`gate`] proves a candidate against the champion, the [`front`] keeps
//! the Pareto-optimal ones, and [`flipped`] mines the cases on which recent
//! candidates and their champion disagreed.

pub mod compare;
pub mod eval;
pub mod flipped;
pub mod front;
pub mod gate;
pub mod optimiser;
