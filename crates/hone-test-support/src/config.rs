//! A hone config for a test, built from the parts tests keep repeating (a
//! provider pointing at the fake upstream, prices, an agent with its
//! champion, an agent served in-process from a checkpoint) plus any TOML a
//! test adds. It produces the TOML text `hone serve` and `load_str` read, so
//! tests exercise the real config parser.

use std::fmt::Write as _;
use std::path::Path;

/// A config under construction; [`TestConfig::build`] gives its TOML.
#[derive(Debug, Default, Clone)]
pub struct TestConfig {
    text: String,
}

impl TestConfig {
    pub fn new() -> Self {
        Self::default()
    }

    /// `[gateway]` with its data directory.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        let _ = writeln!(self.text, "[gateway]\ndata_dir = {:?}\n", dir.display().to_string());
        self
    }

    /// Provider `name` of `kind` (`openai`, `anthropic`) at `base_url`,
    /// failing fast: no retries, a 5 s timeout.
    pub fn provider(mut self, name: &str, kind: &str, base_url: &str) -> Self {
        let _ = writeln!(
            self.text,
            "[providers.{name}]\ntype = {kind:?}\nbase_url = {base_url:?}\nmax_retries = 0\ntimeout_ms = 5000\n"
        );
        self
    }

    /// An OpenAI-compatible provider `name` at `base_url`.
    pub fn openai(self, name: &str, base_url: &str) -> Self {
        self.provider(name, "openai", base_url)
    }

    /// The price of `model` on `provider`, in dollars per million tokens.
    pub fn price(mut self, provider: &str, model: &str, input: f64, output: f64) -> Self {
        let _ = writeln!(
            self.text,
            "[providers.{provider}.prices.{model:?}]\ninput_per_mtok = {input:?}\noutput_per_mtok = {output:?}\n"
        );
        self
    }

    /// Agent `name` whose version `v1` calls `model` on `provider`.
    pub fn agent(mut self, name: &str, provider: &str, model: &str) -> Self {
        let _ = writeln!(
            self.text,
            "[agents.{name}.versions.v1]\nprovider = {provider:?}\nmodel = {model:?}\n"
        );
        self
    }

    /// The in-process provider `local` (once per config).
    pub fn local(mut self) -> Self {
        self.text.push_str("[providers.local]\ntype = \"local\"\n\n");
        self
    }

    /// Agent `name` served in-process from the checkpoint at `model` (a
    /// path or URL), sampling at temperature 1 for `max_tokens`, `v1` its
    /// champion.
    pub fn local_agent(mut self, name: &str, model: &str, max_tokens: u32) -> Self {
        let _ = writeln!(
            self.text,
            "[agents.{name}.versions.v1]\nprovider = {{ type = \"local\", model = {model:?} }}\n\
             temperature = 1.0\nmax_tokens = {max_tokens}\n[agents.{name}.deployment]\nchampion = \"v1\"\n"
        );
        self
    }

    /// Any further TOML, as it is.
    pub fn toml(mut self, text: &str) -> Self {
        self.text.push_str(text);
        self.text.push('\n');
        self
    }

    /// The TOML text.
    pub fn build(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_config_the_real_parser_accepts() {
        let dir = std::env::temp_dir();
        let text = TestConfig::new()
            .data_dir(&dir)
            .openai("up", "http://127.0.0.1:9/v1")
            .price("up", "good", 1.0, 2.0)
            .agent("calc", "up", "good")
            .local()
            .local_agent("tiny", "/nonexistent/model", 6)
            .toml("[agents.calc.deployment]\nchampion = \"v1\"")
            .build();
        let config = hone_config::load_str(&text, &dir, &|_| None).unwrap();
        assert_eq!(config.gateway.data_dir, dir);
        let calc = &config.agents["calc"].versions["v1"].spec;
        assert_eq!(
            (calc.routes[0].provider.as_str(), calc.routes[0].model.as_str()),
            ("up", "good")
        );
        let price = &config.providers["up"].prices["good"];
        assert_eq!((price.input_per_mtok, price.output_per_mtok), (1.0, 2.0));
        assert_eq!(config.agents["tiny"].versions["v1"].spec.max_tokens, Some(6));
    }
}
