fn main() {
    // The fuzz binaries find libmlx without LD_LIBRARY_PATH, as the workspace's
    // executables do: mlx-sys exports its lib folder to direct dependents only.
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
