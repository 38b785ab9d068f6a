fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Executables of this crate find libmlx without LD_LIBRARY_PATH.
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
