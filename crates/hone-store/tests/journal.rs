//! The journal reader over torn and corrupt segments (property tests): every
//! whole line is read back, in order, whatever fragments and damaged lines
//! surround it; nothing is invented; no input makes it panic.

use crate::common::call;
use hone_store::journal::parse_segment;
use hone_types::{CallRecord, EpisodeId};
use proptest::prelude::*;

/// What one append left in a segment.
#[derive(Debug, Clone)]
enum Append {
    /// A whole line: acknowledged, must be read back.
    Whole,
    /// A write cut short after this fraction of the line (never acknowledged),
    /// with whatever comes next appended straight onto it.
    Torn(f64),
    /// A damaged line (not a call at all).
    Garbage(String),
}

fn appends() -> impl Strategy<Value = Vec<Append>> {
    let append = prop_oneof![
        4 => Just(Append::Whole),
        2 => (0.0f64..1.0).prop_map(Append::Torn),
        1 => "[a-z{}\\[\\]\":,0-9]{1,40}".prop_map(Append::Garbage),
    ];
    proptest::collection::vec(append, 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_whole_line_is_read_back_past_torn_and_corrupt_lines(appends in appends()) {
        let episode = EpisodeId::new_v7();
        let mut bytes = Vec::new();
        let mut whole = Vec::new();
        let mut garbage = 0;
        // What each append turned out to be: a torn fragment that garbage
        // happens to complete (a record ending `{}}` cut before its `}}`, then
        // the garbage `}}`) is a whole record in bytes, and no reader can
        // tell, so the pair counts as one whole line.
        let mut effective = Vec::new();
        let mut fragment: Option<Vec<u8>> = None;
        for (i, append) in appends.iter().enumerate() {
            let record = call(&episode, i as i64);
            let line = serde_json::to_vec(&record).unwrap();
            let last_fragment = fragment.take();
            match append {
                Append::Whole => {
                    bytes.extend_from_slice(&line);
                    bytes.push(b'\n');
                    whole.push(record.id);
                    effective.push(Append::Whole);
                }
                Append::Torn(fraction) => {
                    let cut = 1 + ((line.len() - 2) as f64 * fraction) as usize;
                    bytes.extend_from_slice(&line[..cut]);
                    fragment = Some(line[..cut].to_vec());
                    effective.push(append.clone());
                }
                Append::Garbage(text) => {
                    bytes.extend_from_slice(text.as_bytes());
                    bytes.push(b'\n');
                    let completed = last_fragment
                        .map(|head| [head, text.clone().into_bytes()].concat())
                        .and_then(|joined| serde_json::from_slice::<CallRecord>(&joined).ok());
                    match completed {
                        Some(completed) => {
                            whole.push(completed.id);
                            effective.pop();
                            effective.push(Append::Whole);
                        }
                        None => {
                            garbage += 1;
                            effective.push(append.clone());
                        }
                    }
                }
            }
        }
        let segment = parse_segment(&bytes);
        let read: Vec<_> = segment.calls.iter().map(|c| c.id).collect();
        prop_assert_eq!(read, whole, "whole lines lost, reordered or invented");
        prop_assert_eq!(segment.bad_lines.len(), garbage);
        let torn_runs = effective
            .iter()
            .zip(effective.iter().skip(1).map(Some).chain([None]))
            .filter(|(this, next)| {
                matches!(this, Append::Torn(_)) && matches!(next, None | Some(Append::Whole))
            })
            .count();
        prop_assert_eq!(segment.torn, torn_runs, "fragments not accounted for");
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_reader(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let segment = parse_segment(&bytes);
        prop_assert!(segment.bad_lines.len() <= bytes.iter().filter(|b| **b == b'\n').count());
    }
}
