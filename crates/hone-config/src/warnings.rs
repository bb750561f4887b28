//! What `hone config check` warns about in a config that loads: settings
//! that are valid alone but do not do what they seem to together.

use crate::{AgentConfig, Config, OptimiserSpec};

/// The least one-sided Fisher p-value of a flip confirmed on `runs` runs a
/// side (all pass against none pass): 1 / C(2·runs, runs).
fn least_flip_p(runs: u32) -> f64 {
    let n = u64::from(runs);
    (1..=n).map(|k| k as f64 / (n + k) as f64).product()
}

fn agent_warnings(agent: &AgentConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    let learn = &agent.learn;
    if !learn.optimisers.is_empty() {
        let gate = &learn.gate;
        let runs = gate.samples + gate.reruns;
        let p = least_flip_p(runs);
        if p > 1.0 - gate.confidence + 1e-12 {
            let enough = (1..=20)
                .find(|r| least_flip_p(gate.samples + r) <= 1.0 - gate.confidence + 1e-12)
                .unwrap_or(20);
            warnings.push(format!(
                "agents.{}.learn.gate: with samples = {} and reruns = {} a regression is at best p = {p:.3}, so at \
                 confidence {} none can be confirmed and the gate passes every regression; set reruns = {enough} or more",
                agent.name, gate.samples, gate.reruns, gate.confidence
            ));
        }
    }
    for spec in &learn.optimisers {
        if let OptimiserSpec::FineTune(f) = spec {
            if !learn.upload.allowed {
                warnings.push(format!(
                    "agents.{}.learn: `{}` uploads nothing until the agent allows it (`allow_upload = true`)",
                    agent.name,
                    f.method.name()
                ));
            }
        }
    }
    warnings
}

impl Config {
    /// The agents the user declared, without those hone records its own
    /// calls under (the judge's, the reflector's).
    pub fn user_agents(&self) -> impl Iterator<Item = &AgentConfig> {
        self.agents.values().filter(|a| !crate::is_internal_agent(&a.name))
    }

    /// Settings that load but do not do what they seem to.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.user_agents().next().is_none() {
            warnings.push("no agents: hone serves nothing until `[agents.NAME]` declares one".to_owned());
        }
        for agent in self.user_agents() {
            warnings.extend(agent_warnings(agent));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::least_flip_p;

    #[test]
    fn the_least_flip_p_is_one_over_the_central_binomial() {
        assert!((least_flip_p(2) - 1.0 / 6.0).abs() < 1e-12);
        assert!((least_flip_p(3) - 1.0 / 20.0).abs() < 1e-12);
        assert!((least_flip_p(4) - 1.0 / 70.0).abs() < 1e-12);
    }
}
