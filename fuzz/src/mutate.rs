//! The fuzz targets' mutator: a third of the time libFuzzer's own byte mutations (broken
//! syntax, truncations), otherwise an edit of one part of the input, made on its parsed
//! JSON when it has any, written back well-formed.

use serde_json::{Map, Number, Value};

use crate::{join, split};

/// A small deterministic generator (xorshift64*): libFuzzer replays a mutation from its
/// seed, so nothing here may draw from elsewhere.
pub struct Rng(u64);

impl Rng {
    /// A generator for libFuzzer's `seed`.
    pub fn new(seed: u32) -> Self {
        Rng((u64::from(seed) << 1 | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }

    /// True once in `n` draws on average.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.bits().is_multiple_of(n)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Integers at the edges of what the loaders check: small counts, powers of two and their
/// neighbours (group sizes, bit widths, head dims), and the i32, u32, 2^53 and u64 limits
/// (MLX indexes with i32; JSON readers round above 2^53).
const INTEGERS: [u64; 37] = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    16,
    31,
    32,
    33,
    63,
    64,
    65,
    127,
    128,
    255,
    256,
    512,
    1024,
    4096,
    65535,
    65536,
    1 << 24,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    1 << 53,
    (1 << 53) + 1,
    1 << 62,
    (1 << 63) - 1,
    1 << 63,
    u64::MAX,
];

/// Floats at the edges of the checks (factors in (0, 1], positive epsilons and thetas)
/// and of f64.
const FLOATS: [f64; 14] = [
    0.0,
    -0.0,
    0.25,
    0.5,
    1.0,
    1.5,
    2.0,
    -1.0,
    1e-300,
    5e-324,
    1e300,
    f64::MAX,
    f64::MIN,
    0.333_333_333_333_333_3,
];

/// Strings the loaders compare against, and awkward ones.
const STRINGS: [&str; 27] = [
    "",
    "sliding_attention",
    "full_attention",
    "default",
    "proportional",
    "affine",
    "mxfp4",
    "gemma4",
    "gemma4_text",
    "BF16",
    "F16",
    "F32",
    "U32",
    "I64",
    "BOOL",
    "F8_E4M3",
    "__metadata__",
    "../outside.safetensors",
    "/absolute.safetensors",
    "model-00001-of-00002.safetensors",
    "model.layers.0.mlp.gate_proj.scales",
    "<bos>",
    "<unk>",
    "{{ raise_exception('x') }}",
    "\u{0}",
    "é",
    "🙂",
];

/// libFuzzer's entry: mutates `data[..size]` into at most `max_size` bytes.
pub fn mutate(data: &mut [u8], size: usize, max_size: usize, seed: u32) -> usize {
    let mut rng = Rng::new(seed);
    if rng.one_in(3) {
        return libfuzzer_sys::fuzzer_mutate(data, size, max_size);
    }
    let mut parts: Vec<Vec<u8>> = split(&data[..size])
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    if rng.one_in(10) {
        reshape(&mut parts, &mut rng);
    } else {
        let i = rng.below(parts.len());
        let part = std::mem::take(&mut parts[i]);
        parts[i] = mutate_part(part, &mut rng);
    }
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let joined = join(&refs);
    if joined.len() > max_size {
        return libfuzzer_sys::fuzzer_mutate(data, size, max_size);
    }
    data[..joined.len()].copy_from_slice(&joined);
    joined.len()
}

/// Files dropped, repeated, added empty, or swapped.
fn reshape(parts: &mut Vec<Vec<u8>>, rng: &mut Rng) {
    let i = rng.below(parts.len());
    match rng.below(4) {
        0 if parts.len() > 1 => {
            parts.remove(i);
        }
        1 if parts.len() < crate::MAX_PARTS => {
            let copy = parts[i].clone();
            parts.insert(i, copy);
        }
        2 if parts.len() < crate::MAX_PARTS => parts.insert(i, Vec::new()),
        _ => {
            let j = rng.below(parts.len());
            parts.swap(i, j);
        }
    }
}

/// One file edited: as JSON, as a safetensors file (its header as JSON), else as bytes.
fn mutate_part(part: Vec<u8>, rng: &mut Rng) -> Vec<u8> {
    if let Ok(mut value) = serde_json::from_slice::<Value>(&part) {
        edit_value(&mut value, rng);
        return serde_json::to_vec(&value).unwrap_or(part);
    }
    if let Some(out) = mutate_safetensors(&part, rng) {
        return out;
    }
    let mut buf = part;
    let len = buf.len();
    buf.resize(len + 64, 0);
    let cap = buf.len();
    let new_len = libfuzzer_sys::fuzzer_mutate(&mut buf, len, cap);
    buf.truncate(new_len);
    buf
}

/// A safetensors file with its header edited; mostly with the length prefix rewritten to
/// match, sometimes not, sometimes with the data cut short or grown.
fn mutate_safetensors(part: &[u8], rng: &mut Rng) -> Option<Vec<u8>> {
    let len = u64::from_le_bytes(part.get(..8)?.try_into().ok()?);
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    let mut header: Value = serde_json::from_slice(part.get(8..end)?).ok()?;
    edit_value(&mut header, rng);
    let text = serde_json::to_vec(&header).ok()?;
    let mut prefix = text.len() as u64;
    if rng.one_in(16) {
        prefix = prefix.wrapping_add(rng.bits() % 17).wrapping_sub(8);
    }
    let mut data = part[end..].to_vec();
    if rng.one_in(8) {
        let n = data.len();
        if rng.one_in(2) {
            data.truncate(rng.below(n + 1));
        } else {
            data.resize(n + rng.below(256), 0);
        }
    }
    let mut out = prefix.to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&data);
    Some(out)
}

/// One to three edits of random nodes of `root`.
pub fn edit_value(root: &mut Value, rng: &mut Rng) {
    for _ in 0..1 + rng.below(3) {
        let nodes = count(root);
        let donor = nth(root, rng.below(nodes)).cloned().unwrap_or(Value::Null);
        let words = strings(root);
        if let Some(node) = nth_mut(root, &mut rng.below(nodes)) {
            edit_node(node, donor, &words, rng);
        }
    }
}

fn edit_node(node: &mut Value, donor: Value, words: &[String], rng: &mut Rng) {
    // A fifth of the time the node becomes something else entirely.
    if rng.one_in(5) {
        *node = match rng.below(6) {
            0 => Value::Null,
            1 => Value::Bool(rng.one_in(2)),
            2 => Value::String((*rng.pick(&STRINGS)).to_owned()),
            3 => Value::Array(Vec::new()),
            4 => Value::Object(Map::new()),
            _ => donor,
        };
        return;
    }
    match node {
        Value::Number(n) => *node = Value::Number(edit_number(n, rng)),
        Value::Bool(b) => *b = !*b,
        Value::String(s) => {
            *s = match rng.below(3) {
                0 if !words.is_empty() => rng.pick(words).clone(),
                1 => format!("{s}{}", rng.pick(&STRINGS)),
                _ => (*rng.pick(&STRINGS)).to_owned(),
            }
        }
        Value::Array(items) => {
            let n = items.len();
            match rng.below(4) {
                0 if n > 0 => {
                    items.remove(rng.below(n));
                }
                1 if n > 0 => {
                    let copy = items[rng.below(n)].clone();
                    items.insert(rng.below(n + 1), copy);
                }
                2 if n > 0 => items.truncate(rng.below(n)),
                _ => items.push(donor),
            }
        }
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            match rng.below(3) {
                0 if !keys.is_empty() => {
                    map.remove(rng.pick(&keys));
                }
                1 if !words.is_empty() => {
                    map.insert(rng.pick(words).clone(), donor);
                }
                _ => {
                    map.insert((*rng.pick(&STRINGS)).to_owned(), donor);
                }
            }
        }
        Value::Null => *node = Value::Number(Number::from(*rng.pick(&INTEGERS))),
    }
}

fn edit_number(n: &Number, rng: &mut Rng) -> Number {
    let int = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
    let edited: i128 = match (rng.below(4), int) {
        (0, _) => i128::from(*rng.pick(&INTEGERS)),
        (1, _) => {
            return Number::from_f64(*rng.pick(&FLOATS)).unwrap_or_else(|| Number::from(0));
        }
        (2, Some(i)) => match rng.below(6) {
            0 => i + 1,
            1 => i - 1,
            2 => i * 2,
            3 => i / 2,
            4 => -i,
            _ => i * 1000,
        },
        (_, Some(_)) => -i128::from(*rng.pick(&INTEGERS)),
        (_, None) => {
            let f = n.as_f64().unwrap_or(0.0);
            let g = match rng.below(3) {
                0 => f * 2.0,
                1 => -f,
                _ => f / 3.0,
            };
            return Number::from_f64(g).unwrap_or_else(|| Number::from(0));
        }
    };
    u64::try_from(edited)
        .map(Number::from)
        .or_else(|_| i64::try_from(edited).map(Number::from))
        .unwrap_or_else(|_| Number::from(u64::MAX))
}

/// Nodes of `v`, itself included.
fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// The `k`-th node of `v` in depth-first order.
fn nth(v: &Value, k: usize) -> Option<&Value> {
    fn walk<'a>(v: &'a Value, k: &mut usize) -> Option<&'a Value> {
        if *k == 0 {
            return Some(v);
        }
        *k -= 1;
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => return None,
        };
        for child in children {
            if let Some(found) = walk(child, k) {
                return Some(found);
            }
        }
        None
    }
    walk(v, &mut { k })
}

/// [`nth`], mutably.
fn nth_mut<'a>(v: &'a mut Value, k: &mut usize) -> Option<&'a mut Value> {
    if *k == 0 {
        return Some(v);
    }
    *k -= 1;
    match v {
        Value::Array(items) => items.iter_mut().find_map(|child| nth_mut(child, k)),
        Value::Object(map) => map.values_mut().find_map(|child| nth_mut(child, k)),
        _ => None,
    }
}

/// Object keys and strings of `v` (up to 256), for edits that reuse the file's own words.
fn strings(v: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        if out.len() >= 256 {
            return;
        }
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => {
                for (k, child) in map {
                    out.push(k.clone());
                    walk(child, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}
