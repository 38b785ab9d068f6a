fn main() {
    // Executables of this crate (binaries, tests, examples) find libmlx without
    // LD_LIBRARY_PATH: mlx-sys exports its lib folder as DEP_MLX_LIBDIR, which only reaches
    // crates that depend on mlx-sys directly. (Cargo reruns this when mlx-sys's build
    // script reruns; without the line below it would also rerun on every edit in src/.)
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
