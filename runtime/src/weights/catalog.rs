//! `Catalog`: every tensor of a model folder (single file, or sharded with
//! `model.safetensors.index.json`), by canonical name, checked from the headers before
//! anything is read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use mlx_rs::Array;

use super::header::{Header, TensorDtype, TensorInfo};
use crate::error::{Error, Result};

/// The index file of sharded checkpoints.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Tensors the text model never reads (mlx-lm's sanitize drops them).
const DROPPED_PREFIXES: [&str; 6] = [
    "vision_tower",
    "multi_modal_projector",
    "audio_tower",
    "embed_audio",
    "embed_vision",
    "vision_embedder",
];
const DROPPED_PARTS: [&str; 5] = [
    "self_attn.rotary_emb",
    "input_max",
    "input_min",
    "output_max",
    "output_min",
];

/// Where one tensor lives.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    /// Its file (empty for tensors held in memory).
    pub file: PathBuf,
    /// Its name in the file.
    pub stored_name: String,
    /// Dtype, shape and byte range.
    pub info: TensorInfo,
    /// The array itself, for catalogs built in memory (synthetic models).
    pub array: Option<Array>,
}

/// All tensors of a model folder by canonical name (checkpoint prefixes stripped).
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The model folder.
    pub dir: PathBuf,
    entries: BTreeMap<String, TensorEntry>,
}

/// The canonical name of a stored tensor, or `None` for tensors the text model drops.
pub fn canonical_name(stored: &str) -> Option<&str> {
    let name = [
        "language_model.model.",
        "model.language_model.",
        "language_model.",
        "model.",
    ]
    .iter()
    .find_map(|p| stored.strip_prefix(p))
    .unwrap_or(stored);
    if DROPPED_PREFIXES.iter().any(|p| name.starts_with(p))
        || DROPPED_PARTS.iter().any(|p| name.contains(p))
    {
        return None;
    }
    Some(name)
}

impl Catalog {
    /// Reads the headers of every weight file of `dir`.
    pub fn open(dir: &Path) -> Result<Catalog> {
        let files = weight_files(dir)?;
        let headers = files
            .into_iter()
            .map(|file| Header::read(&file).map(|h| (file, h)))
            .collect::<Result<Vec<_>>>()?;
        Catalog::from_headers(dir, headers, read_index(dir)?)
    }

    /// A catalog of `dir` from headers already read (`(file, header)`, the file a path
    /// inside `dir`) and the folder's `weight_map` (see [`parse_index`]), if it has an
    /// index: canonical names must be unique, and every tensor the index lists must be in
    /// the header of the file it names. [`Catalog::open`] reads the files and calls this;
    /// tests and the fuzz targets call it with headers parsed from memory.
    pub fn from_headers(
        dir: &Path,
        headers: impl IntoIterator<Item = (PathBuf, Header)>,
        index: Option<BTreeMap<String, String>>,
    ) -> Result<Catalog> {
        let mut entries: BTreeMap<String, TensorEntry> = BTreeMap::new();
        for (file, header) in headers {
            for (stored, info) in header.tensors {
                let Some(name) = canonical_name(&stored).map(str::to_owned) else {
                    continue;
                };
                let entry = TensorEntry {
                    file: file.clone(),
                    stored_name: stored.clone(),
                    info,
                    array: None,
                };
                if let Some(prev) = entries.insert(name, entry) {
                    return Err(Error::weights(
                        file.display().to_string(),
                        stored,
                        format!(
                            "also stored as `{}` in {}",
                            prev.stored_name,
                            prev.file.display()
                        ),
                    ));
                }
            }
        }
        if let Some(index) = index {
            for (stored, file) in index {
                let Some(name) = canonical_name(&stored) else {
                    continue;
                };
                let listed = dir.join(&file);
                match entries.get(name) {
                    Some(e) if e.file == listed => {}
                    Some(e) => {
                        return Err(Error::weights(
                            dir.join(INDEX_FILE).display().to_string(),
                            stored,
                            format!("listed in {file} but stored in {}", e.file.display()),
                        ));
                    }
                    None => {
                        return Err(Error::weights(
                            listed.display().to_string(),
                            stored,
                            format!("listed in {INDEX_FILE} but missing from the file's header"),
                        ));
                    }
                }
            }
        }
        Ok(Catalog {
            dir: dir.to_owned(),
            entries,
        })
    }

    /// A catalog over arrays already in memory (canonical names), e.g. a synthetic model.
    pub fn from_arrays(arrays: impl IntoIterator<Item = (String, Array)>) -> Result<Catalog> {
        let mut entries = BTreeMap::new();
        for (name, array) in arrays {
            let dtype = TensorDtype::of(array.dtype()).ok_or_else(|| {
                Error::weights(
                    "(memory)",
                    name.as_str(),
                    format!("dtype {:?} has no safetensors form", array.dtype()),
                )
            })?;
            let shape: Vec<usize> = array.shape().iter().map(|&d| d as usize).collect();
            let bytes = array.nbytes() as u64;
            let info = TensorInfo {
                dtype,
                shape,
                start: 0,
                end: bytes,
            };
            entries.insert(
                name.clone(),
                TensorEntry {
                    file: PathBuf::new(),
                    stored_name: name,
                    info,
                    array: Some(array),
                },
            );
        }
        Ok(Catalog {
            dir: PathBuf::from("(memory)"),
            entries,
        })
    }

    /// The entry of a canonical name.
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.entries.get(name)
    }

    /// Whether a canonical name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Every canonical name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Total bytes of every tensor's data.
    pub fn total_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| e.info.end - e.info.start)
            .sum()
    }

    /// Bytes of one activation element of these weights: the float type of the
    /// embedding table (or of its scales, when quantized), as the loaders decide it.
    pub fn activation_dtype_bytes(&self) -> u64 {
        self.get("embed_tokens.scales")
            .or_else(|| self.get("embed_tokens.weight"))
            .map_or(2, |e| e.info.dtype.size())
    }

    /// Total bytes of the named tensors' data.
    pub fn bytes_of<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> u64 {
        names
            .into_iter()
            .filter_map(|n| self.get(n))
            .map(|e| e.info.end - e.info.start)
            .sum()
    }

    /// Loads the named tensors (lazily, through MLX's safetensors reader) and returns them
    /// by canonical name; `on_file` is called after each file.
    pub fn load(
        &self,
        names: &[String],
        mut on_file: impl FnMut(usize, usize),
    ) -> Result<HashMap<String, Array>> {
        let mut by_file: BTreeMap<&Path, Vec<&str>> = BTreeMap::new();
        let mut out = HashMap::with_capacity(names.len());
        for name in names {
            let entry = self.get(name).ok_or_else(|| {
                Error::weights(self.dir.display().to_string(), name.as_str(), "missing")
            })?;
            match &entry.array {
                Some(a) => {
                    out.insert(name.clone(), a.clone());
                }
                None => by_file.entry(entry.file.as_path()).or_default().push(name),
            }
        }
        let total = by_file.len();
        for (i, (file, wanted)) in by_file.into_iter().enumerate() {
            let mut arrays = Array::load_safetensors(file).map_err(|e| {
                Error::weights(
                    file.display().to_string(),
                    "(file)",
                    format!("MLX could not read it: {e}"),
                )
            })?;
            for name in wanted {
                let stored = &self.entries[name].stored_name;
                let array = arrays.remove(stored).ok_or_else(|| {
                    Error::weights(
                        file.display().to_string(),
                        stored.as_str(),
                        "missing when read by MLX",
                    )
                })?;
                out.insert(name.to_owned(), array);
            }
            on_file(i + 1, total);
        }
        Ok(out)
    }
}

/// The weight files: those the index names, else every `*.safetensors` in `dir`.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Err(Error::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "model folder not found"),
        ));
    }
    if let Some(index) = read_index(dir)? {
        let mut files: Vec<PathBuf> = index.values().map(|f| dir.join(f)).collect();
        files.sort();
        files.dedup();
        for f in &files {
            if !f.is_file() {
                return Err(Error::weights(
                    f.display().to_string(),
                    "(file)",
                    format!("named by {INDEX_FILE} but not found"),
                ));
            }
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors") && p.is_file())
        // Hidden files are partial writes (see `synth::write_folder`), never weights.
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::weights(
            dir.display().to_string(),
            "(file)",
            "no *.safetensors weight files in the folder",
        ));
    }
    Ok(files)
}

/// `weight_map` of the index file, if there is one.
fn read_index(dir: &Path) -> Result<Option<BTreeMap<String, String>>> {
    let path = dir.join(INDEX_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse_index(&path.display().to_string(), &text).map(Some)
}

/// The `weight_map` (tensor -> file name) of the text of a
/// `model.safetensors.index.json`; `file` names it in errors. A file name must stay inside
/// the model folder (no `..`, not absolute).
pub fn parse_index(file: &str, text: &str) -> Result<BTreeMap<String, String>> {
    let value = crate::json::parse(file, text)?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| {
            Error::config(
                file,
                "weight_map",
                "missing; expected an object of tensor -> file",
            )
        })?;
    let mut out = BTreeMap::new();
    for (name, f) in map {
        let f = f
            .as_str()
            .filter(|f| !f.contains("..") && !f.starts_with('/'))
            .ok_or_else(|| {
                Error::config(
                    file,
                    format!("weight_map.{name}"),
                    "expected a file name in the folder",
                )
            })?;
        out.insert(name.clone(), f.to_owned());
    }
    Ok(out)
}
