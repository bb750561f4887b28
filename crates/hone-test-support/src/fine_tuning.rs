//! The fake upstream's fine-tuning API, in OpenAI's wire format: multipart
//! `POST /v1/files`, `POST /v1/fine_tuning/jobs` (with `method`), `GET
//! /v1/fine_tuning/jobs/{id}`, `…/events` (newest first), `…/checkpoints`
//! and `POST …/cancel`. A job moves one state per read —
//! `validating_files` → `queued` → `running` (two reads, an event each) →
//! `succeeded` with `ft:<model>:hone-test:<suffix>:<id>` — or fails as
//! scripted ([`JobScript`]). What its model then answers is the test's
//! brain's to say (by the `ft:` model name).

use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How the next jobs end.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum JobScript {
    #[default]
    Succeed,
    /// `failed` after validation, with this error message.
    Fail(String),
    /// Stays `running` until cancelled.
    Hang,
}

/// An uploaded file.
#[derive(Debug, Clone)]
pub struct UploadedFile {
    pub filename: String,
    pub purpose: String,
    pub bytes: Vec<u8>,
}

/// A job as the fake keeps it.
#[derive(Debug, Clone)]
pub struct FakeJob {
    pub request: Value,
    pub status: &'static str,
    pub reads: u32,
    pub fine_tuned_model: Option<String>,
    pub trained_tokens: Option<u64>,
    pub error: Option<Value>,
    /// Oldest first.
    pub events: Vec<(String, String)>,
    script: JobScript,
}

#[derive(Default)]
pub struct FineTuning {
    pub files: BTreeMap<String, UploadedFile>,
    pub jobs: BTreeMap<String, FakeJob>,
    pub script: JobScript,
    next: u64,
}

pub type Shared = Arc<Mutex<FineTuning>>;

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})),
    )
        .into_response()
}

pub async fn upload(State(ft): State<Shared>, mut form: Multipart) -> Response {
    let (mut purpose, mut file) = (None, None);
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("purpose") => purpose = field.text().await.ok(),
            Some("file") => {
                let name = field.file_name().unwrap_or_default().to_owned();
                file = field.bytes().await.ok().map(|b| (name, b.to_vec()));
            }
            _ => {}
        }
    }
    let (Some(purpose), Some((filename, bytes))) = (purpose, file) else {
        return error(StatusCode::BAD_REQUEST, "a file and its purpose are required");
    };
    let mut ft = ft.lock().unwrap();
    ft.next += 1;
    let id = format!("file-{}", ft.next);
    let object = json!({"id": id, "object": "file", "bytes": bytes.len(), "created_at": 1_700_000_000, "filename": filename, "purpose": purpose});
    ft.files.insert(
        id,
        UploadedFile {
            filename,
            purpose,
            bytes,
        },
    );
    Json(object).into_response()
}

fn job_object(id: &str, job: &FakeJob) -> Value {
    json!({
        "object": "fine_tuning.job",
        "id": id,
        "model": job.request["model"],
        "created_at": 1_700_000_000,
        "finished_at": null,
        "fine_tuned_model": job.fine_tuned_model,
        "organization_id": "org-hone-test",
        "result_files": [],
        "status": job.status,
        "validation_file": job.request["validation_file"],
        "training_file": job.request["training_file"],
        "hyperparameters": job.request["method"][job.request["method"]["type"].as_str().unwrap_or("supervised")]["hyperparameters"],
        "trained_tokens": job.trained_tokens,
        "error": job.error,
        "user_provided_suffix": job.request["suffix"],
        "seed": job.request["seed"],
        "estimated_finish": null,
        "integrations": [],
        "method": job.request["method"],
        "metadata": job.request["metadata"],
    })
}

pub async fn create(State(ft): State<Shared>, Json(request): Json<Value>) -> Response {
    let mut ft = ft.lock().unwrap();
    let Some(training) = request["training_file"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "training_file is required");
    };
    if !ft.files.contains_key(training) {
        return error(StatusCode::BAD_REQUEST, &format!("no file {training}"));
    }
    if request["model"].as_str().is_none() {
        return error(StatusCode::BAD_REQUEST, "model is required");
    }
    ft.next += 1;
    let id = format!("ftjob-{}", ft.next);
    let job = FakeJob {
        request,
        status: "validating_files",
        reads: 0,
        fine_tuned_model: None,
        trained_tokens: None,
        error: None,
        events: vec![(format!("ftevent-{id}-0"), format!("Created fine-tuning job: {id}"))],
        script: ft.script.clone(),
    };
    let object = job_object(&id, &job);
    ft.jobs.insert(id, job);
    Json(object).into_response()
}

/// One read moves the job on.
fn advance(id: &str, job: &mut FakeJob, training_bytes: usize) {
    job.reads += 1;
    let say = |job: &mut FakeJob, message: String| {
        let n = job.events.len();
        job.events.push((format!("ftevent-{id}-{n}"), message));
    };
    match (job.status, &job.script) {
        ("validating_files", JobScript::Fail(reason)) => {
            job.status = "failed";
            job.error = Some(json!({"code": "invalid_training_file", "message": reason, "param": "training_file"}));
            let reason = reason.clone();
            say(job, format!("Job failed: {reason}"));
        }
        ("validating_files", _) => {
            job.status = "queued";
            say(job, "Validated training file".into());
        }
        ("queued", _) => {
            job.status = "running";
            say(job, "Fine-tuning job started".into());
        }
        ("running", JobScript::Hang) => {}
        ("running", _) if job.reads < 5 => say(
            job,
            format!("Step {}/2: training loss=0.{}", job.reads - 3, 9 - job.reads),
        ),
        ("running", _) => {
            let epochs = job.request["method"][job.request["method"]["type"].as_str().unwrap_or("")]["hyperparameters"]
                ["n_epochs"]
                .as_u64()
                .unwrap_or(3);
            job.status = "succeeded";
            job.trained_tokens = Some(training_bytes.div_ceil(4) as u64 * epochs);
            job.fine_tuned_model = Some(format!(
                "ft:{}:hone-test:{}:{}",
                job.request["model"].as_str().unwrap_or_default(),
                job.request["suffix"].as_str().unwrap_or_default(),
                id.trim_start_matches("ftjob-")
            ));
            say(job, "The job has successfully completed".into());
        }
        _ => {}
    }
}

pub async fn read(State(ft): State<Shared>, Path(id): Path<String>) -> Response {
    let mut ft = ft.lock().unwrap();
    let training_bytes = ft
        .jobs
        .get(&id)
        .and_then(|j| j.request["training_file"].as_str().map(str::to_owned))
        .and_then(|f| ft.files.get(&f).map(|f| f.bytes.len()))
        .unwrap_or(0);
    let Some(job) = ft.jobs.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("no job {id}"));
    };
    advance(&id, job, training_bytes);
    Json(job_object(&id, job)).into_response()
}

pub async fn events(State(ft): State<Shared>, Path(id): Path<String>) -> Response {
    let ft = ft.lock().unwrap();
    let Some(job) = ft.jobs.get(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("no job {id}"));
    };
    let data: Vec<Value> = job
        .events
        .iter()
        .rev()
        .enumerate()
        .map(|(i, (event_id, message))| {
            json!({"object": "fine_tuning.job.event", "id": event_id, "created_at": 1_700_000_100 - i as i64,
                   "level": "info", "message": message, "data": {}, "type": "message"})
        })
        .collect();
    Json(json!({"object": "list", "data": data, "has_more": false})).into_response()
}

pub async fn checkpoints(State(ft): State<Shared>, Path(id): Path<String>) -> Response {
    let ft = ft.lock().unwrap();
    let Some(job) = ft.jobs.get(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("no job {id}"));
    };
    let data: Vec<Value> = job
        .fine_tuned_model
        .iter()
        .map(|m| {
            json!({"object": "fine_tuning.job.checkpoint", "id": format!("ftckpt-{id}"), "created_at": 1_700_000_200,
                   "fine_tuned_model_checkpoint": format!("{m}:ckpt-step-2"), "step_number": 2,
                   "metrics": {"step": 2, "train_loss": 0.5}, "fine_tuning_job_id": id})
        })
        .collect();
    Json(json!({"object": "list", "data": data, "has_more": false})).into_response()
}

pub async fn cancel(State(ft): State<Shared>, Path(id): Path<String>) -> Response {
    let mut ft = ft.lock().unwrap();
    let Some(job) = ft.jobs.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("no job {id}"));
    };
    if matches!(job.status, "succeeded" | "failed" | "cancelled") {
        return error(StatusCode::BAD_REQUEST, &format!("job {id} has already {}", job.status));
    }
    job.status = "cancelled";
    let n = job.events.len();
    job.events.push((format!("ftevent-{id}-{n}"), "Job cancelled".into()));
    Json(job_object(&id, job)).into_response()
}
