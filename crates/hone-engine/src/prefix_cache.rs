//! Automatic prefix caching: the keys and values of recent prompts, kept so
//! a prompt that starts as an earlier one did — an agent's system prompt and
//! tool schemas, the earlier turns of the same episode — prefills only what
//! is new.
//!
//! Entries are whole prompts with the adapter they were computed under (a
//! LoRA changes keys and values, so a prefix is shared only under the same
//! adapter), evicted least recently used first once their keys and values
//! pass a byte budget. A lookup takes the entry with the longest common
//! prefix and copies that much of its cache; at least the prompt's last
//! token is always computed, since its hidden state gives the first sample.
//! Reusing a prefix changes only the order of floating-point sums, so a
//! request's logprobs agree with a cold prefill to rounding.

use crate::lora::Adapter;
use crate::model::KvCache;
use crate::Result;
use std::sync::Arc;

/// What the cache has served so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompts looked up.
    pub lookups: u64,
    /// Prompts that reused a cached prefix.
    pub hits: u64,
    /// Prompt tokens whose keys and values came from the cache.
    pub reused_tokens: u64,
    /// Prompt tokens looked up in all.
    pub prompt_tokens: u64,
}

struct Entry {
    tokens: Vec<u32>,
    /// Held so that the pointer identifying the adapter is not reused while
    /// the entry lives.
    adapter: Option<Arc<Adapter>>,
    cache: KvCache,
    bytes: usize,
}

/// Cached prompt prefixes under a byte budget (0 turns caching off).
pub struct PrefixCache {
    /// Least recently used first.
    entries: Vec<Entry>,
    budget_bytes: usize,
    bytes: usize,
    stats: PrefixStats,
}

fn same_adapter(a: &Option<Arc<Adapter>>, b: &Option<Arc<Adapter>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            budget_bytes,
            bytes: 0,
            stats: PrefixStats::default(),
        }
    }

    pub fn stats(&self) -> PrefixStats {
        self.stats
    }

    /// Bytes of keys and values held now (never above the budget).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A cache holding the keys and values of the longest cached prefix of
    /// `prompt` computed under `adapter` — at most all but its last token —
    /// or an empty cache when none is shared.
    pub fn lookup(&mut self, prompt: &[u32], adapter: &Option<Arc<Adapter>>) -> Result<KvCache> {
        self.forget_unloaded_adapters();
        self.stats.lookups += 1;
        self.stats.prompt_tokens += prompt.len() as u64;
        let usable = prompt.len().saturating_sub(1);
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| same_adapter(&e.adapter, adapter))
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt).min(usable)))
            .max_by_key(|&(i, shared)| (shared, i));
        let Some((i, shared)) = best.filter(|&(_, shared)| shared > 0) else {
            return Ok(KvCache::new());
        };
        let entry = self.entries.remove(i);
        let cache = entry.cache.fork_prefix(shared)?;
        self.entries.push(entry);
        self.stats.hits += 1;
        self.stats.reused_tokens += shared as u64;
        Ok(cache)
    }

    /// Keeps `cache` (the keys and values of exactly `prompt`, computed
    /// under `adapter`), replacing entries it extends and evicting the least
    /// recently used ones beyond the budget. A prompt that an entry already
    /// covers only refreshes that entry.
    pub fn insert(&mut self, prompt: &[u32], adapter: &Option<Arc<Adapter>>, cache: &KvCache) -> Result<()> {
        if self.budget_bytes == 0 || prompt.is_empty() || cache.len() != prompt.len() {
            return Ok(());
        }
        let related = |e: &Entry| same_adapter(&e.adapter, adapter);
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| related(e) && e.tokens.len() >= prompt.len() && e.tokens.starts_with(prompt))
        {
            let entry = self.entries.remove(i);
            self.entries.push(entry);
            return Ok(());
        }
        let bytes = cache.bytes();
        if bytes > self.budget_bytes {
            return Ok(());
        }
        let before = self.entries.len();
        self.entries.retain(|e| !(related(e) && prompt.starts_with(&e.tokens)));
        if self.entries.len() != before {
            self.recount();
        }
        self.entries.push(Entry {
            tokens: prompt.to_vec(),
            adapter: adapter.clone(),
            cache: cache.fork()?,
            bytes,
        });
        self.bytes += bytes;
        while self.bytes > self.budget_bytes {
            let evicted = self.entries.remove(0);
            self.bytes -= evicted.bytes;
        }
        Ok(())
    }

    /// Drops entries whose adapter only this cache still holds: it was
    /// unloaded, and no new request can name that copy again.
    fn forget_unloaded_adapters(&mut self) {
        let held_here = |a: &Arc<Adapter>| {
            self.entries
                .iter()
                .filter(|e| e.adapter.as_ref().is_some_and(|b| Arc::ptr_eq(a, b)))
                .count()
        };
        let unloaded: Vec<bool> = self
            .entries
            .iter()
            .map(|e| e.adapter.as_ref().is_some_and(|a| Arc::strong_count(a) <= held_here(a)))
            .collect();
        if unloaded.contains(&true) {
            let mut flags = unloaded.into_iter();
            self.entries.retain(|_| !flags.next().unwrap_or(false));
            self.recount();
        }
    }

    fn recount(&mut self) {
        self.bytes = self.entries.iter().map(|e| e.bytes).sum();
    }
}
