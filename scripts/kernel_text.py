"""The kernel text the Rust runtime hands MLX, shared by the probes in scripts/."""


def compact(source):
    """runtime/src/kernels/cuda.rs, compact: comments, indentation and blank lines
    dropped (MLX's host cost per call grows with the text)."""
    out = []
    for line in source.splitlines():
        code = line.split("//", 1)[0].strip()
        if code:
            out.append(code + "\n")
    return "".join(out)
