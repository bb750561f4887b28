//! The journal reader over torn and corrupt segments (property tests): every
//! whole line is read back, in order, whatever fragments and damaged lines
//! surround it; nothing is invented; no input makes it panic.

use crate::common::call;
use hone_store::journal::parse_segment;
use hone_types::EpisodeId;
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
        for (i, append) in appends.iter().enumerate() {
            let record = call(&episode, i as i64);
            let line = serde_json::to_vec(&record).unwrap();
            match append {
                Append::Whole => {
                    bytes.extend_from_slice(&line);
                    bytes.push(b'\n');
                    whole.push(record.id);
                }
                Append::Torn(fraction) => {
                    let cut = 1 + ((line.len() - 2) as f64 * fraction) as usize;
                    bytes.extend_from_slice(&line[..cut]);
                }
                Append::Garbage(text) => {
                    bytes.extend_from_slice(text.as_bytes());
                    bytes.push(b'\n');
                    garbage += 1;
                }
            }
        }
        let segment = parse_segment(&bytes);
        let read: Vec<_> = segment.calls.iter().map(|c| c.id).collect();
        prop_assert_eq!(read, whole, "whole lines lost, reordered or invented");
        prop_assert_eq!(segment.bad_lines.len(), garbage);
        let torn_runs = appends
            .iter()
            .zip(appends.iter().skip(1).map(Some).chain([None]))
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
