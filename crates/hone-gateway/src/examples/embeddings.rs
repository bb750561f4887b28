//! Embeddings for episodic memory from an OpenAI-compatible provider's
//! `/v1/embeddings`, and cosine similarity.

use crate::dispatch::Providers;
use crate::providers::AnyProvider;
use hone_types::Route;

pub async fn embed(providers: &Providers, route: &Route, inputs: &[String]) -> Result<Vec<Vec<f32>>, String> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let entry = providers
        .get(&route.provider)
        .ok_or_else(|| format!("embedding provider `{}` is not configured", route.provider))?;
    match &entry.provider {
        AnyProvider::OpenAi(p) => {
            crate::dispatch::with_retries(&entry.config, || p.embed(&route.model, inputs), |_, _| {})
                .await
                .map_err(|e| format!("embeddings from `{}`: {e}", route.provider))
        }
        _ => Err(format!(
            "embedding provider `{}` must be OpenAI-compatible (`type = \"openai\"`)",
            route.provider
        )),
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 || a.len() != b.len() {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

#[cfg(test)]
mod tests {
    use super::cosine;

    #[test]
    fn cosine_of_parallel_orthogonal_and_mismatched_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }
}
