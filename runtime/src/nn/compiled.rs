//! Functions compiled once per thread (mlx `compile`, shapeless), as the reference
//! compiles its activations.

use std::cell::RefCell;
use std::collections::HashMap;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::error::{Error, Result};

type Compiled = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// Which compiled function: its name and a constant it closes over (its bits; 0 when
/// none), as the reference's compile cache keys on the Python scalars it is called with.
pub type Key = (&'static str, u64);

thread_local! {
    static COMPILED: RefCell<HashMap<Key, Compiled>> = RefCell::new(HashMap::new());
    static COMPILED_SHAPED: RefCell<HashMap<Key, Compiled>> = RefCell::new(HashMap::new());
}

/// Runs the compiled function `key` (compiled from `f`, shapeless, at its first use on
/// this thread) on `args`, returning its one output.
pub fn call(
    key: Key,
    args: &[&Array],
    f: impl Fn(&[Array]) -> Result<Array> + 'static,
) -> Result<Array> {
    call_many(key, args, true, move |a| Ok(vec![f(a)?]))?
        .pop()
        .ok_or_else(|| Error::Unsupported(format!("the compiled {} returned nothing", key.0)))
}

/// Runs the compiled function `key` (compiled from `f` at its first use on this thread,
/// shapeless when `shapeless`; else MLX recompiles it for each new input shape, as
/// `mx.compile` does without `shapeless=True`) on `args`, returning all its outputs.
pub fn call_many(
    key: Key,
    args: &[&Array],
    shapeless: bool,
    f: impl Fn(&[Array]) -> Result<Vec<Array>> + 'static,
) -> Result<Vec<Array>> {
    let cache = if shapeless {
        &COMPILED
    } else {
        &COMPILED_SHAPED
    };
    cache.with(|c| {
        let mut c = c.borrow_mut();
        let compiled = c.entry(key).or_insert_with(|| {
            let traced = move |a: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                f(a).map_err(|e| Exception::custom(e.to_string()))
            };
            Box::new(mlx_rs::transforms::compile::compile(traced, shapeless))
        });
        let args: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
        Ok(compiled(&args)?)
    })
}
