//! Metering what reflective optimisers spend calling models, against their
//! own budget and the cycle's (`[agents.NAME.learn] budget`): a call is
//! allowed while neither is spent, and charged to both after it answers.

use hone_config::{Budget, Price};
use hone_types::openai::Usage;
use hone_types::Spend;
use std::sync::{Arc, Mutex};

/// A budget and what has been spent against it.
#[derive(Debug)]
pub struct Tally {
    /// Whose budget, for messages (`the cycle's budget`).
    pub name: String,
    pub budget: Budget,
    spent: Mutex<Spend>,
}

impl Tally {
    pub fn new(name: impl Into<String>, budget: Budget) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            budget,
            spent: Mutex::new(Spend::default()),
        })
    }

    pub fn spent(&self) -> Spend {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why no further call fits, if one does not.
    pub fn exhausted(&self) -> Option<String> {
        let s = self.spent();
        let b = &self.budget;
        let over = if s.calls >= b.calls {
            format!("{} of {} calls", s.calls, b.calls)
        } else if s.tokens >= b.tokens {
            format!("{} of {} tokens", s.tokens, b.tokens)
        } else if s.cost_usd >= b.usd {
            format!("${:.4} of ${:.4}", s.cost_usd, b.usd)
        } else {
            return None;
        };
        Some(format!("{} is spent ({over})", self.name))
    }

    fn charge(&self, spend: Spend) {
        self.spent.lock().unwrap_or_else(|p| p.into_inner()).add(spend);
    }
}

/// One optimiser's meter: its own tally, then the cycle's.
#[derive(Debug)]
pub struct Meter {
    own: Arc<Tally>,
    cycle: Arc<Tally>,
    /// The reflection model's price, when the config names one.
    price: Option<Price>,
}

impl Meter {
    pub fn new(own: Arc<Tally>, cycle: Arc<Tally>, price: Option<Price>) -> Self {
        Self { own, cycle, price }
    }

    /// A meter for optimisers that call no model: nothing is ever charged.
    pub fn unmetered() -> Self {
        let open = Budget {
            calls: u64::MAX,
            tokens: u64::MAX,
            usd: f64::INFINITY,
        };
        Self::new(Tally::new("none", open), Tally::new("none", open), None)
    }

    /// Ok while another call fits both budgets; else why not.
    pub fn allow(&self) -> Result<(), String> {
        match self.own.exhausted().or_else(|| self.cycle.exhausted()) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Charges one answered call (a call without usage still counts).
    pub fn charge(&self, usage: Option<&Usage>) {
        let spend = Spend {
            calls: 1,
            tokens: usage.map_or(0, |u| u.prompt_tokens + u.completion_tokens),
            cost_usd: match (usage, &self.price) {
                (Some(u), Some(p)) => p.cost_usd(u),
                _ => 0.0,
            },
        };
        self.own.charge(spend);
        self.cycle.charge(spend);
    }

    /// Ok when a spend of `tokens` and `usd` (an estimate made before it)
    /// fits what is left of both budgets; else why not.
    pub fn fits(&self, tokens: u64, usd: f64) -> Result<(), String> {
        for tally in [&self.own, &self.cycle] {
            let (spent, budget) = (tally.spent(), tally.budget);
            if spent.tokens.saturating_add(tokens) > budget.tokens {
                return Err(format!(
                    "over {} ({} of {} tokens left)",
                    tally.name,
                    budget.tokens.saturating_sub(spent.tokens),
                    budget.tokens
                ));
            }
            if spent.cost_usd + usd > budget.usd {
                return Err(format!(
                    "over {} (${:.2} of ${:.2} left)",
                    tally.name,
                    (budget.usd - spent.cost_usd).max(0.0),
                    budget.usd
                ));
            }
        }
        Ok(())
    }

    /// Charges a spend measured otherwise (a fine-tuning job's trained
    /// tokens at its price).
    pub fn charge_spend(&self, spend: Spend) {
        self.own.charge(spend);
        self.cycle.charge(spend);
    }

    /// What this optimiser has spent.
    pub fn spent(&self) -> Spend {
        self.own.spent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(calls: u64, tokens: u64, usd: f64) -> Budget {
        Budget { calls, tokens, usd }
    }

    #[test]
    fn a_meter_stops_at_the_first_budget_spent_and_charges_both() {
        let cycle = Tally::new("the cycle's budget", budget(3, 1_000, 1.0));
        let price = Price {
            input_per_mtok: 1_000.0,
            output_per_mtok: 2_000.0,
            cached_input_per_mtok: 0.0,
            cache_write_per_mtok: 0.0,
        };
        let a = Meter::new(
            Tally::new("the prompt optimiser's budget", budget(2, 1_000, 1.0)),
            cycle.clone(),
            Some(price),
        );
        let usage = Usage {
            prompt_tokens: 100,
            completion_tokens: 10,
            total_tokens: 110,
            extra: Default::default(),
        };
        assert!(a.allow().is_ok());
        a.charge(Some(&usage));
        assert!(a.allow().is_ok());
        a.charge(Some(&usage));
        assert_eq!(
            a.allow().unwrap_err(),
            "the prompt optimiser's budget is spent (2 of 2 calls)"
        );
        let spent = a.spent();
        assert_eq!((spent.calls, spent.tokens), (2, 220));
        assert!((spent.cost_usd - 2.0 * (0.1 + 0.02)).abs() < 1e-12, "{spent:?}");

        // The cycle's budget holds one more call, for whichever optimiser.
        let b = Meter::new(
            Tally::new("the playbook optimiser's budget", budget(10, 1_000, 1.0)),
            cycle.clone(),
            None,
        );
        assert!(b.allow().is_ok());
        b.charge(None);
        assert_eq!(b.allow().unwrap_err(), "the cycle's budget is spent (3 of 3 calls)");
        assert_eq!(cycle.spent().calls, 3);
        assert_eq!(b.spent().cost_usd, 0.0, "no price, no dollars");

        let tokens = Meter::new(
            Tally::new("the tools optimiser's budget", budget(10, 50, 1.0)),
            Tally::new("c", budget(9, 9_999, 9.0)),
            None,
        );
        tokens.charge(Some(&usage));
        assert_eq!(
            tokens.allow().unwrap_err(),
            "the tools optimiser's budget is spent (110 of 50 tokens)"
        );
    }
}
