//! The fast upstream: answers every `POST /v1/chat/completions` with the same
//! small `chat.completion`, so what is measured is hone, not a model.

use anyhow::Result;
use axum::routing::post;
use axum::Router;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"fast","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32}}"#;

pub fn serve(port: u16) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let app = Router::new().route(
            "/v1/chat/completions",
            post(|| async { ([(axum::http::header::CONTENT_TYPE, "application/json")], ANSWER) }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await?;
        Ok(())
    })
}
