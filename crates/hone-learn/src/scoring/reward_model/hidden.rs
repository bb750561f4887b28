//! Reading an episode through the agent's base model (agents on the
//! embedded engine): its final hidden states over the last call's recorded
//! completion tokens, averaged, beside the state at the last token.

use crate::error::LearnError;
use hone_types::EpisodeDetail;

/// The model's reading of an episode: mean final hidden state over its
/// last call's completion tokens, then the state at its last token; `None`
/// when that call carries no token ids, or ids beyond the vocabulary.
pub fn features(
    model: &hone_engine::Model,
    episode: &EpisodeDetail,
) -> Result<Option<Vec<f64>>, hone_engine::EngineError> {
    let Some(tokens) = episode.calls.iter().rev().find_map(|c| c.sampled_tokens()) else {
        return Ok(None);
    };
    let vocab = model.config.vocab_size as u32;
    let (prompt, completion) = (&tokens.prompt, &tokens.completion);
    if completion.is_empty() || prompt.iter().chain(completion).any(|t| *t >= vocab) {
        return Ok(None);
    }
    let mut context = prompt.clone();
    context.extend_from_slice(completion);
    let input = candle_core::Tensor::new(context.as_slice(), model.device())?.unsqueeze(0)?;
    let hidden = model.hidden(&input, &mut hone_engine::KvCache::new(), None)?;
    let rows = hidden
        .squeeze(0)?
        .narrow(0, prompt.len(), completion.len())?
        .to_dtype(candle_core::DType::F32)?
        .to_vec2::<f32>()?;
    let width = rows.first().map_or(0, Vec::len);
    let mut out = vec![0.0; 2 * width];
    for row in &rows {
        for (o, v) in out.iter_mut().zip(row) {
            *o += f64::from(*v) / rows.len() as f64;
        }
    }
    if let Some(last) = rows.last() {
        for (o, v) in out[width..].iter_mut().zip(last) {
            *o = f64::from(*v);
        }
    }
    Ok(Some(out))
}

/// Loads the base model in `checkpoint` (f32, CPU).
pub fn load(checkpoint: &std::path::Path) -> Result<hone_engine::Model, hone_engine::EngineError> {
    hone_engine::Model::load(checkpoint, candle_core::DType::F32, &candle_core::Device::Cpu)
}

/// Reads every episode with the base model in `checkpoint`, off the async
/// threads; `None` for an episode it cannot read.
pub async fn read_all(
    checkpoint: std::path::PathBuf,
    episodes: Vec<EpisodeDetail>,
) -> Result<Vec<(EpisodeDetail, Option<Vec<f64>>)>, LearnError> {
    tokio::task::spawn_blocking(move || {
        let model = load(&checkpoint).map_err(LearnError::training("loading the reward model's base"))?;
        episodes
            .into_iter()
            .map(|e| {
                let x = features(&model, &e).map_err(LearnError::training("reading an episode's hidden states"))?;
                Ok((e, x))
            })
            .collect()
    })
    .await?
}
