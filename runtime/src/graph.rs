//! Counting the operations of a lazy graph: what one forward step asks MLX to run.

use std::io::Read;

use mlx_rs::Array;

use crate::error::{Error, Result};

/// The DOT text MLX writes for the graph of `outputs` (not evaluated).
pub fn dot(outputs: &[&Array]) -> Result<String> {
    // SAFETY: plain calls into mlx-c and libc with objects created and freed here;
    // the arrays outlive the call.
    unsafe {
        let vector = mlx_sys::mlx_vector_array_new();
        for a in outputs {
            mlx_sys::mlx_vector_array_append_value(vector, a.as_ptr());
        }
        let file = libc::tmpfile();
        if file.is_null() {
            mlx_sys::mlx_vector_array_free(vector);
            return Err(Error::Request(
                "could not open a temporary file for the graph".into(),
            ));
        }
        let namer = mlx_sys::mlx_node_namer_new();
        let status = mlx_sys::mlx_export_to_dot(file as *mut _, namer, vector);
        mlx_sys::mlx_node_namer_free(namer);
        mlx_sys::mlx_vector_array_free(vector);
        libc::fflush(file);
        libc::rewind(file);
        let fd = libc::dup(libc::fileno(file));
        libc::fclose(file);
        if status != 0 || fd < 0 {
            return Err(Error::Request("MLX could not export the graph".into()));
        }
        let mut text = String::new();
        let mut f = <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd);
        f.read_to_string(&mut text)
            .map_err(|e| Error::io("(graph)", e))?;
        Ok(text)
    }
}

/// The operations (primitive nodes) in the graph of `outputs`.
pub fn count_ops(outputs: &[&Array]) -> Result<usize> {
    Ok(primitives(&dot(outputs)?).count())
}

/// The primitive names of the operation nodes of a DOT graph MLX wrote, one per node.
pub fn primitives(dot: &str) -> impl Iterator<Item = &str> {
    dot.lines()
        .filter(|l| l.contains("shape=rectangle"))
        .map(|l| {
            l.split_once("label =\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map_or("?", |(name, _)| name)
        })
}

/// How many operation nodes of each primitive a DOT graph holds.
pub fn histogram(dot: &str) -> std::collections::BTreeMap<String, usize> {
    let mut h = std::collections::BTreeMap::new();
    for name in primitives(dot) {
        *h.entry(name.to_owned()).or_insert(0) += 1;
    }
    h
}
