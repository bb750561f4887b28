//! Moving a directory to and from a [`Place`]: upload every file, then the
//! manifest; download every file into a fresh sibling directory, check each
//! against the manifest, fsync, then rename it into place. A reader never
//! sees half an artefact, on either side, also not after a crash.

use crate::error::{failed, ArtefactError, Result};
use crate::manifest::{FileEntry, Manifest, MANIFEST};
use crate::place::Place;
use futures::StreamExt;
use object_store::buffered::BufWriter;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes read from a local file at a time while uploading.
const CHUNK: usize = 8 << 20;

/// The manifest published at `place`, if any.
pub async fn published(place: &Place) -> Result<Option<Manifest>> {
    match place.store.get(&place.key(MANIFEST)).await {
        Ok(got) => {
            let bytes = got
                .bytes()
                .await
                .map_err(|e| failed(format!("reading {}", place.url), e))?;
            let manifest = serde_json::from_slice(&bytes)
                .map_err(|e| ArtefactError::Corrupt(format!("{}/{MANIFEST} is not a manifest: {e}", place.url)))?;
            Ok(Some(manifest))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(failed(format!("reading {}", place.url), e)),
    }
}

/// The manifest the files under `dir` would be published with: their
/// content hash.
pub fn manifest_of(dir: &Path) -> Result<Manifest> {
    Ok(Manifest::new(hash_files(&local_files(dir)?)?))
}

/// Publishes the files under `dir` at `place`, manifest last. Publishing
/// the same content again changes nothing; different content where a
/// manifest already is is refused.
pub async fn upload(dir: &Path, place: &Place) -> Result<Manifest> {
    let files = local_files(dir)?;
    let to_hash = files.clone();
    let local = tokio::task::spawn_blocking(move || hash_files(&to_hash))
        .await
        .map_err(|e| failed("hashing", e))?;
    let local = Manifest::new(local?);
    if let Some(existing) = published(place).await? {
        return if existing.sha256 == local.sha256 {
            Ok(existing)
        } else {
            Err(ArtefactError::Conflict(format!(
                "{} already holds different content ({} there, {} here); published artefacts never change",
                place.url,
                existing.short(),
                local.short()
            )))
        };
    }
    let mut entries = Vec::with_capacity(files.len());
    for (relative, path) in &files {
        entries.push(upload_file(path, relative, place).await?);
    }
    let manifest = Manifest::new(entries);
    if manifest.sha256 != local.sha256 {
        return Err(ArtefactError::Conflict(format!(
            "{} changed while it was being published; try again",
            dir.display()
        )));
    }
    let body = serde_json::to_vec_pretty(&manifest).map_err(|e| failed("manifest", e))?;
    place
        .store
        .put(&place.key(MANIFEST), body.into())
        .await
        .map_err(|e| failed(format!("writing {}/{MANIFEST}", place.url), e))?;
    Ok(manifest)
}

async fn upload_file(path: &Path, relative: &str, place: &Place) -> Result<FileEntry> {
    let doing = || format!("uploading {} to {}/{relative}", path.display(), place.url);
    let mut file = tokio::fs::File::open(path).await.map_err(|e| failed(doing(), e))?;
    let mut writer = BufWriter::new(place.store.clone(), place.key(relative));
    let mut digest = Sha256::new();
    let mut bytes = 0u64;
    let mut buffer = vec![0u8; CHUNK];
    let sent: std::io::Result<()> = async {
        loop {
            let n = file.read(&mut buffer).await?;
            if n == 0 {
                break;
            }
            digest.update(&buffer[..n]);
            bytes += n as u64;
            writer.write_all(&buffer[..n]).await?;
        }
        writer.shutdown().await
    }
    .await;
    if let Err(e) = sent {
        let _ = writer.abort().await;
        return Err(failed(doing(), e));
    }
    Ok(FileEntry {
        path: relative.to_owned(),
        bytes,
        sha256: hex::encode(digest.finalize()),
    })
}

/// What to do when `place` has no manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpublished {
    /// Refuse: only a published artefact is complete (adapters).
    Refuse,
    /// Take every object under the prefix, sizes checked against the
    /// listing (a checkpoint uploaded with `aws s3 sync`).
    TakeListing,
}

/// Downloads `place` into the directory `into` (which must not exist yet;
/// if another fetch creates it first, that one's copy is kept).
pub async fn download(place: &Place, into: &Path, unpublished: Unpublished) -> Result<Manifest> {
    let expected = match published(place).await? {
        Some(m) => Some(m),
        None if unpublished == Unpublished::Refuse => {
            return Err(ArtefactError::NotFound(format!(
                "nothing is published at {}",
                place.url
            )))
        }
        None => None,
    };
    let wanted: Vec<(String, u64, Option<String>)> = match &expected {
        Some(m) => m
            .files
            .iter()
            .map(|f| (f.path.clone(), f.bytes, Some(f.sha256.clone())))
            .collect(),
        None => listing(place).await?,
    };
    if wanted.is_empty() {
        return Err(ArtefactError::NotFound(format!("nothing is stored at {}", place.url)));
    }
    let name = into.file_name().and_then(|n| n.to_str()).unwrap_or("artefact");
    let staging = into.with_file_name(format!("{name}.fetch-{}", uuid::Uuid::now_v7().simple()));
    let fetched = async {
        let mut entries = Vec::with_capacity(wanted.len());
        for (relative, bytes, sha256) in &wanted {
            let got = download_file(place, relative, &staging).await?;
            if got.bytes != *bytes || sha256.as_ref().is_some_and(|s| *s != got.sha256) {
                return Err(ArtefactError::Corrupt(format!(
                    "{}/{relative}: got {} bytes with SHA-256 {}, expected {bytes} bytes{}",
                    place.url,
                    got.bytes,
                    &got.sha256[..12],
                    sha256
                        .as_ref()
                        .map(|s| format!(" with SHA-256 {}", &s[..12.min(s.len())]))
                        .unwrap_or_default()
                )));
            }
            entries.push(got);
        }
        let manifest = Manifest::new(entries);
        let body = serde_json::to_vec_pretty(&manifest).map_err(|e| failed("manifest", e))?;
        write_synced(&staging.join(MANIFEST), &body).await?;
        Ok(manifest)
    }
    .await;
    let manifest = match fetched {
        Ok(m) => m,
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            return Err(e);
        }
    };
    if let Err(e) = tokio::fs::rename(&staging, into).await {
        let _ = tokio::fs::remove_dir_all(&staging).await;
        if !into.is_dir() {
            return Err(failed(format!("moving the fetched copy to {}", into.display()), e));
        }
    }
    if let Some(parent) = into.parent() {
        sync_dir(parent).await;
    }
    Ok(manifest)
}

/// Every object under `place`'s prefix: relative path and size.
async fn listing(place: &Place) -> Result<Vec<(String, u64, Option<String>)>> {
    let mut found = Vec::new();
    let mut objects = place.store.list(Some(&place.prefix));
    while let Some(meta) = objects.next().await {
        let meta = meta.map_err(|e| failed(format!("listing {}", place.url), e))?;
        let relative: Vec<_> = meta
            .location
            .prefix_match(&place.prefix)
            .map(|parts| parts.map(|p| p.as_ref().to_owned()).collect())
            .unwrap_or_default();
        if !relative.is_empty() {
            found.push((relative.join("/"), meta.size, None));
        }
    }
    found.sort();
    Ok(found)
}

async fn download_file(place: &Place, relative: &str, staging: &Path) -> Result<FileEntry> {
    let target = safe_join(staging, relative)?;
    let doing = || format!("fetching {}/{relative}", place.url);
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| failed(doing(), e))?;
    }
    let got = place.store.get(&place.key(relative)).await.map_err(|e| match e {
        object_store::Error::NotFound { .. } => ArtefactError::Corrupt(format!(
            "{}/{relative} is listed in the manifest but missing",
            place.url
        )),
        e => failed(doing(), e),
    })?;
    let mut file = tokio::fs::File::create(&target).await.map_err(|e| failed(doing(), e))?;
    let mut digest = Sha256::new();
    let mut bytes = 0u64;
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(doing(), e))?;
        digest.update(&chunk);
        bytes += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(|e| failed(doing(), e))?;
    }
    file.sync_all().await.map_err(|e| failed(doing(), e))?;
    Ok(FileEntry {
        path: relative.to_owned(),
        bytes,
        sha256: hex::encode(digest.finalize()),
    })
}

/// `relative` below `root`, refusing anything that would leave it.
fn safe_join(root: &Path, relative: &str) -> Result<PathBuf> {
    let parts: Vec<&str> = relative.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\\'))
    {
        return Err(ArtefactError::Corrupt(format!(
            "`{relative}` is not a safe relative path"
        )));
    }
    Ok(parts.iter().fold(root.to_path_buf(), |path, part| path.join(part)))
}

async fn write_synced(path: &Path, body: &[u8]) -> Result<()> {
    let doing = || format!("writing {}", path.display());
    let mut file = tokio::fs::File::create(path).await.map_err(|e| failed(doing(), e))?;
    file.write_all(body).await.map_err(|e| failed(doing(), e))?;
    file.sync_all().await.map_err(|e| failed(doing(), e))
}

/// Makes a rename in `dir` durable (best effort: not every filesystem can).
async fn sync_dir(dir: &Path) {
    if let Ok(handle) = tokio::fs::File::open(dir).await {
        let _ = handle.sync_all().await;
    }
}

/// Every file under `dir`, recursively, as (`/`-separated relative path,
/// full path), sorted; the manifest itself is left out.
pub fn local_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
        let entries = std::fs::read_dir(dir).map_err(|e| failed(format!("reading {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| failed(format!("reading {}", dir.display()), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let path = entry.path();
            if path.is_dir() {
                walk(&path, &relative, out)?;
            } else if relative != MANIFEST {
                out.push((relative, path));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    if out.is_empty() {
        return Err(ArtefactError::NotFound(format!("{} holds no files", dir.display())));
    }
    out.sort();
    Ok(out)
}

/// Hashes each file (reading it whole, in chunks).
fn hash_files(files: &[(String, PathBuf)]) -> Result<Vec<FileEntry>> {
    use std::io::Read;
    let mut entries = Vec::with_capacity(files.len());
    let mut buffer = vec![0u8; CHUNK];
    for (relative, path) in files {
        let doing = || format!("reading {}", path.display());
        let mut file = std::fs::File::open(path).map_err(|e| failed(doing(), e))?;
        let mut digest = Sha256::new();
        let mut bytes = 0u64;
        loop {
            let n = file.read(&mut buffer).map_err(|e| failed(doing(), e))?;
            if n == 0 {
                break;
            }
            digest.update(&buffer[..n]);
            bytes += n as u64;
        }
        entries.push(FileEntry {
            path: relative.clone(),
            bytes,
            sha256: hex::encode(digest.finalize()),
        });
    }
    Ok(entries)
}
