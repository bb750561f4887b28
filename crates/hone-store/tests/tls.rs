//! TLS to PostgreSQL, asked for in the URL as libpq users write it: the
//! server's certificate is always verified (chain and host name), against
//! `sslrootcert` when given; a server that cannot be authenticated gets no
//! connection, and `sslmode=disable` stays plain.

use hone_store::{LocalPostgres, LocalPostgresError, Store};

#[test]
fn a_store_speaks_tls_when_the_url_asks_and_only_to_a_server_it_can_verify() {
    let dir = tempfile::tempdir().unwrap();
    let server = match LocalPostgres::create_tls(&dir.path().join("pg")) {
        Ok(server) => server,
        Err(LocalPostgresError::NotInstalled) if std::env::var_os("HONE_REQUIRE_POSTGRES").is_none() => {
            eprintln!("SKIPPED: PostgreSQL is not installed here (Debian's `postgresql`)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let url = server.create_database("tls").unwrap();
    let ca = server.ca_file().display().to_string();

    let verified = hone_test_support::connect(&format!("{url}?sslmode=verify-full&sslrootcert={ca}"), 2).unwrap();
    assert!(
        verified.encrypted().unwrap(),
        "sslmode=verify-full connected in the clear"
    );
    assert!(
        verified.versions(None).unwrap().is_empty(),
        "the store answers over TLS"
    );
    let required = hone_test_support::connect(&format!("{url}?sslmode=require&sslrootcert={ca}"), 2).unwrap();
    assert!(required.encrypted().unwrap());
    let preferred = hone_test_support::connect(&format!("{url}?sslmode=prefer&sslrootcert={ca}"), 2).unwrap();
    assert!(preferred.encrypted().unwrap(), "the server offers TLS: prefer takes it");
    let plain = hone_test_support::connect(&format!("{url}?sslmode=disable"), 2).unwrap();
    assert!(!plain.encrypted().unwrap());
    let default = hone_test_support::connect(&url, 2).unwrap();
    assert!(!default.encrypted().unwrap(), "no sslmode: plain, as before");

    let refused = |url: String| match hone_test_support::connect(&url, 2) {
        Ok(_) => panic!("connected to a server it cannot verify: {url}"),
        Err(e) => e.to_string(),
    };
    // The system's roots do not know the test CA.
    let e = refused(format!("{url}?sslmode=require"));
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // The certificate is for 127.0.0.1, not `localhost`.
    let by_name = url.replace("127.0.0.1", "localhost");
    let e = refused(format!("{by_name}?sslmode=require&sslrootcert={ca}"));
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    let e = refused(format!(
        "{url}?sslmode=require&sslrootcert={}/missing.pem",
        dir.path().display()
    ));
    assert!(e.contains("sslrootcert") && e.contains("missing.pem"), "{e}");
    assert!(!e.contains("password"), "{e}");
}
