//! Okapi BM25 over short texts: the retrieval episodic memory falls back to
//! when no embedding model is configured.

use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Lower-cased runs of letters and digits.
pub fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[derive(Debug, Default)]
pub struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    doc_freq: HashMap<String, u32>,
    mean_length: f64,
}

impl Bm25 {
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut index = Self::default();
        for text in texts {
            let mut counts: HashMap<String, u32> = HashMap::new();
            let toks = tokens(text);
            index.lengths.push(toks.len() as f64);
            for t in toks {
                *counts.entry(t).or_default() += 1;
            }
            for t in counts.keys() {
                *index.doc_freq.entry(t.clone()).or_default() += 1;
            }
            index.docs.push(counts);
        }
        index.mean_length = index.lengths.iter().sum::<f64>() / index.lengths.len().max(1) as f64;
        index
    }

    /// Every document's score for the query, in document order.
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let n = self.docs.len() as f64;
        let query = tokens(query);
        self.docs
            .iter()
            .zip(&self.lengths)
            .map(|(doc, &len)| {
                query
                    .iter()
                    .filter_map(|t| {
                        let tf = f64::from(*doc.get(t)?);
                        let df = f64::from(self.doc_freq.get(t).copied().unwrap_or(0));
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        Some(idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.mean_length.max(1e-9))))
                    })
                    .sum()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_sharing_rare_words_ranks_first() {
        let index = Bm25::new([
            "What is the weather in Paris?",
            "What is 2+3?",
            "Book a table in Paris for two",
        ]);
        let s = index.scores("weather Paris tomorrow");
        assert!(s[0] > s[2] && s[2] > s[1], "{s:?}");
        assert_eq!(s[1], 0.0);
        // Hand check of one term: idf(weather) with n=3, df=1 → ln(2.5/1.5 + 1).
        let one = index.scores("weather")[0];
        let len = 6.0;
        let mean = (6.0 + 4.0 + 7.0) / 3.0; // "what is 2 3", "book a table in paris for two"
        let expected = (2.5f64 / 1.5 + 1.0).ln() * 2.2 / (1.0 + 1.2 * (0.25 + 0.75 * len / mean));
        assert!((one - expected).abs() < 1e-12, "{one} vs {expected}");
    }
}
