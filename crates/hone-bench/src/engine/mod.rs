//! `hone bench engine`: the embedded engine's prefill and decode throughput
//! at batch 1 and 8, on the tiny preset and on a random model with the exact
//! Qwen2.5-0.5B shape, next to Hugging Face transformers on the same device
//! (the CPU, or a GPU with `--device cuda`), the same weights, dtype and
//! settings (`python/engine_hf.py`, run with `--python`). Then the prefix cache: requests that share the prompt,
//! served through the whole engine with it off and on in the same run; and
//! the same requests with each decode step in one part and in one part per
//! core (`EngineOptions::decode_parts`).
//! Every throughput is also set against the machine's limit measured in
//! the same run ([`crate::roofline`]): decode against memory bandwidth,
//! prefill against the matmul peak. `--runs N` repeats hone's and
//! transformers' measurement side by side ([`crate::side_by_side`]) and
//! prints each figure's median with its range, the ratio of each run's
//! pair with theirs.
//! Prints tables with the ratios; not a test.

mod measure;

use crate::roofline::{Limits, Product};
use crate::side_by_side::{side_by_side, Side};
use crate::support::{random_checkpoint, run_json, Spread};
use anyhow::Result;
use candle_core::DType;
use hone_engine::Model;
use measure::{
    measure, measure_decode_parts, measure_memory, measure_prefix_cache, BenchSettings, EngineLoad, Figures,
};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::str::FromStr;

/// Requests in the prefix-cache measurement, and each one's own prompt tokens.
const PREFIX_REQUESTS: usize = 16;
const PREFIX_OWN_TOKENS: usize = 24;

const HF_SCRIPT: &str = include_str!("../../python/engine_hf.py");

pub struct Options {
    pub presets: Vec<String>,
    pub prompt: usize,
    pub new_tokens: usize,
    pub reps: usize,
    /// A Python with torch and transformers; `None` skips the comparison.
    pub python: Option<String>,
    /// Datastore sizes to decode with (kNN-LM memory), each next to decoding without.
    pub memory_keys: Vec<usize>,
    /// `cpu` or `cuda` (see `hone_engine::device`).
    pub device: String,
    /// `f32`, `bf16` or `f16`.
    pub dtype: String,
    /// Where to write the result file (the command, commit, date,
    /// machine and every table), if anywhere.
    pub out: Option<std::path::PathBuf>,
    /// Times the throughput table's measurements are repeated (each figure
    /// printed as the median of the runs and their range).
    pub runs: usize,
}

/// Weights each token is multiplied by in the decoder layers (every
/// projection) and in the LM head; the embedding lookup reads one row.
/// A decode step reads and multiplies both; prefill needs the LM head for
/// the last position only.
fn weights_per_token(model: &Model) -> (usize, usize) {
    let layers: usize = model
        .layers()
        .iter()
        .map(|l| {
            [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                .iter()
                .map(|p| p.weight.elem_count())
                .sum::<usize>()
        })
        .sum();
    (layers, model.lm_head().elem_count())
}

pub fn run(options: Options) -> Result<ExitCode> {
    let settings = BenchSettings {
        prompt: options.prompt,
        new_tokens: options.new_tokens,
        reps: options.reps,
    };
    let device = hone_engine::device::by_name(&options.device)?;
    let dtype = DType::from_str(&options.dtype).map_err(|e| anyhow::anyhow!("--dtype: {e}"))?;
    let mut out = crate::report::Report::new(options.out.clone());
    let runs = options.runs.max(1);
    writeln!(
        out,
        "hone bench engine — {}, {} ({} CPU threads), prompt {} tokens, {} decode steps, median of {} timed passes, {} run(s)",
        options.dtype,
        hone_engine::device::label(&device),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        settings.prompt,
        settings.new_tokens,
        settings.reps,
        runs
    )?;
    let mut rows = Vec::new();
    let mut memory_rows = Vec::new();
    let mut prefix_rows = Vec::new();
    let mut parts_rows = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for name in &options.presets {
        let dir = random_checkpoint(name)?;
        hone_console::note(format_args!("[{name}] loading the checkpoint into hone-engine …"));
        let model = Model::load(dir.path(), dtype, &device)?;
        let prompt_rows = [settings.prompt, 8 * settings.prompt];
        let (layer_weights, head_weights) = weights_per_token(&model);
        let weights = (layer_weights + head_weights) as f64;
        let weight_bytes = weights * dtype.size_in_bytes() as f64;
        let prefill_weights = layer_weights as f64 + head_weights as f64 / settings.prompt.max(1) as f64;
        let products = Product::projections(&model.config, &prompt_rows);
        let hone_side = format!("[{name}] hone-engine (candle)");
        let their_side = format!("[{name}] transformers");
        let compared = side_by_side(
            runs,
            || Limits::measure(&device, dtype, &products),
            Side::new(&hone_side, || Ok(measure(&model, settings)?)),
            options
                .python
                .as_deref()
                .map(|python| Side::new(&their_side, || transformers(python, dir.path(), settings, &options))),
        )?;
        let limits = compared.limits;
        writeln!(
            out,
            "[{name}] machine limits, same run: {}",
            limits.describe(&device, dtype, &prompt_rows, runs)
        )?;
        for keys in &options.memory_keys {
            hone_console::note(format_args!("[{name}] decoding with kNN-LM memory of {keys} keys …"));
            for figures in measure_memory(&model, settings, *keys)? {
                memory_rows.push((name.clone(), figures));
            }
        }
        drop(model);
        hone_console::note(format_args!(
            "[{name}] {PREFIX_REQUESTS} requests sharing their prompt, prefix cache off and on …"
        ));
        let served = EngineLoad {
            dir: dir.path(),
            settings,
            requests: PREFIX_REQUESTS,
            own: PREFIX_OWN_TOKENS,
            dtype,
            device: &device,
        };
        prefix_rows.push((name.clone(), measure_prefix_cache(&served)?));
        if cores > 1 && device.is_cpu() {
            hone_console::note(format_args!(
                "[{name}] the same requests decoded in 1 part and in {cores} …"
            ));
            parts_rows.push((name.clone(), measure_decode_parts(&served, cores)?));
        }
        let roofline = [
            limits.prefill(prefill_weights),
            limits.prefill(prefill_weights),
            limits.decode(1, weight_bytes, weights).unwrap_or(f64::NAN),
            limits.decode(8, weight_bytes, weights).unwrap_or(f64::NAN),
        ];
        rows.push((name.clone(), compared, roofline, weight_bytes));
    }
    writeln!(out)?;
    writeln!(
        out,
        "Roofline: prefill at the matmul peak (2 flops a layer weight a token, the LM head once a prompt; attention's own products left out, so at long prompts a share above 100% is possible); decode at the bandwidth (the weights read once a step, shared by its rows) or the peak, whichever binds. hone / transformers: the median over the runs of each run's ratio (the two measured back to back within it), with the least and most."
    )?;
    writeln!(
        out,
        "| model | metric | hone-engine tok/s | hone range | transformers tok/s | transformers range | hone / transformers | ratio range | roofline tok/s | hone of roofline | transformers of roofline |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let pick: [fn(&Figures) -> f64; 4] = [|f| f.prefill_b1, |f| f.prefill_b8, |f| f.decode_b1, |f| f.decode_b8];
    for (name, compared, roofline, weight_bytes) in &rows {
        let names = ["prefill b1", "prefill b8", "decode b1", "decode b8"];
        let (ours, theirs) = (&compared.ours, &compared.theirs);
        for ((metric, get), limit) in names.iter().zip(pick).zip(roofline) {
            let us = Spread::of(ours.iter().map(get));
            let them = (!theirs.is_empty()).then(|| Spread::of(theirs.iter().map(get)));
            let ratio = compared.ratios(|a, b| get(a) / get(b));
            let limit = Some(*limit).filter(|l| l.is_finite());
            writeln!(
                out,
                "| {name} | {metric} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                us.median,
                us.range(),
                them.map_or("–".into(), |t| format!("{:.1}", t.median)),
                them.map_or("–".into(), Spread::range),
                ratio.map_or("–".into(), Spread::times),
                ratio.map_or("–".into(), Spread::times_range),
                limit.map_or("–".into(), |l| format!("{l:.1}")),
                crate::roofline::percent(us.median, limit),
                them.map_or("–".into(), |t| crate::roofline::percent(t.median, limit)),
            )?;
        }
        let scaling = |f: &[Figures]| Spread::of(f.iter().map(|f| f.decode_b8 / f.decode_b1)).times();
        writeln!(
            out,
            "| {name} | batch-8 / batch-1 decode | {} | | {} | | | | {:.2} GB of weights a step | | |",
            scaling(ours),
            if theirs.is_empty() {
                "–".into()
            } else {
                scaling(theirs)
            },
            weight_bytes / 1e9
        )?;
    }
    if !memory_rows.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "kNN-LM memory (k = 16, λ = 0.25; clustered synthetic keys), decode tok/s through the engine's sampling path, same run:"
        )?;
        writeln!(
            out,
            "| model | keys | search | b1 without | b1 with | with / without | b8 without | b8 with | with / without | index build | recall@16 |"
        )?;
        writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|")?;
        for (name, m) in &memory_rows {
            writeln!(
                out,
                "| {name} | {} | {} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.1} | {:.2}× | {} | {} |",
                m.keys,
                m.search,
                m.decode_b1,
                m.decode_b1_memory,
                m.decode_b1_memory / m.decode_b1,
                m.decode_b8,
                m.decode_b8_memory,
                m.decode_b8_memory / m.decode_b8,
                m.index_seconds.map_or("–".into(), |s| format!("{s:.1} s")),
                m.recall.map_or("–".into(), |r| format!("{r:.3}")),
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "Prefix cache: {PREFIX_REQUESTS} requests submitted together, each the same {} tokens and {PREFIX_OWN_TOKENS} of its own, {} greedy tokens each, through the engine (median seconds):",
        settings.prompt, settings.new_tokens
    )?;
    writeln!(
        out,
        "| model | cache off | cache on | off / on | prompt tokens reused |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    for (name, p) in &prefix_rows {
        writeln!(
            out,
            "| {name} | {:.3} s | {:.3} s | {:.2}× | {:.0}% |",
            p.cold_seconds,
            p.cached_seconds,
            p.cold_seconds / p.cached_seconds,
            100.0 * p.reused
        )?;
    }
    if !parts_rows.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "Decode parts: the same requests, prefix cache on, each decode step's batch in one part and cut into parts decoded on threads of their own; {} thread(s) per op ({} to change it) (median seconds):",
            std::env::var(hone_engine::threads::VARIABLE).unwrap_or_else(|_| "candle's default".into()),
            hone_engine::threads::VARIABLE
        )?;
        writeln!(out, "| model | 1 part | parts | N parts | 1 / N |")?;
        writeln!(out, "|---|---|---|---|---|")?;
        for (name, p) in &parts_rows {
            writeln!(
                out,
                "| {name} | {:.3} s | {} | {:.3} s | {:.2}× |",
                p.one_part_seconds,
                p.parts,
                p.parts_seconds,
                p.one_part_seconds / p.parts_seconds
            )?;
        }
    }
    if options.python.is_none() {
        writeln!(
            out,
            "\n(transformers column skipped: pass --python PATH to a Python with torch and transformers)"
        )?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `python/engine_hf.py` on the same checkpoint.
fn transformers(python: &str, model: &Path, settings: BenchSettings, options: &Options) -> Result<Figures> {
    let args: Vec<std::ffi::OsString> = vec![
        "--model".into(),
        model.into(),
        "--prompt".into(),
        settings.prompt.to_string().into(),
        "--new".into(),
        settings.new_tokens.to_string().into(),
        "--reps".into(),
        settings.reps.to_string().into(),
        "--device".into(),
        options.device.clone().into(),
        "--dtype".into(),
        options.dtype.clone().into(),
    ];
    run_json(python, HF_SCRIPT, &args)
}
