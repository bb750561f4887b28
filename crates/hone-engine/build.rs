//! Links the system's OpenBLAS in a build with the `blas` feature (the
//! library whose `cblas_sgemm` ndarray calls; `src/gemm.rs`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_BLAS").is_some() {
        println!("cargo:rustc-link-lib=openblas");
    }
}
