//! Pure money and tree logic: no I/O, no clock reads (the caller passes `now`).

pub mod dates;
pub mod days;
pub mod docs;
pub mod engine;
pub mod events;
pub mod forecast;
pub mod frac;
pub mod note;
pub mod num;
pub mod origin;
pub mod recur;
pub mod sched_match;
pub mod schedule;
pub mod status;
pub mod text;
pub mod token;
pub mod tree;
pub mod txid;
pub mod wake;
