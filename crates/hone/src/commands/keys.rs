//! `hone key new`: a random data-plane API key, printed once, and the config
//! entry that holds only its SHA-256.

use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

pub fn new(name: &str, agents: &[String]) -> Result<ExitCode> {
    let key = format!("hone-{}", hex::encode(rand::random::<[u8; 24]>()));
    let hash = hone_gateway::auth::sha256_hex(&key);
    let agents = agents.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
    let mut out = std::io::stdout();
    writeln!(
        out,
        "key (shown once; give it to the client as its API key):\n  {key}\n"
    )?;
    writeln!(out, "add to the config (only the hash is stored):\n[[gateway.api_keys]]\nname = {name:?}\nsha256 = \"{hash}\"\nagents = [{agents}]")?;
    Ok(ExitCode::SUCCESS)
}
