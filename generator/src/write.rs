//! Applying a generation: the complete set of files it decides, compared with the disk
//! (check mode) or written atomically (a temporary file in the same folder, renamed).
//!
//! Everything is computed before anything is written, so a failing generation leaves
//! every file as it was.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What one path must hold after the generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// These bytes.
    Text(String),
    /// Nothing: the file must not exist (an input the model no longer has).
    Absent,
}

/// A file the generation decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Path relative to the repository root, `/`-separated.
    pub path: String,
    /// What it must hold.
    pub content: Content,
}

/// How a planned file compares with the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Already as planned.
    Fresh,
    /// Missing, to be created.
    Missing,
    /// Present with other bytes.
    Differs,
    /// Present, to be removed.
    Extra,
}

/// Every file a generation decides, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSet {
    files: Vec<Planned>,
}

impl FileSet {
    /// An empty set.
    pub fn new() -> Self {
        FileSet::default()
    }

    /// Plans `path` to hold `text` (a later plan for the same path replaces it).
    pub fn text(&mut self, path: impl Into<String>, text: String) {
        self.put(path.into(), Content::Text(text));
    }

    /// Plans `path` to be absent.
    pub fn absent(&mut self, path: impl Into<String>) {
        self.put(path.into(), Content::Absent);
    }

    fn put(&mut self, path: String, content: Content) {
        match self.files.iter_mut().find(|f| f.path == path) {
            Some(f) => f.content = content,
            None => self.files.push(Planned { path, content }),
        }
    }

    /// The planned files.
    pub fn files(&self) -> &[Planned] {
        &self.files
    }

    /// The text planned for `path`, if any.
    pub fn get(&self, path: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| match &f.content {
                Content::Text(t) => Some(t.as_str()),
                Content::Absent => None,
            })
    }

    /// Whether `path` is planned to be absent.
    pub fn is_absent(&self, path: &str) -> bool {
        self.files
            .iter()
            .any(|f| f.path == path && f.content == Content::Absent)
    }

    /// Each planned file with its state against the tree at `root`.
    pub fn compare(&self, root: &Path) -> Result<Vec<(&Planned, State)>> {
        self.files
            .iter()
            .map(|f| {
                let on_disk = read_if_present(&root.join(&f.path))?;
                let state = match (&f.content, on_disk) {
                    (Content::Text(_), None) => State::Missing,
                    (Content::Text(t), Some(d)) if *t.as_bytes() == *d => State::Fresh,
                    (Content::Text(_), Some(_)) => State::Differs,
                    (Content::Absent, None) => State::Fresh,
                    (Content::Absent, Some(_)) => State::Extra,
                };
                Ok((f, state))
            })
            .collect()
    }

    /// The paths that differ from the tree at `root` (check mode: nothing is written).
    pub fn stale(&self, root: &Path) -> Result<Vec<String>> {
        Ok(self
            .compare(root)?
            .into_iter()
            .filter(|(_, s)| *s != State::Fresh)
            .map(|(f, _)| f.path.clone())
            .collect())
    }

    /// Writes (or removes) every file that differs, each atomically; returns the paths
    /// changed.
    pub fn apply(&self, root: &Path) -> Result<Vec<String>> {
        let mut changed = Vec::new();
        for (f, state) in self.compare(root)? {
            let path = root.join(&f.path);
            match (&f.content, state) {
                (_, State::Fresh) => continue,
                (Content::Text(t), _) => write_atomic(&path, t.as_bytes())?,
                (Content::Absent, _) => {
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?
                }
            }
            changed.push(f.path.clone());
        }
        Ok(changed)
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder, renamed into
/// place (readers see the old file or the new one, never a part).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}
