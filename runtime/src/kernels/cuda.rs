//! A CUDA kernel of ours run by MLX (`mlx_fast_cuda_kernel`, which mlx-rs does not
//! wrap): compiled by MLX's NVRTC at its first evaluation and cached by name, launched as
//! one node of MLX's CUDA graph, its outputs MLX arrays like any other op's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};

use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};

/// A compile-time parameter of a kernel (`constexpr` in its body, part of its name).
#[derive(Debug, Clone, Copy)]
pub enum Template {
    /// `using NAME = <cuda type>;`
    Dtype(&'static CStr, Dtype),
    /// `constexpr int NAME = v;`
    Int(&'static CStr, i32),
    /// `constexpr bool NAME = v;`
    Bool(&'static CStr, bool),
}

/// What one kernel is: its source and the names of its inputs and outputs, in order.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    /// A name unique to this source and `defines` (MLX caches compiled kernels by name,
    /// and so do we).
    pub name: &'static str,
    /// The body of the `__global__` function MLX wraps around it.
    pub body: &'static str,
    /// Preprocessor definitions put before the shared header.
    pub defines: Vec<(&'static str, i32)>,
    /// Input parameter names (each a `const T*` of its array's dtype).
    pub inputs: Vec<&'static str>,
    /// Output parameter names.
    pub outputs: Vec<&'static str>,
    /// Whether MLX copies every input that is not row-contiguous before the launch; a
    /// kernel that reads its inputs' strides (`NAME_strides` in its body) says false.
    pub contiguous: bool,
    /// Whether the body uses the shared helpers (`kernels/fused.cuh`); a kernel that does
    /// not leaves them out, since MLX copies and hashes a kernel's whole text each call.
    pub shared_header: bool,
}

/// `source` without its comments, indentation and blank lines: the same program in less
/// text. MLX assembles a custom kernel's source at every call and hashes all of it at
/// every evaluation (MLX 0.32.2 `custom_kernel.cpp`), so a call's host cost grows with
/// the text; our kernels' comments are most of it. Lines stay lines (preprocessor
/// directives and `#pragma`s need theirs). The kernels hold no `//` inside a string and no
/// block comment (a unit test checks).
pub fn compact(source: &str) -> String {
    let mut out = String::with_capacity(source.len() / 2);
    for line in source.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let code = code.trim();
        if !code.is_empty() {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}

/// The helpers every kernel body uses.
const HEADER: &str = include_str!("../../kernels/fused.cuh");

/// One call: the grid in threads and the block in threads (x only), the outputs' shapes
/// (all of dtype `dtype`), the template parameters.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Total threads along x.
    pub threads: i32,
    /// Threads per block along x.
    pub block: i32,
    /// Output shapes, one per output name.
    pub output_shapes: Vec<Vec<i32>>,
    /// Dtype of every output.
    pub dtype: Dtype,
    /// Template parameters.
    pub template: &'a [Template],
}

struct Handle(mlx_sys::mlx_fast_cuda_kernel);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from mlx_fast_cuda_kernel_new and is freed once.
        unsafe { mlx_sys::mlx_fast_cuda_kernel_free(self.0) };
    }
}

thread_local! {
    static KERNELS: RefCell<HashMap<&'static str, Handle>> = RefCell::new(HashMap::new());
}

/// RAII owners of the mlx-c objects one call makes.
struct Strings(mlx_sys::mlx_vector_string);
impl Drop for Strings {
    fn drop(&mut self) {
        // SAFETY: created by mlx_vector_string_new, freed once.
        unsafe { mlx_sys::mlx_vector_string_free(self.0) };
    }
}
struct Arrays(mlx_sys::mlx_vector_array);
impl Drop for Arrays {
    fn drop(&mut self) {
        // SAFETY: created by mlx_vector_array_new, freed once.
        unsafe { mlx_sys::mlx_vector_array_free(self.0) };
    }
}
struct Config(mlx_sys::mlx_fast_cuda_kernel_config);
impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: created by mlx_fast_cuda_kernel_config_new, freed once.
        unsafe { mlx_sys::mlx_fast_cuda_kernel_config_free(self.0) };
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Unsupported(format!("a NUL byte in kernel text {s:?}")))
}

fn strings(names: &[&str]) -> Result<Strings> {
    // SAFETY: a fresh vector, appended to with live C strings (copied by mlx-c).
    let v = Strings(unsafe { mlx_sys::mlx_vector_string_new() });
    for n in names {
        let c = cstring(n)?;
        unsafe { mlx_sys::mlx_vector_string_append_value(v.0, c.as_ptr()) };
    }
    Ok(v)
}

fn failed(what: &str, name: &str) -> Error {
    Error::Unsupported(format!("the CUDA kernel {name}: {what} failed"))
}

fn create(spec: &KernelSpec) -> Result<Handle> {
    let mut header = String::new();
    for (name, value) in &spec.defines {
        header.push_str(&format!("#define {name} {value}\n"));
    }
    if spec.shared_header {
        header.push_str(&compact(HEADER));
    }
    let body = compact(spec.body);
    let (name, body, header) = (cstring(spec.name)?, cstring(&body)?, cstring(&header)?);
    let (inputs, outputs) = (strings(&spec.inputs)?, strings(&spec.outputs)?);
    // SAFETY: every argument is a live C string or vector; mlx-c copies them.
    let handle = unsafe {
        mlx_sys::mlx_fast_cuda_kernel_new(
            name.as_ptr(),
            inputs.0,
            outputs.0,
            body.as_ptr(),
            header.as_ptr(),
            spec.contiguous,
            0,
        )
    };
    if handle.ctx.is_null() {
        return Err(failed("creation", spec.name));
    }
    Ok(Handle(handle))
}

/// Runs the kernel named `name` on `inputs` (one per input name), returning one array
/// per output name; `spec` describes it the first time this thread calls it. MLX compiles
/// it at its first evaluation.
pub fn call(
    name: &'static str,
    spec: impl FnOnce() -> KernelSpec,
    inputs: &[&Array],
    launch: &Launch<'_>,
) -> Result<Vec<Array>> {
    KERNELS.with(|k| {
        let mut k = k.borrow_mut();
        if !k.contains_key(name) {
            let spec = spec();
            k.insert(name, create(&spec)?);
        }
        apply(&k[name], name, inputs, launch)
    })
}

fn apply(
    kernel: &Handle,
    name: &str,
    inputs: &[&Array],
    launch: &Launch<'_>,
) -> Result<Vec<Array>> {
    // SAFETY: mlx-c calls on live objects; every object made here is freed by its owner,
    // the output arrays by the `Array`s made from them.
    unsafe {
        let config = Config(mlx_sys::mlx_fast_cuda_kernel_config_new());
        let dtype = launch.dtype as mlx_sys::mlx_dtype;
        let mut status = 0;
        for shape in &launch.output_shapes {
            status |= mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                config.0,
                shape.as_ptr(),
                shape.len(),
                dtype,
            );
        }
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, launch.threads, 1, 1);
        status |=
            mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, launch.block, 1, 1);
        for t in launch.template {
            status |= match *t {
                Template::Dtype(t, d) => {
                    mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                        config.0,
                        t.as_ptr(),
                        d as mlx_sys::mlx_dtype,
                    )
                }
                Template::Int(t, v) => mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                    config.0,
                    t.as_ptr(),
                    v,
                ),
                Template::Bool(t, v) => mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_bool(
                    config.0,
                    t.as_ptr(),
                    v,
                ),
            };
        }
        if status != 0 {
            return Err(failed("configuration", name));
        }
        let ins = Arrays(mlx_sys::mlx_vector_array_new());
        for a in inputs {
            mlx_sys::mlx_vector_array_append_value(ins.0, a.as_ptr());
        }
        // mlx-c fills the vector it is given in place.
        let mut outs = Arrays(mlx_sys::mlx_vector_array_new());
        let stream = mlx_rs::StreamOrDevice::default();
        if mlx_sys::mlx_fast_cuda_kernel_apply(
            &mut outs.0,
            kernel.0,
            ins.0,
            config.0,
            stream.as_ref().as_ptr(),
        ) != 0
        {
            return Err(failed("launch", name));
        }
        let n = mlx_sys::mlx_vector_array_size(outs.0);
        let mut result = Vec::with_capacity(n);
        for i in 0..n {
            let mut a = mlx_sys::mlx_array_new();
            if mlx_sys::mlx_vector_array_get(&mut a, outs.0, i) != 0 {
                mlx_sys::mlx_array_free(a);
                return Err(failed("reading the outputs", name));
            }
            result.push(Array::from_ptr(a));
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::compact;

    const SOURCES: [&str; 8] = [
        include_str!("../../kernels/fused.cuh"),
        include_str!("../../kernels/decode_attention.cu"),
        include_str!("../../kernels/decode_attention_merge.cu"),
        include_str!("../../kernels/geglu.cu"),
        include_str!("../../kernels/norm.cu"),
        include_str!("../../kernels/qkv.cu"),
        include_str!("../../kernels/qmv.cu"),
        include_str!("../../kernels/residual.cu"),
    ];

    #[test]
    fn compacting_drops_comments_and_keeps_every_line_of_code() {
        assert_eq!(
            compact("  // why\n#if A // note\n  int x = 1;  // one\n\n#endif\n"),
            "#if A\nint x = 1;\n#endif\n"
        );
        for source in SOURCES {
            // The rule assumes no block comments and no `//` inside a string literal.
            assert!(!source.contains("/*"), "a block comment in a kernel");
            assert!(
                !source
                    .lines()
                    .any(|l| l.contains('"') && l.contains("//") && l.find('"') < l.find("//")),
                "a quote before a `//` in a kernel line"
            );
            let c = compact(source);
            assert!(!c.contains("//"));
            assert!(c.len() < source.len());
            let code = |s: &str| -> Vec<String> {
                s.lines()
                    .map(|l| l.split("//").next().unwrap_or("").trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect()
            };
            assert_eq!(code(source), code(&c));
        }
    }
}
