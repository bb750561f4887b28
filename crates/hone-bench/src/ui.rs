//! `hone bench ui`: how long the dashboard's pages take on a large store.
//! The store is filled with synthetic traffic (as `hone bench dataset`
//! does) first to `--baseline` calls and then to `--calls`; at each size
//! the overview, the agent page and the episode list (first page, and the
//! page behind a filter) are served by the real `/ui` routes on loopback
//! and timed, median of `--reps`; the traffic's versions are the agent's
//! deployment and every episode has a reward, so the pages read real rows.
//! The report prints both sizes and their ratio: a page that reads only
//! what it shows stays near 1×.

use anyhow::{Context, Result};
use hone_store::SqliteStore;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Options {
    pub calls: u64,
    pub baseline: u64,
    pub reps: usize,
    pub dir: PathBuf,
    /// Where to write the result file (the command, commit, date,
    /// machine and every table), if anywhere.
    pub out: Option<std::path::PathBuf>,
}

/// The agent the synthetic traffic belongs to, with the versions it uses.
const CONFIG: &str = r#"
[providers.up]
type = "openai"
base_url = "http://127.0.0.1:9/v1"
[agents.support.versions.v1]
provider = "up"
model = "m"
"#;

/// Makes the synthetic traffic the agent's own: its three versions become
/// the deployment (champion, canary, the previous champion), so the agent
/// page charts them, and every episode gets a reward under the agent's
/// spec, so the overview's summary and the charts read real rows.
fn make_it_the_agents(store: &SqliteStore, config: &hone_config::Config, calls: u64) -> Result<()> {
    use hone_store::{CycleStore, LearnStore};
    let agent = config
        .agents
        .get("support")
        .context("the bench config has agent `support`")?;
    let version = |id: &str| hone_types::VersionId::parse(id).context("version id");
    let deployment = hone_types::Deployment {
        agent: "support".into(),
        champion: version("aaaaaaaaaaaaaaaa")?,
        canary: Some(version("bbbbbbbbbbbbbbbb")?),
        canary_share: 0.1,
        canary_since: Some(1_700_000_000_000),
        previous: vec![version("cccccccccccccccc")?],
        revision: 1,
        source: "bench".into(),
        updated_at: 1_700_000_000_000,
    };
    let current = store.deployment("support")?.map(|d| d.revision);
    let mut next = deployment;
    next.revision = current.map_or(1, |r| r + 1);
    store.change_deployment(&next, current, &[], &[], None, 1_700_000_000_000)?;
    // The episodes `fill` made: a new one whenever the last holds more calls than its number mod 3.
    let (mut episodes, mut in_episode) = (0u64, 0u64);
    for _ in 0..calls {
        if in_episode > episodes % 3 {
            episodes += 1;
            in_episode = 0;
        }
        in_episode += 1;
    }
    let spec = agent.reward.version();
    let mut batch = Vec::with_capacity(10_000);
    for e in 0..=episodes {
        let value = ((e * 7919) % 100) as f64 / 100.0;
        batch.push(hone_types::RewardRecord {
            episode_id: hone_types::EpisodeId::parse(&format!("ep-{e:09}")).context("episode id")?,
            agent: "support".into(),
            spec_version: spec.clone(),
            value,
            passed: value >= 0.5,
            components: Vec::new(),
            calls: Vec::new(),
            failures: Vec::new(),
            computed_at: 1_700_000_000_000,
            signals_seen: 0,
            shadows: Vec::new(),
        });
        if batch.len() == batch.capacity() {
            store.put_rewards(&batch)?;
            batch.clear();
        }
    }
    store.put_rewards(&batch)?;
    Ok(())
}

const PAGES: [(&str, &str); 4] = [
    ("overview", "/ui"),
    ("agent", "/ui/agents/support"),
    ("episodes", "/ui/episodes?agent=support"),
    ("episodes, flagged", "/ui/episodes?agent=support&flag=refusal"),
];

async fn time_pages(base: &str, reps: usize) -> Result<Vec<f64>> {
    let http = reqwest::Client::new();
    let mut medians = Vec::new();
    for (name, path) in PAGES {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let started = Instant::now();
            let response = http.get(format!("{base}{path}")).send().await?;
            let status = response.status();
            let body = response.text().await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(status.is_success(), "{name} ({path}) answered {status}: {body}");
        }
        times.sort_by(f64::total_cmp);
        medians.push(times[times.len() / 2]);
    }
    Ok(medians)
}

pub fn run(o: Options) -> Result<ExitCode> {
    anyhow::ensure!(o.baseline < o.calls, "--baseline must be smaller than --calls");
    std::fs::create_dir_all(&o.dir)?;
    let path = o.dir.join("hone.db");
    let config = Arc::new(hone_config::load_str(CONFIG, &o.dir, &|_| None).map_err(|e| anyhow::anyhow!("{e}"))?);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut rows = Vec::new();
    for calls in [o.baseline, o.calls] {
        {
            let store = SqliteStore::open(&path, false)?;
            hone_console::note(format_args!("filling {} to {calls} calls …", path.display()));
            crate::dataset::fill(&store, calls)?;
            hone_console::note(format_args!(
                "rewards for every episode, and the traffic's versions deployed …"
            ));
            make_it_the_agents(&store, &config, calls)?;
        }
        let store = SqliteStore::open_with(&path, false, SqliteStore::PATIENT)?;
        let gateway = hone_learn::client::GatewayClient::new("http://127.0.0.1:9", None, Duration::from_secs(5))?;
        let auth = Arc::new(hone_gateway::auth::Auth::from_config(&config));
        let app = hone_ui::router(hone_ui::Ui::new(config.clone(), Arc::new(store), gateway, auth));
        let medians = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let base = format!("http://{}", listener.local_addr()?);
            let mut server = tokio::task::JoinSet::new();
            server.spawn(async move { axum::serve(listener, app).await });
            let medians = time_pages(&base, o.reps).await;
            server.abort_all();
            medians
        })?;
        rows.push((calls, medians));
    }
    let mut out = crate::report::Report::new(o.out.clone());
    writeln!(
        out,
        "dashboard page time (ms, median of {} requests on loopback; the store on {})",
        o.reps,
        path.display()
    )?;
    writeln!(out, "| page | {} calls | {} calls | ratio |", rows[0].0, rows[1].0)?;
    writeln!(out, "|---|---|---|---|")?;
    for (i, (name, _)) in PAGES.iter().enumerate() {
        let (small, large) = (rows[0].1[i], rows[1].1[i]);
        writeln!(out, "| {name} | {small:.1} | {large:.1} | {:.2}× |", large / small)?;
    }
    writeln!(out, "target: < 200 ms each at 1,000,000 calls").context("stdout")?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
