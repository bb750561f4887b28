//! TLS to PostgreSQL, set the way libpq users already write it, in the URL:
//! `?sslmode=require&sslrootcert=/etc/ssl/db-ca.pem`.
//!
//! - `sslmode` absent or `disable`: plain TCP (a private network);
//!   `prefer`: TLS when the server offers it; `require`, `verify-ca`,
//!   `verify-full`: TLS or no connection.
//! - Whenever TLS is used the server's certificate is verified, chain and
//!   host name — libpq's `verify-full` — against `sslrootcert` when given
//!   (a managed database's CA bundle), else the system's roots. hone never
//!   encrypts to a server it has not authenticated.
//!
//! rustls (with ring, already in the tree for HTTPS) does the handshake,
//! through `tokio-postgres-rustls`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A URL's connection settings and the TLS connector they ask for.
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
}

/// Parses `url` (the `postgres://` form or libpq's `key=value` form).
pub fn parse(url: &str) -> Result<Settings, String> {
    let (rest, root_file) = take_root_file(url);
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
    if !rest.contains("sslmode=") {
        // tokio-postgres would `prefer` TLS; unasked, hone stays plain (as
        // before TLS was supported) rather than fail on an unverifiable server.
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    let roots = match &root_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("sslrootcert {path}: {e}"))?;
            if certificates.is_empty() {
                return Err(format!("sslrootcert {path} holds no PEM certificate"));
            }
            for certificate in certificates {
                roots.add(certificate).map_err(|e| format!("sslrootcert {path}: {e}"))?;
            }
            roots
        }
        None => {
            let mut roots = rustls::RootCertStore::empty();
            // Unreadable system certificates are skipped; none at all only
            // matters once TLS is asked for, and then the handshake says so.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            roots
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Settings {
        config,
        tls: MakeRustlsConnect::new(client),
    })
}

/// `url` without its `sslrootcert` (which tokio-postgres does not know) and
/// with libpq's `verify-ca`/`verify-full` as `require` (verification is
/// always full here); the root file, if given.
fn take_root_file(url: &str) -> (String, Option<String>) {
    let mut root = None;
    let mut keep = |pair: &str| -> Option<String> {
        match pair.split_once('=') {
            Some(("sslrootcert", path)) => {
                root = Some(path.to_owned());
                None
            }
            Some(("sslmode", "verify-ca" | "verify-full")) => Some("sslmode=require".to_owned()),
            _ => Some(pair.to_owned()),
        }
    };
    let rest = if let Some((base, query)) = url.split_once('?') {
        let kept: Vec<String> = query.split('&').filter_map(&mut keep).collect();
        if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else if url.contains("://") {
        url.to_owned()
    } else {
        url.split_whitespace()
            .filter_map(&mut keep)
            .collect::<Vec<_>>()
            .join(" ")
    };
    (rest, root)
}

#[cfg(test)]
mod tests {
    use super::take_root_file;

    #[test]
    fn libpq_settings_are_read_from_the_url() {
        let (rest, root) =
            take_root_file("postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x");
        assert_eq!(rest, "postgres://u@h/db?sslmode=require&application_name=x");
        assert_eq!(root.as_deref(), Some("/ca.pem"));
        let (rest, root) = take_root_file("host=h user=u sslrootcert=/ca.pem sslmode=require");
        assert_eq!(rest, "host=h user=u sslmode=require");
        assert_eq!(root.as_deref(), Some("/ca.pem"));
        let (rest, root) = take_root_file("postgres://u@h/db?sslrootcert=/ca.pem");
        assert_eq!((rest.as_str(), root.is_some()), ("postgres://u@h/db", true));
        assert_eq!(take_root_file("postgres://u@h/db").0, "postgres://u@h/db");
    }
}
