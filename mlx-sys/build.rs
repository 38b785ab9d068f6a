//! Build script of the drop-in `mlx-sys`.
//!
//! 1. Find MLX 0.32.2: `MLX_PREFIX`, or the official wheel downloaded with pip into a
//!    cache under the target directory (`build/prefix.rs`).
//! 2. Unpack the mlx-c 0.7.0 sources from the upstream `mlx-sys` 0.7.0 package that cargo
//!    downloads, checked by sha256 (`build/mlx_c.rs`).
//! 3. Compile mlx-c with `cc` and link `libmlx` dynamically. The Rust bindings are checked
//!    in (`src/bindings.rs`, made by `cargo xtask bindings`), so building needs no libclang.
//!
//! Every failure ends the build with one message saying what was expected.

#[path = "build/fail.rs"]
mod fail;
#[path = "build/mlx_c.rs"]
#[allow(dead_code)] // `headers` serves `cargo xtask bindings`.
mod mlx_c;
#[path = "build/prefix.rs"]
mod prefix;

use std::env;
use std::path::{Path, PathBuf};

use fail::{Fail, or_fail};

fn main() {
    if let Err(e) = run() {
        e.exit();
    }
}

fn run() -> Result<(), Fail> {
    println!("cargo:rerun-if-env-changed=MLX_PREFIX");
    println!("cargo:rerun-if-env-changed=MLX_PYTHON");
    println!("cargo:rerun-if-env-changed=MLX_AOT_CACHE_DIR");
    println!("cargo:rerun-if-env-changed=XDG_CACHE_HOME");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=compat");

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let compat = manifest_dir.join("compat");

    let mlx = prefix::locate(&out_dir)?;
    let mlx_c_root = mlx_c::unpack(&out_dir)?;

    compile_mlx_c(&mlx, &mlx_c_root, &compat)?;

    let lib = mlx.lib_dir();
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if cfg!(target_vendor = "apple") {
        println!("cargo:rustc-link-lib=dylib=c++");
    } else {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
    // Read by dependents as DEP_MLX_LIBDIR to set the run-time search path of their
    // executables, so nothing needs LD_LIBRARY_PATH.
    println!("cargo:libdir={}", lib.display());
    println!("cargo:prefix={}", mlx.root().display());
    println!("cargo:version={}", prefix::MLX_VERSION);
    Ok(())
}

fn compile_mlx_c(mlx: &prefix::MlxPrefix, mlx_c_root: &Path, compat: &Path) -> Result<(), Fail> {
    let sources = mlx_c::sources(mlx_c_root)?;
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .pic(true)
        .include(mlx_c_root)
        .include(mlx.include_dir())
        .include(compat)
        // mlx-c has no use for its own warnings here; the build stays quiet.
        .flag_if_supported("-w")
        .files(&sources);
    for header in ["mlx_sys_half.h", "mlx_sys_format.h"] {
        build
            .flag("-include")
            .flag(compat.join(header).to_string_lossy().as_ref());
    }
    for define in mlx.defines() {
        build.define(define, None);
    }
    for include in mlx.extra_includes() {
        build.include(include);
    }
    or_fail(build.try_compile("mlxc"), |e| {
        format!(
            "compiling mlx-c 0.7.0 against MLX in {} failed: {e}",
            mlx.root().display()
        )
    })
}
