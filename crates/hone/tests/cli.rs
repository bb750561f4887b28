//! The CLI's small commands: `hone config check` and `hone key new`.

use std::process::Command;

fn hone(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        // What examples/local.toml asks its reader to export.
        .env("HONE_MODEL_DIR", "./tiny-model")
        .output()
        .unwrap()
}

#[test]
fn config_check_accepts_every_example_and_names_the_bad_field() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = hone(&["config", "check", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "proxy.toml and local.toml at least");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[providers.up]\ntype = \"openai\"\nbase_url = \"ftp://x\"\n").unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("providers.up.base_url"), "{stderr}");

    std::fs::write(
        &bad,
        "[agents.a.versions.v1]\nprovider = \"up\"\nmodel = \"m\"\ntemprature = 1\n",
    )
    .unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("temprature"));

    std::fs::write(&bad, "[gateway]\nthreads = 0\n").unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gateway.threads"));
}

#[test]
fn key_new_prints_a_key_and_the_hash_of_that_key() {
    let out = hone(&["key", "new", "--name", "team", "--agents", "assistant"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let key = text.lines().nth(1).unwrap().trim();
    assert!(key.starts_with("hone-"));
    let hash = hone_gateway_hash(key);
    assert!(text.contains(&format!("sha256 = \"{hash}\"")), "{text}");
    assert!(text.contains("agents = [\"assistant\"]"));
}

fn hone_gateway_hash(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}
