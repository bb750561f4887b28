//! Files hone creates for its data are private to the user running it:
//! directories 0700, files 0600 (episodes hold users' conversations). An
//! existing directory keeps the permissions its owner gave it.

use std::fs::OpenOptions;
use std::path::Path;

/// Creates `dir` and any missing parents, new ones readable by the owner only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Makes `options` create files readable and writable by the owner only.
pub fn private(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(options, 0o600);
    options
}

/// Creates an empty private file at `path` if nothing is there yet (SQLite
/// then gives its WAL and shared-memory files the same permissions).
pub fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    match private(&mut options).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
