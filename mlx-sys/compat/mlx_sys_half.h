/* Force-included into every mlx-c translation unit and into bindgen.
 *
 * mlx-c declares float16_t/bfloat16_t (and the f16/bf16 item and data functions that
 * mlx-rs calls) only on aarch64. Elsewhere they become 16-bit storage types: MLX reads and
 * writes them by plain bit copy, so values pass through unchanged. */
#ifndef MLX_SYS_HALF_H
#define MLX_SYS_HALF_H

#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC)
#include <stdint.h>
typedef uint16_t float16_t;
typedef uint16_t bfloat16_t;
#define HAS_FLOAT16
#define HAS_BFLOAT16
#endif

#endif
