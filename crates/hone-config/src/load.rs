//! Reading a config: the file, or text, is parsed into [`RawConfig`] and
//! converted section by section ([`Config::from_raw`]) into a [`Config`].

use crate::config::{Config, RawConfig};
use crate::env::Env;
use crate::error::ConfigError;
use std::path::Path;

/// Reads and validates a config file; relative paths in it are resolved from
/// the file's directory.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: None,
        field: None,
        message: format!("cannot read config file {}: {e}", path.display()),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str(&text, base, &|name| std::env::var(name).ok()).map_err(|mut e| {
        e.file = Some(path.display().to_string());
        e
    })
}

/// Validates config text. `base_dir` anchors `system_file` paths; `lookup`
/// resolves `${VAR}` references.
pub fn load_str(text: &str, base_dir: &Path, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        file: None,
        field: None,
        message: e.to_string().trim_end().to_owned(),
    })?;
    Config::from_raw(raw, &Env { base_dir, lookup })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalDType, DEFAULT_CONFIG};
    use std::path::PathBuf;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        load_str(text, Path::new("."), &no_env)
    }

    const BASE: &str = r#"
[providers.up]
type = "openai"
base_url = "http://127.0.0.1:9/v1"
[agents.a.versions.v1]
provider = "up"
model = "m"
"#;

    #[test]
    fn the_default_config_loads_without_any_environment() {
        let c = load(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.providers["openai"].base_url, "https://api.openai.com/v1");
        assert_eq!(c.agents["assistant"].deployment.champion, "v1");
        assert_eq!(c.store.sqlite_path(), Some(Path::new("./hone-data/hone.db")));
    }

    #[test]
    fn a_postgres_store_takes_its_url_from_the_environment_and_never_prints_it() {
        let text = format!("store = {{ type = \"postgres\", url = \"${{DATABASE_URL}}\", pool = 4 }}\n{BASE}");
        let env = |name: &str| (name == "DATABASE_URL").then(|| "postgres://hone:s3cret@db:5432/hone".to_owned());
        let c = load_str(&text, Path::new("."), &env).unwrap();
        assert_eq!(
            c.store.backend,
            crate::StoreBackend::Postgres {
                url: "postgres://hone:s3cret@db:5432/hone".into(),
                pool: 4
            }
        );
        assert_eq!(c.store.sqlite_path(), None);
        assert!(!format!("{:?}", c.store).contains("s3cret"));
        let e = load_str(&text, Path::new("."), &no_env).unwrap_err();
        assert!(e.message.contains("DATABASE_URL"), "{e}");
        let e = load(&format!(
            "store = {{ type = \"postgres\", url = \"mysql://x\" }}\n{BASE}"
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("store.url") && e.message.contains("postgres://"),
            "{e}"
        );
        let e = load(&format!(
            "store = {{ type = \"postgres\", url = \"postgres://x\", pool = 0 }}\n{BASE}"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("store.pool"), "{e}");
    }

    #[test]
    fn a_promotion_margin_asks_a_canary_to_show_it_is_not_worse_within_a_cap() {
        use crate::PromotionRule;
        let deployment =
            |extra: &str| format!("{BASE}[agents.a.deployment]\nchampion = \"v1\"\ncanary_episodes = 20\n{extra}");
        let rule = |extra: &str| load(&deployment(extra)).map(|c| c.agents["a"].deployment.promotion);
        assert_eq!(rule("").unwrap(), PromotionRule::NotShownWorse);
        assert_eq!(
            load(BASE).unwrap().agents["a"].deployment.promotion,
            PromotionRule::NotShownWorse
        );
        assert_eq!(
            rule("promote_margin = 0.05").unwrap(),
            PromotionRule::WithinMargin {
                margin: 0.05,
                max_episodes: 80
            }
        );
        assert_eq!(
            rule("promote_margin = 0\ncanary_max_episodes = 20").unwrap(),
            PromotionRule::WithinMargin {
                margin: 0.0,
                max_episodes: 20
            }
        );
        // A canary is judged on the monitors' window of its episodes: it
        // cannot be asked for more.
        let e = load(&format!(
            "{BASE}[agents.a.deployment]\nchampion = \"v1\"\ncanary_episodes = 201"
        ))
        .unwrap_err();
        assert!(e.message.contains("monitors' window (200 episodes"), "{e}");
        let small = format!("{BASE}[agents.a.learn.monitor]\nwindow = 30\n");
        assert_eq!(load(&small).unwrap().agents["a"].deployment.canary_episodes, 30);
        for (bad, field, says) in [
            ("promote_margin = -0.1", "promote_margin", "0 or more"),
            ("promote_margin = nan", "promote_margin", "0 or more"),
            (
                "promote_margin = 0.1\ncanary_max_episodes = 19",
                "canary_max_episodes",
                "at least canary_episodes (20)",
            ),
            (
                "promote_margin = 0.1\ncanary_max_episodes = 201",
                "canary_max_episodes",
                "window (200",
            ),
            (
                "canary_max_episodes = 100",
                "canary_max_episodes",
                "only with promote_margin",
            ),
        ] {
            let e = rule(bad).unwrap_err();
            assert!(
                e.to_string().contains(&format!("agents.a.deployment.{field}")) && e.message.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_reward_says_its_range_how_long_users_may_take_and_what_silence_counts() {
        let spec =
            |reward: &str| load(&format!("{BASE}[agents.a.reward]\n{reward}")).map(|c| c.agents["a"].reward.clone());
        // Derived: accepted in [0, 1], a complaint in [-0.5, 0], and every
        // default penalty at once (invalid -1, empty -1, refusal -1, error -1).
        let derived = spec("signals = { accepted = 1.0, complained = -0.5 }").unwrap();
        assert_eq!(derived.range(), (-4.5, 1.0));
        assert_eq!(derived.wait_ms, crate::RewardSpec::WAIT_MS);
        assert!(derived.signals.iter().all(|s| !s.skip_when_silent));
        let declared = spec(
            "signals = { accepted = { weight = 1.0, no_signal = \"skip\" } }\nrange = [-1.5, 1.0]\nwait_seconds = 30",
        )
        .unwrap();
        assert_eq!(declared.range(), (-1.5, 1.0));
        assert_eq!(declared.wait_ms, 30_000);
        assert!(declared.signals[0].skip_when_silent);
        let valued = spec("signals = { accepted = { weight = 1.0, no_signal = 0.25 } }").unwrap();
        assert_eq!(
            (valued.signals[0].default, valued.signals[0].skip_when_silent),
            (0.25, false)
        );
        assert_eq!(
            valued.version(),
            spec("signals = { accepted = { weight = 1.0, default = 0.25 } }")
                .unwrap()
                .version(),
            "no_signal = VALUE is default = VALUE"
        );
        for (bad, field, says) in [
            ("range = [1.0, -1.0]", "range", "finite low < high"),
            ("wait_seconds = -1", "wait_seconds", "0 or more"),
            (
                "signals = { accepted = { weight = 1.0, no_signal = \"never\" } }",
                "signals.accepted.no_signal",
                "\"skip\" or a number",
            ),
            (
                "signals = { accepted = { weight = 1.0, default = 0.0, no_signal = \"skip\" } }",
                "signals.accepted.no_signal",
                "give one of them",
            ),
        ] {
            let e = spec(bad).unwrap_err();
            assert!(
                e.to_string().contains(&format!("agents.a.reward.{field}")) && e.message.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_sequential_promotion_lets_users_decide_within_a_cap_on_users_exposed() {
        use crate::PromotionRule;
        let rule = |extra: &str| {
            load(&format!(
                "{BASE}[agents.a.deployment]\nchampion = \"v1\"\ncanary_episodes = 20\n{extra}"
            ))
            .map(|c| c.agents["a"].deployment.promotion)
        };
        assert_eq!(
            rule("promotion = \"sequential\"").unwrap(),
            PromotionRule::Sequential {
                max_episodes: 80,
                least_gain: 0.0,
                max_share: PromotionRule::MAX_SHARE,
            }
        );
        assert_eq!(
            rule("promotion = \"sequential\"\ncanary_max_episodes = 60\nleast_gain = 0.05\ncanary_max_share = 0.4")
                .unwrap(),
            PromotionRule::Sequential {
                max_episodes: 60,
                least_gain: 0.05,
                max_share: 0.4,
            }
        );
        assert_eq!(
            rule("promotion = \"not_shown_worse\"").unwrap(),
            PromotionRule::NotShownWorse
        );
        for (bad, field, says) in [
            ("promotion = \"bandit\"", "promotion", "unknown promotion rule `bandit`"),
            (
                "promotion = \"sequential\"\nexpected_gain = 0.2",
                "expected_gain",
                "no longer read",
            ),
            ("least_gain = 0.1", "least_gain", "only with promotion = \"sequential\""),
            (
                "promotion = \"sequential\"\nleast_gain = -0.1",
                "least_gain",
                "0 or more",
            ),
            (
                "promotion = \"sequential\"\ncanary_max_share = 0.05",
                "canary_max_share",
                "at least canary_share",
            ),
            (
                "promotion = \"sequential\"\npromote_margin = 0.1",
                "promote_margin",
                "must be shown better",
            ),
            (
                "promotion = \"sequential\"\ncanary_max_episodes = 10",
                "canary_max_episodes",
                "at least canary_episodes (20)",
            ),
        ] {
            let e = rule(bad).unwrap_err();
            assert!(
                e.to_string().contains(&format!("agents.a.deployment.{field}")) && e.message.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_reward_model_learns_from_the_signals_the_spec_weighs_and_leaves_its_version_alone() {
        use crate::RewardModelSpec;
        let reward = |table: &str| {
            load(&format!(
                "{BASE}[agents.a.reward]\nsignals = {{ liked = 1.0 }}\n{table}"
            ))
            .map(|c| c.agents["a"].reward.clone())
        };
        let plain = reward("").unwrap();
        assert_eq!(plain.model, None);
        let with = reward("[agents.a.reward.model]\n").unwrap();
        assert_eq!(with.model, Some(RewardModelSpec::default()));
        // Rewards stored under the spec stay valid: the model changes none.
        assert_eq!(with.version(), plain.version());
        let tuned =
            reward("[agents.a.reward.model]\nmin_episodes = 100\nmin_auc = 0.8\nheld_out = 0.3\nwindow = 500\n")
                .unwrap()
                .model
                .unwrap();
        assert_eq!(
            (tuned.min_episodes, tuned.min_auc, tuned.held_out, tuned.window),
            (100, 0.8, 0.3, 500)
        );
        for (bad, field, says) in [
            ("min_auc = 0.4", "min_auc", "between 0.5 (chance) and 1"),
            ("held_out = 1.0", "held_out", "between 0 and 1"),
            ("min_episodes = 3", "min_episodes", "at least 8"),
            ("min_episodes = 50\nwindow = 20", "window", "at least min_episodes (50)"),
            ("epochs = 3", "epochs", "unknown field"),
        ] {
            let e = reward(&format!("[agents.a.reward.model]\n{bad}\n")).unwrap_err();
            assert!(
                e.to_string().contains(field) && e.to_string().contains(says),
                "{bad}: {e}"
            );
        }
        let e = reward("[agents.a.reward.model]\nrubrics = [\"Is it right?\"]\n").unwrap_err();
        assert!(
            e.to_string().contains("rubrics") && e.message.contains("has none"),
            "{e}"
        );
        let judged = reward(
            "[agents.a.reward.judge]\nmode = \"absolute\"\nprovider = \"up\"\nmodel = \"j\"\n\
             [agents.a.reward.model]\nrubrics = [\"Is it right?\", \"Is it brief?\"]\njudge_calls = 50\n",
        )
        .unwrap()
        .model
        .unwrap();
        assert_eq!((judged.rubrics.len(), judged.judge_calls), (2, 50));
        for (bad, field) in [("rubrics = [\" \"]", "rubrics"), ("judge_calls = 0", "judge_calls")] {
            let e = reward(&format!(
                "[agents.a.reward.judge]\nmode = \"absolute\"\nprovider = \"up\"\nmodel = \"j\"\n[agents.a.reward.model]\n{bad}\n"
            ))
            .unwrap_err();
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
        let e = load(&format!("{BASE}[agents.a.reward.model]\n")).unwrap_err();
        assert!(
            e.to_string().contains("agents.a.reward.model") && e.message.contains("weighs none"),
            "{e}"
        );
    }

    #[test]
    fn a_clear_gain_at_the_gate_starts_its_canary_on_a_larger_share() {
        use crate::CanaryShare;
        let deployment = |extra: &str| {
            load(&format!(
                "{BASE}[agents.a.deployment]\nchampion = \"v1\"\ncanary_share = 0.2\n{extra}"
            ))
            .map(|c| c.agents["a"].deployment.clone())
        };
        let plain = deployment("").unwrap();
        assert_eq!(plain.clear_gain, None);
        for low in [None, Some(0.0), Some(0.9)] {
            assert_eq!(
                plain.canary_share_for(low),
                CanaryShare {
                    share: 0.2,
                    reason: None
                }
            );
        }
        let clear = deployment("clear_gain = { above = 0.1, share = 0.5 }").unwrap();
        // Not gated (approved by hand) or a gain whose interval starts below
        // 0.1: the configured share.
        for low in [None, Some(-0.2), Some(0.099)] {
            assert_eq!(clear.canary_share_for(low).share, 0.2, "{low:?}");
        }
        for low in [0.1, 0.45] {
            let share = clear.canary_share_for(Some(low));
            assert_eq!(share.share, 0.5);
            let why = share.reason.unwrap();
            assert!(why.contains(&format!("{low:+.3}")) && why.contains("≥ 0.1"), "{why}");
        }
        assert!(deployment("clear_gain = { above = 0.0, share = 0.2 }").is_ok());
        for (bad, field, says) in [
            (
                "clear_gain = { above = -0.1, share = 0.5 }",
                "agents.a.deployment.clear_gain.above",
                "0 or more",
            ),
            (
                "clear_gain = { above = nan, share = 0.5 }",
                "agents.a.deployment.clear_gain.above",
                "0 or more",
            ),
            (
                "clear_gain = { above = 0.1, share = 0.1 }",
                "agents.a.deployment.clear_gain.share",
                "at least canary_share (0.2)",
            ),
            (
                "clear_gain = { above = 0.1, share = 1.0 }",
                "agents.a.deployment.clear_gain.share",
                "below 1",
            ),
            // Parse errors point at the line.
            (
                "clear_gain = { above = 0.1 }",
                "clear_gain = {",
                "missing field `share`",
            ),
            (
                "clear_gain = { above = 0.1, share = 0.5, when = 1 }",
                "clear_gain = {",
                "unknown field `when`",
            ),
        ] {
            let e = deployment(bad).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn artefacts_are_addressed_by_url_and_their_keys_never_print() {
        let text = format!(
            "[artefacts]\nurl = \"s3://bucket/hone/\"\nendpoint = \"http://127.0.0.1:9000\"\nallow_http = true\naccess_key_id = \"${{KEY_ID}}\"\nsecret_access_key = \"${{SECRET}}\"\n{BASE}"
        );
        let env = |name: &str| match name {
            "KEY_ID" => Some("AKIAEXAMPLE".to_owned()),
            "SECRET" => Some("s3cret-key".to_owned()),
            _ => None,
        };
        let c = load_str(&text, Path::new("."), &env).unwrap();
        assert_eq!(c.artefacts.url.as_deref(), Some("s3://bucket/hone"));
        assert_eq!(c.artefacts.secret_access_key.as_deref(), Some("s3cret-key"));
        assert_eq!(c.artefacts.cache_dir, Path::new("./hone-data/models"));
        let shown = format!("{:?}", c.artefacts);
        assert!(!shown.contains("s3cret") && !shown.contains("AKIA"), "{shown}");
        assert_eq!(load(BASE).unwrap().artefacts.url, None);
        for (bad, says) in [
            ("url = \"gs://bucket\"", "s3://bucket/prefix"),
            ("url = \"file://relative/dir\"", "absolute path"),
            ("url = \"s3://\"", "names no bucket"),
            ("endpoint = \"127.0.0.1:9000\"", "http://"),
        ] {
            let e = load(&format!("[artefacts]\n{bad}\n{BASE}")).unwrap_err();
            assert!(
                e.to_string().contains("artefacts.") && e.message.contains(says),
                "{bad}: {e}"
            );
        }
        let routes = |model: &str, adapter: &str| {
            format!("[agents.l.versions.v1]\nprovider = {{ type = \"local\", model = \"{model}\", adapter = \"{adapter}\" }}\n{BASE}")
        };
        assert!(load(&routes("s3://models/qwen", "s3://adapters/a1")).is_ok());
        let e = load(&routes("/m", "..")).unwrap_err();
        assert!(e.message.contains("not starting with `.`"), "{e}");
        let e = load(&routes("s3:///x", "a1")).unwrap_err();
        assert!(e.message.contains("names no bucket"), "{e}");
    }

    #[test]
    fn a_versions_knn_lm_memory_is_checked_and_filled_with_defaults() {
        let hash = "ab".repeat(32);
        let version = |memory: &str| {
            format!(
                "[agents.m.versions.v1]\nprovider = {{ type = \"local\", model = \"/m\" }}\nmemory = {memory}\n{BASE}"
            )
        };
        let c = load(&version(&format!("{{ type = \"knn-lm\", datastore = \"{hash}\" }}"))).unwrap();
        let memory = c.agents["m"].versions["v1"].spec.routes[0].memory.clone().unwrap();
        assert_eq!(
            (memory.k, memory.lambda, memory.temperature, memory.adaptive),
            (16, 0.25, 1.0, false)
        );
        assert_eq!(memory.datastore, hash);
        for (bad, key, says) in [
            (
                format!("{{ type = \"rag\", datastore = \"{hash}\" }}"),
                "memory.type",
                "knn-lm",
            ),
            (
                "{ type = \"knn-lm\", datastore = \"latest\" }".to_owned(),
                "memory.datastore",
                "64 hex",
            ),
            (
                format!("{{ type = \"knn-lm\", datastore = \"{hash}\", lambda = 1.5 }}"),
                "memory.lambda",
                "between 0 and 1",
            ),
            (
                format!("{{ type = \"knn-lm\", datastore = \"{hash}\", k = 0 }}"),
                "memory.k",
                "at least 1",
            ),
            (
                format!("{{ type = \"knn-lm\", datastore = \"{hash}\", temperature = 0.0 }}"),
                "memory.temperature",
                "above 0",
            ),
        ] {
            let e = load(&version(&bad)).unwrap_err();
            assert!(e.to_string().contains(key) && e.message.contains(says), "{bad}: {e}");
        }
        let remote = format!("{BASE}memory = {{ type = \"knn-lm\", datastore = \"{hash}\" }}\n");
        let e = load(&remote).unwrap_err();
        assert!(e.message.contains("embedded engine"), "{e}");
    }

    #[test]
    fn a_typo_names_the_key() {
        let e = load(&format!("{BASE}tempreature = 0.3\n")).unwrap_err();
        assert!(e.message.contains("tempreature"), "{e}");
        let e = load(&format!("{BASE}[providers.x]\ntype = \"grpc\"\n")).unwrap_err();
        assert!(e.message.contains("grpc"), "{e}");
    }

    #[test]
    fn cross_field_errors_name_the_field() {
        let e = load(&BASE.replace("provider = \"up\"", "provider = \"nope\"")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.versions.v1.provider"));
        let e = load(&format!("{BASE}[agents.a.deployment]\nchampion = \"v9\"\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment.champion"));
        let two = format!("{BASE}[agents.a.versions.v2]\nprovider = \"up\"\nmodel = \"m2\"\n");
        let e = load(&format!(
            "{two}[agents.a.deployment]\nchampion = \"v1\"\ncanaries = {{ v2 = 1.5 }}\n"
        ))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment.canaries.v2"));
        let e = load(&two).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment"));
        let e = load(&BASE.replace("http://127.0.0.1:9/v1", "${UPSTREAM}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("providers.up.base_url"));
        assert!(e.message.contains("UPSTREAM"));
    }

    #[test]
    fn a_version_enforces_only_settings_it_sets() {
        let c = load(&format!("{BASE}temperature = 0.2\nenforce = [\"temperature\"]\n")).unwrap();
        let v = &c.agents["a"].versions["v1"];
        assert!(v.spec.enforces(hone_types::Setting::Temperature));
        assert_ne!(
            v.id,
            load(&format!("{BASE}temperature = 0.2\n")).unwrap().agents["a"].versions["v1"].id,
            "enforcing is part of the version"
        );
        let e = load(&format!("{BASE}enforce = [\"top_p\"]\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.versions.v1.enforce[0]"));
        assert!(e.message.contains("does not set it"), "{e}");
        let e = load(&format!("{BASE}max_tokens = 9\nenforce = [\"max_tokens\"]\n")).unwrap_err();
        assert!(e.message.contains("cannot be enforced"), "{e}");
    }

    #[test]
    fn a_changed_version_gets_a_new_id() {
        let a = load(BASE).unwrap();
        let b = load(&format!("{BASE}temperature = 0.2\n")).unwrap();
        let c = load(BASE).unwrap();
        assert_ne!(a.agents["a"].versions["v1"].id, b.agents["a"].versions["v1"].id);
        assert_eq!(a.agents["a"].versions["v1"].id, c.agents["a"].versions["v1"].id);
    }

    #[test]
    fn an_inline_local_provider_names_a_model_directory_and_an_adapter() {
        let text = r#"
[agents.a.versions.v1]
provider = { type = "local", model = "/models/qwen", adapter = "v2" }
"#;
        let c = load(text).unwrap();
        let route = &c.agents["a"].versions["v1"].spec.routes[0];
        assert_eq!(
            (route.provider.as_str(), route.model.as_str(), route.adapter.as_deref()),
            ("local", "/models/qwen", Some("v2"))
        );
        let local = c.providers["local"].local.as_ref().unwrap();
        assert_eq!((local.dtype, local.max_batch), (LocalDType::F32, 16));

        assert_eq!(local.max_adapters, None, "the engine's default");

        let declared =
            format!("[providers.local]\ntype = \"local\"\ndtype = \"bf16\"\nmax_batch = 4\nmax_adapters = 8\n{text}");
        let c = load(&declared).unwrap();
        let local = c.providers["local"].local.as_ref().unwrap();
        assert_eq!((local.dtype, local.max_adapters), (LocalDType::Bf16, Some(8)));

        let bad = load(&declared.replace("bf16", "int3")).unwrap_err();
        assert_eq!(bad.field.as_deref(), Some("providers.local.dtype"));
        let remote = load(&text.replace("\"local\", model", "\"openai\", model")).unwrap_err();
        assert_eq!(remote.field.as_deref(), Some("agents.a.versions.v1.provider.type"));
        let clash = format!("[providers.local]\ntype = \"openai\"\nbase_url = \"http://x\"\n{text}");
        assert!(load(&clash).unwrap_err().message.contains("another type"));
    }

    #[test]
    fn the_adapters_dir_is_resolved_at_load_and_follows_a_moved_data_dir() {
        let text = "[gateway]\ndata_dir = \"/d\"\n[providers.gpu]\ntype = \"local\"\n[providers.pinned]\ntype = \"local\"\nadapters_dir = \"/pinned\"\n";
        let mut c = load(&format!("{text}{BASE}")).unwrap();
        assert_eq!(
            c.providers["gpu"].local.as_ref().unwrap().adapters_dir,
            PathBuf::from("/d/adapters")
        );
        assert_eq!(c.adapters_dir("gpu"), PathBuf::from("/d/adapters"));
        assert_eq!(c.adapters_dir("pinned"), PathBuf::from("/pinned"));
        // A remote server (vLLM) loads adapters the trainer wrote under the data dir.
        assert_eq!(c.adapters_dir("up"), PathBuf::from("/d/adapters"));
        assert_eq!(c.adapters_dir("unknown"), PathBuf::from("/d/adapters"));

        c.set_data_dir(PathBuf::from("/e"));
        assert_eq!(c.adapters_dir("gpu"), PathBuf::from("/e/adapters"));
        assert_eq!(c.adapters_dir("pinned"), PathBuf::from("/pinned"));
        assert_eq!(c.adapters_dir("up"), PathBuf::from("/e/adapters"));
        assert_eq!(c.store.sqlite_path(), Some(Path::new("/e/hone.db")));

        let inline = load(
            "[gateway]\ndata_dir = \"/d\"\n[agents.a.versions.v1]\nprovider = { type = \"local\", model = \"/m\" }\n",
        )
        .unwrap();
        assert_eq!(inline.adapters_dir("local"), PathBuf::from("/d/adapters"));
    }

    #[test]
    fn adapters_need_a_local_provider_and_the_adapter_changes_the_version_id() {
        let e = load(&format!("{BASE}adapter = \"v2\"\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.versions.v1.adapter"));
        let named = "[providers.gpu]\ntype = \"local\"\n[agents.a.versions.v1]\nprovider = \"gpu\"\nmodel = \"/m\"\n";
        let base = load(named).unwrap();
        let tuned = load(&format!("{named}adapter = \"v2\"\n")).unwrap();
        assert_ne!(base.agents["a"].versions["v1"].id, tuned.agents["a"].versions["v1"].id);
        let missing_model =
            load("[providers.gpu]\ntype = \"local\"\n[agents.a.versions.v1]\nprovider = \"gpu\"\n").unwrap_err();
        assert_eq!(missing_model.field.as_deref(), Some("agents.a.versions.v1.model"));
    }

    #[test]
    fn the_gate_refuses_a_bound_it_would_not_apply_and_the_monitor_takes_it() {
        for metric in ["reward", "cost", "latency"] {
            let e = load(&format!("{BASE}[agents.a.learn.gate]\nbounds = {{ {metric} = 0.2 }}\n")).unwrap_err();
            assert!(e.message.contains("monitor.bounds"), "{e}");
            assert!(e.to_string().contains(&format!("gate.bounds.{metric}")), "{e}");
            let c = load(&format!(
                "{BASE}[agents.a.learn.monitor]\nbounds = {{ {metric} = 0.2 }}\n"
            ))
            .unwrap();
            assert!(c.agents["a"].learn.monitor.bounds.contains_key(metric));
        }
        let c = load(&format!("{BASE}[agents.a.learn.gate]\nbounds = {{ tool_use = 0.2 }}\n")).unwrap();
        let gate = &c.agents["a"].learn.gate.bounds;
        assert!(gate.contains_key("tool_use") && gate.contains_key("invalid_tool_call"));
        assert!(!gate.contains_key("latency") && !gate.contains_key("cost") && !gate.contains_key("reward"));
        let monitor = &c.agents["a"].learn.monitor.bounds;
        assert!(monitor.contains_key("latency") && monitor.contains_key("reward"));
    }

    #[test]
    fn a_wrong_type_in_a_provider_names_its_key_and_localhost_is_a_listen_address() {
        let e = load(
            "[providers.up]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\ntimeout_ms = \"2 minutes\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("timeout_ms") && e.contains("invalid type"), "{e}");
        let e = load("[providers.up]\ntype = \"openia\"\nbase_url = \"http://127.0.0.1:9/v1\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown type `openia`"), "{e}");
        let e = load("[providers.up]\ntype = \"openai\"\nbase_url = \"http://x/v1\"\ntimeout = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `timeout`"), "{e}");
        let c = load("[gateway]\nlisten = \"localhost:7171\"\n").unwrap();
        assert_eq!(c.gateway.listen.to_string(), "127.0.0.1:7171");
        let e = load("[gateway]\nlisten = \"my-host:7171\"\n").unwrap_err().to_string();
        assert!(e.contains("localhost:7070"), "{e}");
    }

    #[test]
    fn hosted_fine_tuning_parses_its_tables_and_refuses_what_does_not_fit() {
        let c = load(&format!(
            "{BASE}[agents.a.learn]\noptimisers = [\"openai-sft\", \"openai-dpo\"]\nallow_upload = true\n\
             [agents.a.learn.upload]\nrequire_signals = [\"thumbs_up\"]\nexclude_flags = [\"refusal\"]\n\
             redact = [\"email\", \"(?i)order #\\\\d+\"]\n\
             [agents.a.learn.openai-sft]\nn_epochs = 2\nusd_per_mtok = 3.0\nbudget = {{ usd = 2.0 }}\n\
             [agents.a.learn.openai-dpo]\nbeta = 0.1\ngroup_size = 3\n"
        ))
        .unwrap();
        let learn = &c.agents["a"].learn;
        assert!(learn.upload.allowed);
        assert_eq!(learn.upload.redact, ["email", "(?i)order #\\d+"]);
        let names: Vec<&str> = learn.optimisers.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["openai-sft", "openai-dpo"]);
        let crate::OptimiserSpec::FineTune(sft) = &learn.optimisers[0] else {
            panic!()
        };
        assert_eq!(
            (sft.n_epochs, sft.usd_per_mtok, sft.budget.usd),
            (Some(2), Some(3.0), 2.0)
        );
        assert_eq!(sft.min_examples, 10, "OpenAI's own minimum");
        let crate::OptimiserSpec::FineTune(dpo) = &learn.optimisers[1] else {
            panic!()
        };
        assert_eq!((dpo.beta, dpo.group_size), (Some(0.1), 3));
        assert!(
            !load(&format!("{BASE}[agents.a.learn]\noptimisers = [\"openai-sft\"]\n"))
                .unwrap()
                .agents["a"]
                .learn
                .upload
                .allowed
        );

        for (table, field, says) in [
            (
                "[agents.a.learn.openai-sft]\nbeta = 0.1",
                "openai-sft.beta",
                "only `openai-dpo`",
            ),
            (
                "[agents.a.learn.openai-sft]\nn_epochs = 0",
                "openai-sft.n_epochs",
                "≥ 1",
            ),
            (
                "[agents.a.learn.openai-sft]\nvalidation_share = 0.95",
                "validation_share",
                "< 0.9",
            ),
            ("[agents.a.learn.openai-sft]\nepochs = 2", "epochs", "unknown field"),
            (
                "[agents.a.learn.upload]\nredact = [\"(unclosed\"]",
                "upload.redact",
                "neither a detector",
            ),
            (
                "[agents.a.learn.upload]\nexclude_flags = [\"rude\"]",
                "upload.exclude_flags",
                "unknown behaviour",
            ),
        ] {
            let e = load(&format!(
                "{BASE}[agents.a.learn]\noptimisers = [\"openai-sft\"]\n{table}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains(field) && e.contains(says), "{table}: {e}");
        }
    }

    #[test]
    fn a_trl_trainer_parses_and_refuses_what_trl_cannot_do() {
        let c = load(&format!(
            "{BASE}[agents.a.learn]\noptimisers = [\"sft\", \"dpo\"]\n[agents.a.learn.trainer]\ntype = \"trl\"\n\
             python = \"/venv/bin/python\"\nnum_processes = 4\ndevice = \"cuda\"\n\
             args = {{ gradient_checkpointing = true, bf16 = true }}\n"
        ))
        .unwrap();
        let learn = &c.agents["a"].learn;
        let crate::TrainerSpec::Trl(trl) = &learn.trainer else {
            panic!("{:?}", learn.trainer)
        };
        assert_eq!(
            (trl.python.as_str(), trl.num_processes, trl.device.as_str()),
            ("/venv/bin/python", 4, "cuda")
        );
        assert_eq!(trl.args["bf16"], serde_json::json!(true));
        // Relative paths start from the config file's directory.
        let relative = crate::load_str(
            &format!(
                "{BASE}[agents.a.learn]\noptimisers = [\"sft\"]\n[agents.a.learn.trainer]\ntype = \"trl\"\n\
                 python = \".venv/bin/python\"\naccelerate_config = \"fsdp.yaml\"\n"
            ),
            std::path::Path::new("/etc/hone"),
            &|_| None,
        )
        .unwrap();
        let crate::TrainerSpec::Trl(anchored) = &relative.agents["a"].learn.trainer else {
            panic!()
        };
        assert_eq!(anchored.python, "/etc/hone/.venv/bin/python");
        assert_eq!(
            anchored.accelerate_config.as_deref(),
            Some(std::path::Path::new("/etc/hone/fsdp.yaml"))
        );
        assert_eq!(learn.replay.share, 0.0, "replay is hone's own trainer's");
        let default = load(&format!("{BASE}[agents.a.learn]\noptimisers = [\"sft\"]\n")).unwrap();
        assert_eq!(default.agents["a"].learn.trainer, crate::TrainerSpec::Hone);
        let grpo =
            "[agents.a.learn]\noptimisers = [\"grpo\", \"dpo\", \"sft\"]\n[agents.a.learn.trainer]\ntype = \"trl\"\n";
        let all = load(&format!("{BASE}{grpo}")).unwrap();
        assert_eq!(
            all.agents["a"].learn.optimisers.len(),
            3,
            "TRL trains every weight optimiser"
        );

        for (table, key, says) in [
            (
                "[agents.a.learn.trainer]\ntype = \"trl\"\n[agents.a.learn.replay]\nshare = 0.2",
                "replay.share",
                "leave them out",
            ),
            (
                "[agents.a.learn.trainer]\ntype = \"trl\"\n[agents.a.learn.replay]\newc = 1.0",
                "replay.ewc",
                "leave them out",
            ),
            (
                "[agents.a.learn.trainer]\ntype = \"deepspeed\"",
                "trainer.type",
                "not a trainer (hone, trl)",
            ),
            (
                "[agents.a.learn.trainer]\npython = \"python3\"",
                "trainer.python",
                "`type = \"trl\"` only",
            ),
            (
                "[agents.a.learn.trainer]\ntype = \"trl\"\nnum_processes = 0",
                "trainer.num_processes",
                "at least 1",
            ),
            (
                "[agents.a.learn.trainer]\ntype = \"trl\"\ndevice = \"tpu\"",
                "trainer.device",
                "not `cpu` or `cuda`",
            ),
        ] {
            let e = load(&format!("{BASE}[agents.a.learn]\n{table}\n")).unwrap_err();
            assert!(e.to_string().contains(&format!("agents.a.learn.{key}")), "{table}: {e}");
            assert!(e.message.contains(says), "{table}: {e}");
        }
    }

    #[test]
    fn a_monitor_window_or_minimum_of_zero_is_refused_not_raised() {
        for key in ["window", "min_episodes"] {
            let e = load(&format!("{BASE}[agents.a.learn.monitor]\n{key} = 0\n")).unwrap_err();
            assert!(e.to_string().contains(&format!("agents.a.learn.monitor.{key}")), "{e}");
            assert!(e.message.contains("at least 1"), "{e}");
        }
        let c = load(&format!(
            "{BASE}[agents.a.learn.monitor]\nwindow = 1\nmin_episodes = 1\n"
        ))
        .unwrap();
        let monitor = &c.agents["a"].learn.monitor;
        assert_eq!((monitor.window, monitor.min_episodes), (1, 1));
    }

    #[test]
    fn the_live_learning_tables_parse_and_refuse_bad_values() {
        let c = load(&format!(
            "{BASE}[agents.a.learn]\noptimisers = [\"grpo\"]\n[agents.a.learn.grpo]\ngroups = [\"production\", \"shadow\"]\n\
             max_staleness = 1\n[agents.a.learn.shadow]\nshare = 0.2\nn = 2\n[agents.a.learn.replay]\nsize = 10\nshare = 0.5\n\
             [agents.a.learn.drift]\nmin_divergence = 0.1\n"
        ))
        .unwrap();
        let learn = &c.agents["a"].learn;
        let crate::OptimiserSpec::Grpo(grpo) = &learn.optimisers[0] else {
            panic!("{:?}", learn.optimisers)
        };
        assert_eq!(
            grpo.groups,
            vec![crate::GroupSource::Production, crate::GroupSource::Shadow]
        );
        assert_eq!(grpo.max_staleness, 1);
        assert_eq!(learn.shadow, Some(crate::ShadowSpec { share: 0.2, n: 2 }));
        assert_eq!((learn.replay.size, learn.replay.share), (10, 0.5));
        assert_eq!(learn.drift.min_divergence, 0.1);
        // Defaults: rollouts only, replay on, drift checked, no shadow sampling.
        let d = load(&format!("{BASE}[agents.a.learn]\noptimisers = [\"grpo\"]\n")).unwrap();
        let crate::OptimiserSpec::Grpo(grpo) = &d.agents["a"].learn.optimisers[0] else {
            panic!()
        };
        assert_eq!(grpo.groups, vec![crate::GroupSource::Rollouts]);
        assert_eq!(d.agents["a"].learn.shadow, None);
        for (table, field) in [
            (
                "[agents.a.learn.grpo]\ngroups = \"everything\"\n",
                "agents.a.learn.grpo.groups",
            ),
            ("[agents.a.learn.shadow]\nshare = 0\n", "agents.a.learn.shadow.share"),
            ("[agents.a.learn.shadow]\nn = 0\n", "agents.a.learn.shadow.n"),
            ("[agents.a.learn.replay]\nshare = 0.95\n", "agents.a.learn.replay.share"),
            ("[agents.a.learn.drift]\nalpha = 1.5\n", "agents.a.learn.drift.alpha"),
        ] {
            let e = load(&format!("{BASE}[agents.a.learn]\noptimisers = [\"grpo\"]\n{table}")).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{e}");
        }
        let e = load(&format!(
            "{BASE}[agents.a.learn]\noptimisers = [\"sft\"]\n[agents.a.learn.sft]\ngroups = \"shadow\"\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("GRPO settings"), "{e}");
    }

    #[test]
    fn optimisers_take_turns_when_fewer_than_all_propose_in_a_cycle() {
        let names =
            |learn: &crate::LearnSpec, cycle: u64| -> Vec<&str> { learn.turn(cycle).map(|o| o.name()).collect() };
        let with = |per_cycle: &str| {
            load(&format!(
                "{BASE}[agents.a.learn]\noptimisers = [\"sft\", \"grpo\", \"dpo\"]\n{per_cycle}"
            ))
        };
        // By default every optimiser runs, in the listed order, every cycle.
        let all = with("").unwrap().agents["a"].learn.clone();
        for cycle in 1..=4 {
            assert_eq!(names(&all, cycle), ["sft", "grpo", "dpo"]);
        }
        // One a cycle: each cycle starts with the next one, and lists the
        // rest after it for when it has nothing to propose.
        let one = with("optimisers_per_cycle = 1\n").unwrap().agents["a"].learn.clone();
        assert_eq!(names(&one, 1), ["sft", "grpo", "dpo"]);
        assert_eq!(names(&one, 2), ["grpo", "dpo", "sft"]);
        assert_eq!(names(&one, 3), ["dpo", "sft", "grpo"]);
        assert_eq!(names(&one, 4), ["sft", "grpo", "dpo"]);
        // Two a cycle: the next cycle starts where this one stopped.
        let two = with("optimisers_per_cycle = 2\n").unwrap().agents["a"].learn.clone();
        assert_eq!(names(&two, 1)[0], "sft");
        assert_eq!(names(&two, 2)[0], "dpo");
        assert_eq!(names(&two, 3)[0], "grpo");
        let e = with("optimisers_per_cycle = 0\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.learn.optimisers_per_cycle"), "{e}");
    }
}
