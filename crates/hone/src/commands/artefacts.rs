//! `hone artefacts`: the shared artefact store (`[artefacts] url`) from the
//! command line — list what is published, publish an adapter trained
//! elsewhere, and pull an adapter or checkpoint onto a machine that serves
//! it without a gateway (a vLLM host with its own adapter directory).

use crate::context::{load_config, Common};
use anyhow::{bail, Result};
use clap::Subcommand;
use hone_artefacts::{human_bytes, Artefacts};
use hone_config::is_artefact_url;
use hone_console::runtime;
use hone_console::{note, print_line, print_table};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ArtefactsCommand {
    /// The adapters published in the shared store, with their content hashes.
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Publish an adapter directory under a name (or copy any directory to a URL).
    Push {
        /// The directory: adapter_config.json and adapter_model.safetensors.
        dir: PathBuf,
        /// The name versions will use (`adapter = "NAME"`); default: the directory's name.
        #[arg(long, conflicts_with = "to")]
        name: Option<String>,
        /// Copy to this URL instead (s3://bucket/path or file:///path).
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Fetch a published adapter (by name) or anything by URL into a new directory.
    Pull {
        /// An adapter name, or an s3:// or file:// URL.
        what: String,
        /// The directory to create (it must not exist yet).
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        common: Common,
    },
}

pub fn run(command: ArtefactsCommand) -> Result<()> {
    let common = match &command {
        ArtefactsCommand::List { common }
        | ArtefactsCommand::Push { common, .. }
        | ArtefactsCommand::Pull { common, .. } => common,
    };
    let config = load_config(common)?;
    let artefacts = Artefacts::new(&config.artefacts)?;
    let shared = || -> Result<String> {
        match artefacts.shared_url() {
            Some(url) => Ok(url.to_owned()),
            None => bail!(
                "no shared artefact store is configured: set [artefacts] url (s3://bucket/prefix or file:///path)"
            ),
        }
    };
    runtime()?.block_on(async {
        match &command {
            ArtefactsCommand::List { .. } => {
                let url = shared()?;
                let published = artefacts.published_adapters().await?;
                note(format_args!("{} adapters published at {url}", published.len()));
                let rows: Vec<Vec<String>> = published
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.manifest.short().to_owned(),
                            p.manifest.files.len().to_string(),
                            human_bytes(p.manifest.bytes()),
                        ]
                    })
                    .collect();
                print_table(&["adapter", "sha256", "files", "size"], &rows)
            }
            ArtefactsCommand::Push { dir, name, to, .. } => {
                let (manifest, url) = match to {
                    Some(url) => (artefacts.push(dir, url).await?, url.clone()),
                    None => {
                        shared()?;
                        let name = match name {
                            Some(n) => n.clone(),
                            None => dir
                                .file_name()
                                .and_then(|n| n.to_str())
                                .map(str::to_owned)
                                .unwrap_or_default(),
                        };
                        let Some(manifest) = artefacts.publish_adapter(&name, dir).await? else {
                            bail!("no shared artefact store is configured");
                        };
                        (manifest, artefacts.adapter_url(&name).unwrap_or_default())
                    }
                };
                print_line(&format!(
                    "{url}\tsha256 {}\t{} files\t{}",
                    manifest.sha256,
                    manifest.files.len(),
                    human_bytes(manifest.bytes())
                ))
            }
            ArtefactsCommand::Pull { what, to, .. } => {
                if to.exists() {
                    bail!("{} already exists; pull into a new directory", to.display());
                }
                let url = if is_artefact_url(what) {
                    what.clone()
                } else {
                    shared()?;
                    artefacts.adapter_url(what).unwrap_or_default()
                };
                let manifest = artefacts.pull(&url, to).await?;
                print_line(&format!(
                    "{}\tsha256 {}\t{} files\t{}",
                    to.display(),
                    manifest.sha256,
                    manifest.files.len(),
                    human_bytes(manifest.bytes())
                ))
            }
        }
    })
}
