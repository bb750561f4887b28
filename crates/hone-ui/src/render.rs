//! The templates, built into the binary, and their one environment.

use crate::UiError;
use minijinja::Environment;
use std::sync::OnceLock;

const TEMPLATES: [(&str, &str); 15] = [
    ("base.html", include_str!("../templates/base.html")),
    ("error.html", include_str!("../templates/error.html")),
    ("login.html", include_str!("../templates/login.html")),
    ("overview.html", include_str!("../templates/overview.html")),
    ("agent.html", include_str!("../templates/agent.html")),
    ("episodes.html", include_str!("../templates/episodes.html")),
    ("episode.html", include_str!("../templates/episode.html")),
    ("cycles.html", include_str!("../templates/cycles.html")),
    ("cycle.html", include_str!("../templates/cycle.html")),
    ("datasets.html", include_str!("../templates/datasets.html")),
    ("dataset.html", include_str!("../templates/dataset.html")),
    ("evals.html", include_str!("../templates/evals.html")),
    ("eval.html", include_str!("../templates/eval.html")),
    ("compare.html", include_str!("../templates/compare.html")),
    ("confirm.html", include_str!("../templates/confirm.html")),
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "a dashboard template does not parse");
            }
        }
        env.add_filter("time", |ms: i64| hone_types::time::format_rfc3339(ms));
        env.add_filter("short", |id: String| crate::pages::short(&id));
        env
    })
}

/// A page for `viewer` rendered from `template` with `context` (and what
/// every page's frame needs: whether to offer Sign out, and the CSRF token
/// its forms carry).
pub fn page(viewer: &crate::Viewer, template: &str, context: minijinja::Value) -> Result<String, UiError> {
    let context = minijinja::context! { session => viewer.session, csrf => viewer.csrf.clone(), ..context };
    bare(template, context)
}

/// A page rendered from `template` with `context` alone (sign-in, errors).
pub fn bare(template: &str, context: minijinja::Value) -> Result<String, UiError> {
    environment()
        .get_template(template)
        .and_then(|t| t.render(context))
        .map_err(|e| UiError::internal(format!("cannot render {template}: {e}")))
}
