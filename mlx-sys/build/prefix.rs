//! Where MLX comes from: `MLX_PREFIX`, or the official prebuilt wheel for this platform,
//! downloaded with pip into a versioned folder of the user's cache
//! (`~/.cache/mlx-aot/mlx-cpu-0.32.2-x86_64-linux/`, say). Executables record that folder as
//! their run-time search path, so an installed binary keeps finding `libmlx` after the
//! build folder is cleaned or moved.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::fail::{Fail, or_fail};

/// mlx-c 0.7.0 compiles against exactly this MLX (0.32.4 changed `gather_qmm`).
pub const MLX_VERSION: &str = "0.32.2";

/// An MLX installation laid out as the `mlx` folder of an official wheel:
/// `include/`, `lib/` and `share/cmake/MLX`.
pub struct MlxPrefix {
    root: PathBuf,
}

impl MlxPrefix {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn include_dir(&self) -> PathBuf {
        self.root.join("include")
    }

    pub fn lib_dir(&self) -> PathBuf {
        self.root.join("lib")
    }

    /// Compile definitions MLX's CMake package adds for its Apple builds.
    pub fn defines(&self) -> Vec<&'static str> {
        let mut defines = Vec::new();
        if self.has_metal() {
            defines.push("_METAL_");
        }
        if cfg!(target_vendor = "apple") {
            defines.push("ACCELERATE_NEW_LAPACK");
        }
        defines
    }

    /// Include folders MLX's CMake package adds for its Metal build.
    pub fn extra_includes(&self) -> Vec<PathBuf> {
        if self.has_metal() {
            vec![self.include_dir().join("metal_cpp")]
        } else {
            Vec::new()
        }
    }

    fn has_metal(&self) -> bool {
        self.include_dir().join("metal_cpp").is_dir()
    }

    /// Checks the layout and the version, naming what was expected.
    fn validate(root: PathBuf, origin: &str) -> Result<Self, Fail> {
        let lib_name = if cfg!(target_vendor = "apple") {
            "libmlx.dylib"
        } else {
            "libmlx.so"
        };
        let expected = [
            root.join("include/mlx/mlx.h"),
            root.join("include/mlx/version.h"),
            root.join("lib").join(lib_name),
            root.join("share/cmake/MLX"),
        ];
        let missing: Vec<String> = expected
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Fail(format!(
                "{origin} = {} is not an MLX {MLX_VERSION} installation: missing {}. Expected the \
                 `mlx` folder of an official MLX {MLX_VERSION} wheel (mlx-cpu, mlx-cuda-13 or \
                 mlx-metal), holding include/, lib/{lib_name} and share/cmake/MLX.",
                root.display(),
                missing.join(", ")
            )));
        }
        let version_h = root.join("include/mlx/version.h");
        let text = or_fail(fs::read_to_string(&version_h), |e| {
            format!("{origin}: cannot read {}: {e}", version_h.display())
        })?;
        let found = version_of(&text).unwrap_or_else(|| "an unknown version".to_owned());
        if found != MLX_VERSION {
            return Err(Fail(format!(
                "{origin} = {} holds MLX {found} (from {}), but mlx-c 0.7.0 needs MLX {MLX_VERSION} \
                 exactly. Point MLX_PREFIX at the `mlx` folder of an MLX {MLX_VERSION} wheel, or \
                 unset it to download mlx-cpu/mlx-metal {MLX_VERSION} automatically.",
                root.display(),
                version_h.display()
            )));
        }
        Ok(Self { root })
    }
}

/// Reads `MLX_VERSION_{MAJOR,MINOR,PATCH}` from `mlx/version.h`.
fn version_of(version_h: &str) -> Option<String> {
    let part = |name: &str| {
        version_h.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("#define")?.trim();
            let value = rest.strip_prefix(name)?.trim();
            value.parse::<u32>().ok()
        })
    };
    Some(format!(
        "{}.{}.{}",
        part("MLX_VERSION_MAJOR")?,
        part("MLX_VERSION_MINOR")?,
        part("MLX_VERSION_PATCH")?
    ))
}

/// `MLX_PREFIX` if set, else the cached (or freshly downloaded) wheel for this platform.
pub fn locate(out_dir: &Path) -> Result<MlxPrefix, Fail> {
    if let Some(prefix) = env::var_os("MLX_PREFIX") {
        return MlxPrefix::validate(PathBuf::from(prefix), "MLX_PREFIX");
    }
    let package = wheel_package()?;
    let unpacked = cache_root(out_dir).join(format!(
        "{package}-{MLX_VERSION}-{}-{}",
        target_cfg("CARGO_CFG_TARGET_ARCH"),
        target_cfg("CARGO_CFG_TARGET_OS")
    ));
    if !unpacked.join("mlx").is_dir() {
        download_wheel(package, &unpacked)?;
    }
    MlxPrefix::validate(
        unpacked.join("mlx"),
        &format!("the {package} {MLX_VERSION} wheel"),
    )
}

/// The PyPI package whose wheel carries `libmlx` for this target.
fn wheel_package() -> Result<&'static str, Fail> {
    if cfg!(target_os = "linux") {
        Ok("mlx-cpu")
    } else if cfg!(target_vendor = "apple") {
        Ok("mlx-metal")
    } else {
        Err(Fail(format!(
            "no official MLX wheel exists for this platform; set MLX_PREFIX to an MLX \
             {MLX_VERSION} installation (include/, lib/, share/cmake/MLX)"
        )))
    }
}

/// The folder that holds unpacked wheels: `MLX_AOT_CACHE_DIR`, else `mlx-aot` in the
/// user's cache (`$XDG_CACHE_HOME`, `~/.cache`, or `~/Library/Caches` on macOS), else (no
/// home folder) `<target>/mlx-wheels`. It outlives `cargo clean`: installed binaries load
/// `libmlx` from it.
pub fn cache_root(out_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("MLX_AOT_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return xdg.join("mlx-aot");
        }
    }
    if let Some(home) = env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
    {
        return if target_cfg("CARGO_CFG_TARGET_VENDOR") == "apple" {
            home.join("Library/Caches/mlx-aot")
        } else {
            home.join(".cache/mlx-aot")
        };
    }
    // OUT_DIR is <target>/<profile>/build/mlx-sys-<hash>/out.
    let mut up = out_dir.ancestors();
    let build = up.nth(2);
    match (build, up.nth(1)) {
        (Some(b), Some(target)) if b.file_name().is_some_and(|n| n == "build") => {
            target.join("mlx-wheels")
        }
        _ => out_dir.join("mlx-wheels"),
    }
}

/// A `CARGO_CFG_TARGET_*` value cargo gives build scripts ("unknown" outside cargo).
fn target_cfg(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| "unknown".to_owned())
}

fn python() -> String {
    env::var("MLX_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Downloads the wheel with pip and unpacks it into `dest`; a half-done unpack never
/// lands there (it is renamed into place at the end).
fn download_wheel(package: &str, dest: &Path) -> Result<(), Fail> {
    let parent = dest.parent().expect("cache folder has a parent");
    or_fail(fs::create_dir_all(parent), |e| {
        format!("creating {}: {e}", parent.display())
    })?;
    let work = parent.join(format!(".download-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let python = python();
    let requirement = format!("{package}=={MLX_VERSION}");
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
        ])
        .args(["--only-binary=:all:", "--dest"])
        .arg(&work)
        .arg(&requirement)
        .status();
    let hint = "set MLX_PREFIX to an unpacked MLX wheel to build without network";
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(Fail(format!(
                "`{python} -m pip download {requirement}` failed ({s}); MLX {MLX_VERSION} is taken \
                 from its official wheel. Check network access to PyPI, or {hint}."
            )));
        }
        Err(e) => {
            return Err(Fail(format!(
                "cannot run `{python}` ({e}): Python 3 with pip is needed to download the \
                 {requirement} wheel (set MLX_PYTHON to choose the interpreter), or {hint}."
            )));
        }
    }
    let wheel = or_fail(fs::read_dir(&work), |e| {
        format!("reading {}: {e}", work.display())
    })?
    .filter_map(|entry| entry.ok().map(|e| e.path()))
    .find(|p| p.extension().is_some_and(|x| x == "whl"))
    .ok_or_else(|| {
        Fail(format!(
            "pip downloaded no wheel for {requirement} into {}",
            work.display()
        ))
    })?;
    let staging = work.join("unpacked");
    let unzip = Command::new(&python)
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&staging)
        .status();
    if !matches!(unzip, Ok(s) if s.success()) {
        return Err(Fail(format!(
            "unpacking {} with `{python} -m zipfile` failed",
            wheel.display()
        )));
    }
    // Another build may have finished the same download meanwhile: keep whichever landed.
    if fs::rename(&staging, dest).is_err() && !dest.join("mlx").is_dir() {
        return Err(Fail(format!(
            "moving the unpacked wheel into {} failed",
            dest.display()
        )));
    }
    let _ = fs::remove_dir_all(&work);
    Ok(())
}
