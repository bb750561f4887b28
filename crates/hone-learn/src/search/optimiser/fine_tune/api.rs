//! OpenAI's fine-tuning API, as far as hone uses it: upload a JSONL file
//! (`POST /files`, multipart, purpose `fine-tune`), create a job
//! (`POST /fine_tuning/jobs` with its `method`), read it and its events
//! (`GET /fine_tuning/jobs/{id}`, `…/events`) and cancel it
//! (`POST …/cancel`). Any host that speaks this API — OpenAI, Azure
//! OpenAI, compatible servers — is reached by the provider's `base_url`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// A fine-tuning host: the provider's base URL and key.
pub struct Api {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
}

/// An uploaded file.
#[derive(Debug, Clone, Deserialize)]
pub struct FileObject {
    pub id: String,
    #[serde(default)]
    pub bytes: u64,
}

/// Where a job is (`validating_files` → `queued` → `running` →
/// `succeeded` | `failed` | `cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    ValidatingFiles,
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl Status {
    pub fn is_finished(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::ValidatingFiles => "validating_files",
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// Why a job failed, as the host says.
#[derive(Debug, Clone, Deserialize)]
pub struct JobError {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// A fine-tuning job.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    pub id: String,
    pub status: Status,
    #[serde(default)]
    pub fine_tuned_model: Option<String>,
    #[serde(default)]
    pub trained_tokens: Option<u64>,
    #[serde(default)]
    pub error: Option<JobError>,
}

impl Job {
    /// The host's reason for a failed job.
    pub fn failure(&self) -> String {
        match &self.error {
            Some(JobError { code, message }) => match (code, message) {
                (Some(c), Some(m)) => format!("{m} ({c})"),
                (None, Some(m)) => m.clone(),
                (Some(c), None) => c.clone(),
                (None, None) => "no reason given".to_owned(),
            },
            None => "no reason given".to_owned(),
        }
    }
}

/// One line of a job's log.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub message: String,
}

#[derive(Deserialize)]
struct List<T> {
    data: Vec<T>,
}

/// What a new job is asked for.
#[derive(Debug, Clone, Serialize)]
pub struct NewJob {
    pub model: String,
    pub training_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation_file: Option<String>,
    pub suffix: String,
    pub seed: u64,
    /// `{"type": "supervised" | "dpo" | "reinforcement", "<type>": {…}}`.
    pub method: Value,
    pub metadata: Value,
}

/// A refused request: the host's status and its error message.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{what}: cannot reach the fine-tuning API: {source}")]
    Transport {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: HTTP {status}: {message}")]
    Refused {
        what: &'static str,
        status: u16,
        message: String,
    },
}

impl Api {
    pub fn new(base_url: &str, api_key: Option<String>, timeout: Duration) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
        })
    }

    fn authorised(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    async fn send<T: for<'de> Deserialize<'de>>(
        &self,
        what: &'static str,
        builder: reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        let transport = |source| ApiError::Transport { what, source };
        let response = self.authorised(builder).send().await.map_err(transport)?;
        let status = response.status();
        let body = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            // OpenAI's error body: {"error": {"message": …}}.
            let message = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(300).collect());
            return Err(ApiError::Refused {
                what,
                status: status.as_u16(),
                message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| ApiError::Refused {
            what,
            status: status.as_u16(),
            message: format!("unreadable answer: {e}"),
        })
    }

    /// Uploads `bytes` as a fine-tuning file named `filename`.
    pub async fn upload(&self, filename: &str, bytes: Vec<u8>) -> Result<FileObject, ApiError> {
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(filename.to_owned())
            .mime_str("application/jsonl")
            .map_err(|source| ApiError::Transport {
                what: "uploading a file",
                source,
            })?;
        let form = reqwest::multipart::Form::new()
            .text("purpose", "fine-tune")
            .part("file", part);
        let url = format!("{}/files", self.base_url);
        self.send("uploading a file", self.http.post(url).multipart(form)).await
    }

    pub async fn create(&self, job: &NewJob) -> Result<Job, ApiError> {
        let url = format!("{}/fine_tuning/jobs", self.base_url);
        self.send("creating the job", self.http.post(url).json(job)).await
    }

    pub async fn job(&self, id: &str) -> Result<Job, ApiError> {
        let url = format!("{}/fine_tuning/jobs/{id}", self.base_url);
        self.send("reading the job", self.http.get(url)).await
    }

    /// The job's latest events (up to 100), oldest first. (The API lists
    /// the newest first and pages towards older ones, so new events are
    /// found by reading the latest again.)
    pub async fn events(&self, id: &str) -> Result<Vec<Event>, ApiError> {
        let url = format!("{}/fine_tuning/jobs/{id}/events", self.base_url);
        let list: List<Event> = self
            .send(
                "reading the job's events",
                self.http.get(url).query(&[("limit", "100")]),
            )
            .await?;
        let mut events = list.data;
        events.reverse();
        Ok(events)
    }

    pub async fn cancel(&self, id: &str) -> Result<Job, ApiError> {
        let url = format!("{}/fine_tuning/jobs/{id}/cancel", self.base_url);
        self.send("cancelling the job", self.http.post(url)).await
    }
}
